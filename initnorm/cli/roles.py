"""The roles of a model and the multipliers its parameterisation gives each parameter, printed without
training: ``python -m initnorm.roles [training overrides]``.

The config is composed and checked as ``initnorm.train`` would (the same overrides), the model built
on the meta device (no memory, no numbers), and its table printed: for ``model=custom`` the inferred
one (parameter, shape at the base and the target width, role, init / lr / weight-decay / ε / forward
multipliers, why), the one a job writes into its folder as ``roles.txt``; for a built-in family its
declared roles with the same multipliers.
"""

from __future__ import annotations

import sys

from initnorm import schema
from initnorm.cli.compose import compose_train, split_overrides
from initnorm.cli.preflight import one_line
from initnorm.config import to_plain
from initnorm.errors import ConfigError


def table_text(overrides: list[str]) -> str:
    import torch

    from initnorm.models.build import build_model
    from initnorm.training.tasks import TASKS

    try:
        cfg = compose_train(overrides)
    except Exception as exc:  # a composition error (init=xavir) as its one line
        raise one_line(exc) from None
    c = schema.check(to_plain(cfg))
    data = TASKS.get(c["data"]["kind"]).make_data(c)
    data.setup("fit")
    with torch.device("meta"):
        built = build_model(c["model"], c["init"], c["param"], data.vocab_size)
    return str(built)  # the role table initnorm.parameterize prints (models/parameterize.py)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print("usage: python -m initnorm.roles [key=value ...]   (initnorm-roles: the same)\n")
        print(__doc__.strip().replace("``", "`"))
        return 0
    before, after = split_overrides(argv)  # `initnorm-roles -- optim=muon`, as initnorm-coord-check takes overrides
    try:
        print(table_text(before + after), end="")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
