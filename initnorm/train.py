"""`python -m initnorm.train`: the command lives in initnorm/cli/train.py."""

from initnorm.cli.train import main

if __name__ == "__main__":
    raise SystemExit(main())
