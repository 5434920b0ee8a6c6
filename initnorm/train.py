"""`python -m initnorm.train` (and the `initnorm-train` script): the command lives in initnorm/cli/train.py.

This module stays light: a vectorised sweep's worker processes start before torch and Lightning
are imported here (initnorm/cli/workers.py, initnorm/launch/workers.py), so both import at the same time.
"""

import gc
import logging
import sys

from initnorm.cli import argv, disk, workers
from initnorm.cli import signals as cli_signals


def main() -> None:
    cli_signals.record_from_now()  # first: a stop signal at any point of the command is recorded, and honoured
    disk.set_aside_compiler_cache()  # before torch is imported, here and in the workers
    # A read-only HOME: matplotlib (imported with the summary) printed two lines about its cache folder
    # before the one line that says what is wrong; it uses a temporary folder all the same.
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    if "--version" in sys.argv[1:]:  # before Hydra's parser, whose own --version names only Hydra
        from initnorm.cli.console import versions

        print(versions())
        return
    cmd = argv.parse(sys.argv[1:])  # the command line, read once (cli/argv.py)
    if cmd.multirun and cmd.runs_jobs:  # at once: the imports, then checking thousands of jobs, take seconds before the plan
        print("sweep: composing and checking every job before any trains", flush=True)
    try:
        with workers.early(cmd):
            collecting = gc.isenabled()
            gc.disable()  # during torch's and Hydra's imports: a quarter of their CPU (initnorm/collector.py)
            try:
                from initnorm.cli.train import main as run
            finally:
                if collecting:
                    gc.enable()

            run(cmd)
    finally:
        # Everything is written by now. The interpreter's last garbage collections would walk every
        # object torch and Lightning made at import, ~1 s on a 2-core machine; frozen objects are skipped.
        gc.freeze()


if __name__ == "__main__":
    main()
