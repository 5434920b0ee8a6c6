"""Rebuild a sweep's summary from its folder: ``python -m initnorm.summarize SWEEP_FOLDER``.

Reads every job's metrics.json below the folder (or, where there is none, the folder's runs.csv,
as results/ keeps) and writes summary.md, summary.csv, runs.csv, the figures the jobs name and,
for a sweep of a rate x any transfer axis (width, depth, batch size, steps or tokens, weight decay), the transfer
table and the loss-against-rate figure; prints the table and the transfer verdicts.
"""

import argparse
import sys

from initnorm.cli.console import summary_text
from initnorm.cli.disk import cannot_write
from initnorm.errors import ConfigError
from initnorm.summary import summarize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m initnorm.summarize", description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("folder", metavar="SWEEP_FOLDER", help="a sweep folder (outputs/multirun/<time>_<id>) or a folder holding a runs.csv")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(summary_text(a.folder, summarize(a.folder)), end="")
    except (FileNotFoundError, ConfigError) as exc:  # no sweep there, or a runs.csv initnorm did not write
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a read-only folder, a full disk: where, and what to do
        print(f"error: {cannot_write(exc, a.folder)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
