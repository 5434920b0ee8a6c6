"""Signal and gradient through depth at initialisation: ``python -m initnorm.probe [decoder|mlp|both]``.

``decoder`` (deck 000, §7a): a Decoder of ``--depth`` blocks (8) at initialisation for each norm
placement (pre, post) and init std (0.02, 0.25); the prompt "alice was" goes through it, the
next-character loss is backpropagated, and per block we report the RMS of the residual stream
entering it (and leaving the last) and the norm of the block's weight-matrix gradients.

``mlp`` (chapter 003, steps 1-2): the chapter's ``signal_per_layer`` protocol, a bare
30-layer, width-256 MLP without biases: ``torch.manual_seed(seed)``, the weight matrices drawn
one after another, a batch of 512 standard-normal inputs, a random gradient of std 1 at the top;
per layer the std of the activation (forward) and of the gradient at the pre-activation
(backward). The weights come from the init registry (``initnorm.nn.init.INITS``), which makes
the same draws as ``torch.nn.init`` (one ``normal_`` per matrix with the same std), so the
printed numbers are the chapter's. It is not the MLP family (``models/mlp.py``): biases, an input
layer and a readout would change the order of the draws.

Anything after ``--`` is a training-config override for the Decoder (``-- norm_type=rmsnorm width=32``);
``init.<key>=<value>`` there also reaches the MLP probe's init schemes, as the trainer's ``init`` node
does (``mlp -- init.nonlinearity=relu``: the chapter's "He" for tanh, with ReLU's gain).
Writes CSV, PNG, the printed tables and TensorBoard events (``tb/``) into ``--out``.
"""

from __future__ import annotations

import argparse
import io
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from initnorm.cli.compose import comma_list, refuse_own_keys, split_overrides
from initnorm.cli.disk import check_writable
from initnorm.cli.preflight import check_overrides
from initnorm.errors import ConfigError, bad_value
from initnorm.instruments.probe import (
    CHAPTER_INITS,
    OTHER_INITS,
    PROBE_ACTIVATIONS,
    check_prompt,
    decoder_csv,
    decoder_probe,
    decoder_table,
    init_label,
    mlp_csv,
    mlp_table,
    probe_decoder_png,
    probe_mlp_png,
    signal_per_layer,
)
from initnorm.nn.init import INITS
from initnorm.results import write_atomic
from initnorm.training.devices import check_memory


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, extra = split_overrides(argv)
    p = argparse.ArgumentParser(prog="python -m initnorm.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", nargs="?", default="both", choices=["decoder", "mlp", "both"])
    p.add_argument("--out", default=None, help="output folder (default outputs/probe/<time>)")
    g = p.add_argument_group("decoder (deck §7a)")
    g.add_argument("--depth", type=int, default=8)
    g.add_argument("--norms", type=comma_list(), default=["pre", "post"])
    g.add_argument("--stds", type=comma_list(float), default=[0.02, 0.25])
    g.add_argument("--seed", type=int, default=1, help="the training default seed")
    g.add_argument("--prompt", default="alice was")
    g = p.add_argument_group("mlp (chapter 003, steps 1-2)")
    g.add_argument("--mlp-depth", type=int, default=30)
    g.add_argument("--mlp-width", type=int, default=256)
    g.add_argument("--batch", type=int, default=512)
    g.add_argument("--activations", type=comma_list(), default=["tanh", "relu"])
    g.add_argument("--inits", type=comma_list(), default=None, help="registry names for every activation (default: the chapter's)")
    g.add_argument("--std", type=float, default=1.0, help="std of init=normal (the chapter's N(0, 1))")
    g.add_argument("--mlp-seed", type=int, default=0, help="the chapter's torch.manual_seed(0)")
    return p.parse_args(argv), extra


OWN_FLAGS = {"norm": "--norms", "init.std": "--stds", "depth": "--depth", "seed": "--seed"}  # the Decoder probe's axes


def decoder_configs(a: argparse.Namespace, extra: list[str]) -> dict[tuple[str, float], dict]:
    """The training config of every §7a configuration, resolved and checked (``initnorm.schema``)."""
    refuse_own_keys(extra, OWN_FLAGS, "the probe")
    keys = [(n, s) for n in a.norms for s in a.stds]
    overrides = [[f"depth={a.depth}", f"norm={n}", f"seed={a.seed}", *extra, f"init.std={s}"] for n, s in keys]
    return dict(zip(keys, check_overrides(overrides, lambda i, o: f"norm={keys[i][0]} std={keys[i][1]}")))


def init_options(extra: list[str], kind: str) -> dict[str, Any]:
    """The ``init.<key>=<value>`` overrides among ``extra``, as the init schemes read them (``ctx.opt``)."""
    import yaml

    options: dict[str, Any] = {}
    for o in extra:
        key, eq, value = o.lstrip("+").partition("=")
        if key.startswith("init.") and eq:
            options[key.removeprefix("init.")] = yaml.safe_load(value)
        elif kind == "mlp":
            raise bad_value("override after --", o, "init.<key>=<value> for the MLP probe (other keys are the Decoder's)",
                            "-- init.nonlinearity=relu")
    return options


