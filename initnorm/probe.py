"""`python -m initnorm.probe`: the command lives in initnorm/cli/probe.py."""

from initnorm.cli.probe import main

if __name__ == "__main__":
    raise SystemExit(main())
