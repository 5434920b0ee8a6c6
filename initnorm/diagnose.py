"""`python -m initnorm.diagnose`: the command lives in initnorm/cli/diagnose.py."""

from initnorm.cli.diagnose import main

if __name__ == "__main__":
    raise SystemExit(main())