def check_args(a: argparse.Namespace) -> None:
    for key in ("depth", "mlp_depth", "mlp_width", "batch"):
        if getattr(a, key) <= 0:
            flag = f"--{key.replace('_', '-')}"
            raise bad_value(flag, getattr(a, key), "a positive integer", f"{flag} {getattr(parse_args([])[0], key)}")  # its default
    for act in a.activations:
        if act not in PROBE_ACTIVATIONS:
            raise bad_value("--activations", act, f"one of {', '.join(PROBE_ACTIVATIONS)}", "--activations tanh,relu")
    for init in a.inits or []:
        INITS.get(init)
    if not (math.isfinite(a.std) and a.std >= 0):
        raise bad_value("--std", a.std, "a finite number >= 0", "--std 1.0")


def check_probe_memory(a: argparse.Namespace, configs: dict[tuple[str, float], dict]) -> None:
    """What a probe holds at once, as a floor: the MLP's ``--mlp-depth`` weight matrices and, per
    layer, its pre-activations, activations and their gradients (float32); a Decoder's weights and
    gradients. One line before anything is made, not an allocation's traceback after."""
    if a.kind in ("mlp", "both"):
        need = 4 * a.mlp_depth * (a.mlp_width**2 + 4 * a.batch * a.mlp_width)
        check_memory(need, f"the MLP probe ({a.mlp_depth} layers of width {a.mlp_width}, batch {a.batch})", "--mlp-width 256")
    if configs:
        from initnorm.training.group import parameter_count

        c = next(iter(configs.values()))
        check_memory(8 * parameter_count(c), f"the Decoder probe (width {c['model']['width']}, depth {c['model']['depth']})",
                     "--depth 8 -- width=16")


def run(a: argparse.Namespace, extra: list[str], out: Path) -> str:
    """Run the probes ``a.kind`` asks for, write their files into ``out``; return the printed text."""
    from torch.utils.tensorboard import SummaryWriter

    check_args(a)  # every argument and every config before the output folder is made
    configs = decoder_configs(a, extra) if a.kind in ("decoder", "both") else {}
    for c in list(configs.values())[:1]:
        check_prompt(c, a.prompt)
    check_probe_memory(a, configs)
    check_writable(out, "--out /a/writable/folder")
    torch.set_flush_denormal(True)  # the chapter's setting: vanishing activations are slow on a CPU otherwise
    text = io.StringIO()
    tb = SummaryWriter(str(out / "tb"))
    if a.kind in ("decoder", "both"):
        results = {key: decoder_probe(c, a.prompt) for key, c in configs.items()}
        text.write(f"Decoder at initialisation: {a.depth} blocks, prompt {a.prompt!r}, seed {a.seed}\n\n{decoder_table(results, a.depth)}")
        write_atomic(out / "probe_decoder.csv", decoder_csv(results))
        write_atomic(out / "probe_decoder.png", probe_decoder_png(results))
        for (norm, std), r in results.items():
            for stat, values in r.items():
                for i, v in enumerate(values, 1):
                    tb.add_scalar(f"{stat}/norm={norm},std={std:g}", v, i)
    if a.kind in ("mlp", "both"):
        mlp = {}
        for act in a.activations:
            names = a.inits or CHAPTER_INITS.get(act, OTHER_INITS)
            options = init_options(extra, a.kind)
            suffix = f" ({', '.join(f'{k}={v}' for k, v in options.items())})" if options else ""
            mlp[act] = {init_label(i, a.std) + suffix:
                        signal_per_layer(act, i, a.mlp_depth, a.mlp_width, a.batch, a.mlp_seed, a.std, options) for i in names}
            text.write(f"{a.mlp_depth}-layer {act} MLP of width {a.mlp_width} at initialisation (batch {a.batch}, seed {a.mlp_seed})\n")
            text.write(mlp_table(act, mlp[act]) + "\n")
            for name, (fwd, bwd) in mlp[act].items():
                for i, (f, b) in enumerate(zip(fwd, bwd), 1):
                    tb.add_scalar(f"act_std/{act}/{name}", f, i)
                    tb.add_scalar(f"grad_std/{act}/{name}", b, i)
        write_atomic(out / "probe_mlp.csv", mlp_csv(mlp))
        write_atomic(out / "probe_mlp.png", probe_mlp_png(mlp))
    tb.close()
    write_atomic(out / "probe.txt", text.getvalue())
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    a, extra = parse_args(sys.argv[1:] if argv is None else argv)
    out = Path(a.out or f"outputs/probe/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    try:
        print(run(a, extra, out), end="")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"-> {out} (probe.txt, CSV, PNG, tb/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
