"""`python -m initnorm.bench`: the command lives in initnorm/repro/bench.py."""

from initnorm.repro.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
