"""The µP coordinate check (deck §7d): ``python -m initnorm.coord_check``.

Trains the model the overrides name (the Decoder by default; any built-in family, or your own with
``-- model=custom ...``) for ``--steps`` optimiser steps (10; AdamW unless ``-- optim=...`` names another) at a
constant ``--lr`` (0.01) for every
(parameterisation, width) pair, with the ``CoordCheck`` callback recording how far the logits,
the last residual stream and every block's output move from step 0 on 16 fixed windows
(``experiment=coord_check``; each job is an ordinary training run in its own folder). Then:

``coord.csv``, ``coord.png``, ``exponents.md`` and ``verdict.txt``, judged by
``initnorm/instruments/coord/analysis.judge``, the function ``initnorm.coord_check`` (a model of one's own in a
plain loop) judges with: per point, the exponent of its change on width, with a bootstrap interval over
``--seeds``, beside the one its parameterisation expects; µP's logits and last stream must stay within
``--tolerance`` of 0; SP, the baseline, grows or is inconclusive (saturated: a smaller lr or fewer steps), which
does not fail the check. The command exits with 1 when the verdict fails.

``--widths 64 --depths 2,4,8,16,32 --params mup,depth_mup,completep`` runs it across depth at a
fixed width: the depth-transfer parameterisations' last residual stream and per-block update (times
depth) must have exponents on depth within ``--tolerance`` of 0; µP is the baseline there.
``--from DIR`` only reads the ``coord.csv`` files below a folder, e.g. a multirun of
``python -m initnorm.train -m experiment=coord_check width=16,32,64,128,256 param=sp,mup``.
Anything after ``--`` is a training-config override (``-- norm=post``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import types
from pathlib import Path

from initnorm.cli import console
from initnorm.cli import signals as cli_signals
from initnorm.cli.compose import comma_list, compose_train, refuse_own_keys, split_overrides
from initnorm.cli.disk import check_writable
from initnorm.cli.preflight import check_overrides
from initnorm.cli.train import train
from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.coord import display_name, summarize
from initnorm.instruments.coord.check import LR, PARAMS, SEED, STEPS, TOLERANCE, WIDTHS, check_axes  # the library's: one copy
from initnorm.registry import is_dotted
from initnorm.training.devices import check_memory

# What each job's folder is named by, set from the command's flags (an override after -- of one is refused)
OWN_FLAGS = {"param": "--params", "param.name": "--params", "width": "--widths", "depth": "--depths", "steps": "--steps",
             "lr": "--lr", "seed": "--seeds"}


def jobs(params, widths, depths, steps: int, lr: float, seeds: list[int], extra: list[str]) -> dict[str, list[str]]:
    """Every job's folder name (``param=..,depth=..,width=..``, and ``,seed=..`` with several seeds) and training
    overrides; a dotted path in ``params`` (``mypkg.tables:mine``) is a table of one's own, named by ``param.name``."""
    return {
        f"param={p},depth={d},width={w}" + (f",seed={s}" if len(seeds) > 1 else ""): [
            "experiment=coord_check", f"param.name={p}" if is_dotted(p) else f"param={p}", f"width={w}", f"depth={d}", f"steps={steps}",
            f"lr={lr}", f"seed={s}", *extra]
        for p in params for d in depths for w in widths for s in seeds
    }


