"""`python -m initnorm.roles`: the command lives in initnorm/cli/roles.py."""

from initnorm.cli.roles import main

if __name__ == "__main__":
    raise SystemExit(main())
