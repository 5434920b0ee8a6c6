"""`python -m initnorm.reproduce`: the command lives in initnorm/repro/reproduce.py."""

from initnorm.repro.reproduce import main

if __name__ == "__main__":
    raise SystemExit(main())
