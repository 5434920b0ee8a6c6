"""``python -m initnorm.train``'s command line, read once, with Hydra's own parser.

The command reads its arguments before Hydra does: to start a vectorised sweep's workers early
(``workers.py``), to refuse a flag combination in one line (``console.check_flags``), to compose and
check every job (``preflight.py``), to say what it will do. Each of these reads the :class:`CommandLine`
that :func:`parse` made, so no two of them can read the same arguments differently. Hydra (~0.5 s to
import) is the only import: the command's first module calls this before torch is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommandLine:
    argv: tuple[str, ...]
    overrides: tuple[str, ...]  # key=value, in order
    multirun: bool
    cfg: str | None  # --cfg job|hydra|all
    config_name: str | None
    runs_jobs: bool  # False for --help, --cfg, --info ..., and a command line that names its own config folder
    config_dir: str | None = None  # --config-dir: a folder added to the config search path

    def value(self, key: str, default: str | None = None) -> str | None:
        """The last value given to ``key`` (``+key=``, ``++key=`` and ``~key=`` count), else ``default``."""
        found = [o.partition("=")[2] for o in self.overrides if "=" in o and o.partition("=")[0].lstrip("+~") == key]
        return found[-1] if found else default


def parse(argv: list[str] | tuple[str, ...]) -> CommandLine:
    """Hydra's reading of ``argv`` (``SystemExit`` 2 with argparse's line for an unknown flag, as Hydra would)."""
    from initnorm.cli.hydra_adapter import get_args_parser

    args = get_args_parser().parse_args(list(argv))
    elsewhere = (args.help or args.hydra_help or args.cfg or args.info or args.shell_completion or args.experimental_rerun
                 or args.config_dir or args.config_path)
    return CommandLine(tuple(argv), tuple(args.overrides), bool(args.multirun), args.cfg, args.config_name, not elsewhere,
                       args.config_dir)
