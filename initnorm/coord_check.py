"""`python -m initnorm.coord_check`: the command lives in initnorm/cli/coord_check.py."""

from initnorm.cli.coord_check import main

if __name__ == "__main__":
    raise SystemExit(main())
