"""The preflight's look at what the user brought, before anything is written: their model, data module, callbacks
and trackers (``cli/preflight.py`` calls ``check`` once per distinct config, and each check here is cached per
distinct piece, so a sweep of 1,000 jobs over one model builds it once).

- a model of one's own (``model=custom``) and a data module of one's own (``data=custom``): the library's own checks,
  ``models/own_check.py`` and ``data/own_check.py`` (a notebook's ``initnorm.parameterize`` and fit get the same lines),
  called here once per distinct piece;
- a callback named by a path of one's own: it imports, it builds, it is a Lightning ``Callback``;
- a tracker's URI (``logger.mlflow.tracking_uri``): a scheme MLflow knows, a local store whose folder can be
  written, a server that answers within ``CONNECT_TIMEOUT_S`` (MLflow's own retries stall a job minutes on one
  that does not).

An exception raised inside the user's code is named as theirs (its type and message, and the file and line it came
from: ``own_errors.yours``), never as a bug in initnorm's checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from initnorm.data.own_check import first_batch
from initnorm.errors import ConfigError
from initnorm.models.own_check import check_forward
from initnorm.own_errors import yours

CONNECT_TIMEOUT_S = 2.0
# The tracking URI schemes MLflow's stores take (a database's may name its driver: postgresql+psycopg2).
MLFLOW_SCHEMES = ("file", "sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")
OURS = ("initnorm.", "lightning.", "pytorch_lightning.")  # callbacks the package ships or names: not the user's code


def _once(seen: dict[Any, Any], kind: str, node: Any) -> bool:
    """True the first time ``node`` (a config node) is seen for ``kind``: each distinct piece is checked once."""
    key = f"{kind}:" + json.dumps(node, sort_keys=True, default=str)
    first = key not in seen
    seen[key] = True
    return first


def check(c: Mapping[str, Any], seen: dict[Any, Any]):
    """Every piece of the user's own in the checked config ``c``; returns the data module it set up (or None)."""
    check_callbacks(c.get("callbacks") or {}, seen)
    check_trackers(c.get("logger"), seen)
    return own_data(c, seen)


def own_data(c: Mapping[str, Any], seen: dict[Any, Any]):
    """``data=custom``'s module, set up, its first batch checked (``data/own_check.py``), once per distinct data node and
    batch size (kept in ``seen``); None for initnorm's own data."""
    d = c["data"]
    if "_target_" not in d:
        return None
    key = "data:" + json.dumps([d, c["batch_size"]], sort_keys=True, default=str)
    if key not in seen:
        from initnorm.training.tasks import TASKS

        seen[key] = data = TASKS.get(d["kind"]).make_data(c)
        data.setup("fit")  # its first batch checked there (data/own_check.py)
    return seen[key]


def check_model(c: Mapping[str, Any], data, seen: dict[Any, Any]) -> None:
    """``model=custom``: built for real at its base width on the CPU, one forward of two examples of the first batch
    (``models/own_check.py``). Once per distinct model node and data."""
    m = c["model"]
    if "_target_" not in m or not _once(seen, "forward", [m, c["data"]]):
        return
    check_forward(m, data.vocab_size, first_batch(data, "data"))


def check_callbacks(node: Mapping[str, Any], seen: dict[Any, Any]) -> None:
    """Each callback of a path of one's own imports, builds and is a Lightning ``Callback`` (once per distinct node)."""
    for name, cb in node.items():
        target = cb.get("_target_") if isinstance(cb, Mapping) else None
        if not isinstance(target, str) or target.startswith(OURS) or not _once(seen, "callback", cb):
            continue
        from hydra.utils import instantiate
        from lightning.pytorch.callbacks import Callback

        from initnorm.registry import import_dotted

        key = f"callbacks.{name}._target_"
        import_dotted(target, key, fix=f"fix it with `{key}=mypkg.callbacks.MyCallback`, or drop it with `~callbacks.{name}`")
        try:
            made = instantiate(dict(cb))
        except Exception as exc:
            cause = exc.__cause__ or exc  # Hydra wraps the constructor's own error
            raise yours(cause, f"callbacks.{name} ({target})") from exc
        if not isinstance(made, Callback):
            raise ConfigError(f"{key}={target} made a {type(made).__name__}, not a Lightning Callback; fix it with `{key}=<a class of "
                              f"lightning.pytorch.callbacks.Callback>`, or drop it with `~callbacks.{name}`")


def check_trackers(node: Mapping[str, Any] | None, seen: dict[Any, Any]) -> None:
    """Each tracker's ``tracking_uri``: a scheme MLflow knows, a local store that can be written, a server that answers."""
    from initnorm.training import trackers

    for name, n in trackers.nodes(node).items():
        uri = n.get("tracking_uri")
        if not isinstance(uri, str) or not uri or not _once(seen, "tracker", uri):
            continue
        key = f"logger.{name}.tracking_uri" if name != "logger" else "logger.tracking_uri"
        check_uri(trackers.store_uri(uri, Path.cwd()), uri, key)


def check_uri(resolved: str, uri: str, key: str) -> None:
    """One line for a URI no store can be opened at: an unknown scheme, a folder that cannot be written, a server that
    does not answer within ``CONNECT_TIMEOUT_S``."""
    import socket

    from initnorm.cli.disk import check_writable

    fix = f"fix it with `{key}=mlflow.db` (a local store)"
    parts = urlsplit(resolved)
    scheme = parts.scheme.partition("+")[0]
    if scheme not in MLFLOW_SCHEMES:
        raise ConfigError(f"{key}={uri!r}: {scheme or 'no'} scheme, which MLflow does not know (known: {', '.join(MLFLOW_SCHEMES)}); {fix}")
    if scheme in ("file", "sqlite"):
        # file:///abs/store; sqlite:////abs/x.db (four slashes: absolute) or sqlite:///x.db (relative)
        folder = Path(parts.path) if scheme == "file" else Path(resolved.partition("://")[2][1:] or ".").parent
        try:
            check_writable(folder, f"{key}=mlflow.db")
        except ConfigError as exc:
            raise ConfigError(f"{key}={uri!r}: {exc}") from None
        return
    if scheme in ("http", "https"):
        port = parts.port or (443 if scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname or "localhost", port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
            raise ConfigError(f"{key}={uri!r}: no server answers at {parts.hostname}:{port} ({why} within {CONNECT_TIMEOUT_S:g} s); "
                              f"start it, or {fix}") from None

