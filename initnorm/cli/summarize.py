"""Rebuild a sweep's summary from its folder: ``python -m initnorm.summarize PATH``."""

import sys

from initnorm.cli.console import summary_text
from initnorm.cli.disk import cannot_write
from initnorm.summary import summarize


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m initnorm.summarize SWEEP_FOLDER", file=sys.stderr)
        return 2
    try:
        print(summary_text(args[0], summarize(args[0])), end="")
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only folder, a full disk: where, and what to do
        print(f"error: {cannot_write(exc, args[0])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
