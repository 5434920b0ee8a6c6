"""The one error type a user sees for bad input.

Every check in the project raises ``ConfigError`` with one line that names the bad value,
what is allowed, and the override that fixes it, so a user can act on it without reading code. The entry points catch
it and print the line without a traceback unless ``HYDRA_FULL_ERROR=1``.
"""


class ConfigError(ValueError):
    """A bad value in the composed config (or in data it points at), explained in one line."""


def bad_value(key: str, value, allowed: str, fix: str | None = None) -> ConfigError:
    """Build the standard one-line message: ``key=value is invalid: allowed ...; fix: override``."""
    msg = f"{key}={value!r} is invalid: {allowed}"
    if fix:
        msg += f"; fix it with `{fix}`"
    return ConfigError(msg)
