"""`python -m initnorm.summarize`: the command lives in initnorm/cli/summarize.py."""

from initnorm.cli.summarize import main

if __name__ == "__main__":
    raise SystemExit(main())