def run_jobs(todo: dict[str, list[str]], out: Path) -> None:
    """One training job per entry of ``todo``, each in its own folder below ``out``."""
    for name, overrides in todo.items():
        start = time.perf_counter()
        train(compose_train(overrides), out / name)
        settings = dict(part.split("=") for part in name.split(","))
        seed = f" seed {settings['seed']}" if "seed" in settings else ""
        print(f"  {display_name(settings['param']):3s} depth {int(settings['depth']):2d} width {int(settings['width']):4d}{seed}: "
              f"{time.perf_counter() - start:5.1f} s", flush=True)


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in --help, but for those whose default is worked out at run time."""

    def _get_help_string(self, action):
        return action.help if action.default is None else super()._get_help_string(action)


# Bytes per parameter while a job trains: the weight, its gradient and AdamW's two moments (float32).
TRAIN_BYTES_PER_PARAM = 16


def check_training_memory(configs: list[dict], widths: list[int]) -> None:
    """The largest job (they train one at a time) must fit in memory: its weights, gradients and
    optimiser state, a floor that leaves out the activations."""
    from initnorm.training.group import parameter_count

    biggest = max(configs, key=lambda c: c["model"]["width"] * c["model"]["depth"])
    need = TRAIN_BYTES_PER_PARAM * parameter_count(biggest)
    kept = [w for w in widths if w < biggest["model"]["width"]]
    smaller = ",".join(map(str, kept if len(kept) > 1 else [w for w in WIDTHS if w < biggest["model"]["width"]] or WIDTHS))
    check_memory(need, f"the width-{biggest['model']['width']}, depth-{biggest['model']['depth']} job", f"--widths {smaller}")


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, extra = split_overrides(argv)
    p = argparse.ArgumentParser(
        prog="python -m initnorm.coord_check", usage="%(prog)s [options] [-- training overrides]", formatter_class=_Help,
        description=" ".join(__doc__.split("\n\n")[1].replace("``", "").split()).replace(
            " Then:", " Then it writes coord.csv, coord.png, exponents.md and verdict.txt (each point's exponent on width, with an "
                      "interval over --seeds) and exits 1 when the verdict fails."),
        epilog="Anything after -- is a training-config override for every job, as initnorm-train takes it: "
               "python -m initnorm.coord_check --widths 16,64 -- norm=post init.std=0.05",
    )
    p.add_argument("--widths", type=comma_list(int), default=",".join(map(str, WIDTHS)), help="model widths, comma-separated")
    p.add_argument("--depths", type=comma_list(int), default="2", help="blocks, comma-separated (several: the check across depth)")
    p.add_argument("--params", type=comma_list(), default=",".join(PARAMS), help="parameterisations, comma-separated")
    p.add_argument("--steps", type=int, default=STEPS, help="optimiser steps per job (AdamW, or what -- optim=... names)")
    p.add_argument("--lr", type=float, default=LR, help="constant learning rate")
    p.add_argument("--seeds", type=comma_list(int), default=str(SEED), metavar="S",
                   help="seeds, comma-separated: every job once per seed; the exponents' intervals are a bootstrap over them")
    p.add_argument("--seed", type=comma_list(int), dest="seeds", help=argparse.SUPPRESS)  # its one-seed spelling, as before --seeds
    p.add_argument("--tolerance", type=float, default=TOLERANCE, metavar="E",
                   help="largest |exponent| on width (depth) that counts as flat: µP's logits and last stream across widths; across "
                        "depths, the depth-transfer params' last stream and block update; a baseline above it grows")
    p.add_argument("--out", default=None, help="output folder (default outputs/coord_check/<time>)")
    p.add_argument("--from", dest="source", default=None, help="only summarise the coord.csv files below this folder")
    return p.parse_args(argv), extra


def main(argv: list[str] | None = None) -> int:
    a, extra = parse_args(sys.argv[1:] if argv is None else argv)
    console.quiet()  # its jobs call train() directly, not through hydra_main, which quiets a training command
    try:
        if not (math.isfinite(a.tolerance) and a.tolerance > 0):  # an exponent's distance from 0: at 0 nothing measured passes
            raise bad_value("--tolerance", a.tolerance, "a finite exponent above 0 (the largest |exponent| that counts as flat)",
                            f"--tolerance {TOLERANCE}")
        optimizer = "adamw"  # the check's (conf/experiment/coord_check.yaml); a folder read back is taken to have used it
        if a.source:
            folder = Path(a.source)
        else:
            check_axes(a.widths, a.depths, a.params, a.seeds, a.steps, a.lr, flags=True)
            refuse_own_keys(extra, OWN_FLAGS, "the coordinate check")
            folder = Path(a.out or f"outputs/coord_check/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
            todo = jobs(a.params, a.widths, a.depths, a.steps, a.lr, a.seeds, extra)
            configs = check_overrides(list(todo.values()), lambda i, o: list(todo)[i])  # every job's config, before the first trains
            optimizer = configs[0]["optim"]["name"]
            check_training_memory(configs, a.widths)
            check_writable(folder, "--out /a/writable/folder")
            print(f"coordinate check: {a.steps} {optimizer} steps at lr {a.lr}, params {','.join(a.params)}, widths {a.widths}, "
                  f"depths {a.depths}, seeds {a.seeds}")
            with cli_signals.honoured(sys.argv[1:] if argv is None else argv, resume=f"rerun with `--out {folder}` to resume"):
                run_jobs(todo, folder)
        ok, text = summarize(folder, a.tolerance, optimizer)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(text + f"-> {folder} (coord.csv, coord.png, exponents.md, verdict.txt)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())


class CallableCommand(types.ModuleType):
    """The command's module (initnorm/coord_check.py) as the package's attribute answers a call as the library's
    ``initnorm.coord_check`` function does (importing the module replaces the attribute)."""

    def __call__(self, *args, **kwargs):
        from initnorm.instruments.coord.check import coord_check

        return coord_check(*args, **kwargs)
