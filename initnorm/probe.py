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

Anything after ``--`` is a training-config override for the Decoder (``-- norm_type=rmsnorm width=32``).
Writes CSV, PNG, the printed tables and TensorBoard events (``tb/``) into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from initnorm.callbacks.stats import capture, grouped, rms
from initnorm.config import comma_list, compose_train, split_overrides, to_plain, validate
from initnorm.data.corpus import load_corpus
from initnorm.errors import ConfigError, bad_value
from initnorm.models.build import build_model
from initnorm.nn.init import INITS, InitContext, init_parameter
from initnorm.nn.roles import Role
from initnorm.results import write_atomic

ACTIVATIONS = {"tanh": torch.tanh, "relu": F.relu, "gelu": F.gelu, "linear": lambda z: z}
# The chapter's four initialisations, by registry name, with its labels; the tanh table omits He as it does.
CHAPTER_INITS = {"tanh": ["normal", "small", "xavier"], "relu": ["normal", "small", "xavier", "he"]}
LABELS = {"small": "N(0, 0.01)", "xavier": "Xavier", "he": "He", "lecun": "LeCun", "orthogonal": "Orthogonal"}


# ---------------------------------------------------------------- the Decoder (deck §7a)


def decoder_probe(norm: str, std: float, depth: int, seed: int, prompt: str, extra: list[str]) -> dict[str, list[float]]:
    """One configuration: ``stream_rms`` (entering each block, then leaving the last; depth + 1 values)
    and ``grad_norm`` (each block's weight matrices; depth values)."""
    c = to_plain(compose_train([f"depth={depth}", f"norm={norm}", f"seed={seed}", *extra, f"init.std={std}"]))
    validate(c)
    corpus = load_corpus(c["data"]["name"], c["data"].get("path"))
    unknown = sorted(set(prompt) - set(corpus.symbols))
    if unknown or len(prompt) < 2:
        raise bad_value("--prompt", prompt, f"two or more characters of the corpus's {corpus.symbols!r}", "--prompt 'alice was'")
    torch.manual_seed(seed)
    model = build_model(c["model"], c["init"], c["param"], corpus.vocab_size).model
    ids = corpus.encode(prompt)[None]
    points = {k: v for k, v in model.probe_points().items() if k.endswith("/stream_in")}
    points[f"block_{depth:02d}/stream_out"] = model.probe_points()[f"block_{depth:02d}/stream_out"]
    with capture(points) as seen:
        logits = model(ids[:, :-1])
    F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).backward()
    layers = grouped(model, weights_only=True)
    grads = [torch.sqrt(sum(p.grad.pow(2).sum() for _, p in layers[f"block_{i:02d}"])).item() for i in range(1, depth + 1)]
    return {"stream_rms": [seen[k].item() for k in points], "grad_norm": grads}


def decoder_table(results: dict[tuple[str, float], dict[str, list[float]]], depth: int) -> str:
    head = f"{'norm':5s} {'std':>5s} " + " ".join(f"{'b' + str(i):>5s}" for i in range(1, depth + 1))
    out = io.StringIO()
    for stat, title, extra in (("stream_rms", "RMS of the residual stream entering each block (out: leaving the last)", "   out"), ("grad_norm", "norm of each block's weight gradients", "")):
        out.write(f"{title}\n{head}{extra}\n")
        for (norm, std), r in results.items():
            out.write(f"{norm:5s} {std:5.2f} " + " ".join(f"{v:5.2f}" for v in r[stat]) + "\n")
        out.write("\n")
    return out.getvalue()


def decoder_csv(results) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["norm", "std", "block", "stat", "value"])
    for (norm, std), r in results.items():
        for stat, values in r.items():
            for i, v in enumerate(values, 1):
                w.writerow([norm, std, i, stat, repr(v)])
    return out.getvalue()


def decoder_plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for (norm, std), r in results.items():
        label = f"{norm}-LN, std {std:g}"
        ax1.plot(range(1, len(r["stream_rms"]) + 1), r["stream_rms"], marker="o", ms=3, label=label)
        ax2.plot(range(1, len(r["grad_norm"]) + 1), r["grad_norm"], marker="o", ms=3, label=label)
    ax1.set(title="residual stream RMS entering each block", xlabel="block (last point: leaving the last)", ylabel="RMS")
    ax2.set(title="weight-gradient norm per block", xlabel="block", ylabel="norm", yscale="log")
    ax1.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- the MLP (chapter 003, steps 1-2)


def signal_per_layer(activation: str, init: str, depth: int = 30, width: int = 256, batch: int = 512, seed: int = 0, std: float = 1.0) -> tuple[list[float], list[float]]:
    """The chapter's protocol: per layer, the std of the activations (forward) and of the
    gradient at the pre-activations (backward), with a random std-1 gradient arriving at the top."""
    act = ACTIVATIONS[activation]
    # init.std is normal's option only: "small" keeps its own 0.01
    ctx = InitContext(depth=depth, width=width, nonlinearity=activation, options={"std": std} if init == "normal" else {})
    torch.manual_seed(seed)
    weights = []
    for _ in range(depth):  # drawn in order, as the chapter's list comprehension does
        w = torch.empty(width, width)
        init_parameter(w, Role.HIDDEN, ctx, INITS.get(init))
        weights.append(w)
    h = torch.randn(batch, width, requires_grad=True)
    pre, post = [], []
    for w in weights:
        z = h @ w.T
        z.retain_grad()
        h = act(z)
        pre.append(z)
        post.append(h)
    (h * torch.randn_like(h)).sum().backward()
    return [p.std().item() for p in post], [z.grad.std().item() for z in pre]


def init_label(init: str, std: float) -> str:
    return f"N(0, {std:g})" if init == "normal" else LABELS.get(init, init)


def mlp_table(activation: str, results: dict[str, tuple[list[float], list[float]]]) -> str:
    """The chapter's printed table: first and last layer, forward and backward."""
    n = len(next(iter(results.values()))[0])
    out = io.StringIO()
    out.write(f"{'init':12s} {'act std L1':>11s} {f'act std L{n}':>12s} {'grad std L1':>12s} {f'grad std L{n}':>13s}\n")
    for name, (fwd, bwd) in results.items():
        out.write(f"{name:12s} {fwd[0]:11.2e} {fwd[-1]:12.2e} {bwd[0]:12.2e} {bwd[-1]:13.2e}\n")
    return out.getvalue()


def mlp_csv(results: dict[str, dict[str, tuple[list[float], list[float]]]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["activation", "init", "layer", "act_std", "grad_std"])
    for activation, rows in results.items():
        for name, (fwd, bwd) in rows.items():
            for i, (a, g) in enumerate(zip(fwd, bwd), 1):
                w.writerow([activation, name, i, repr(a), repr(g)])
    return out.getvalue()


def mlp_plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.4 * len(results)), squeeze=False)
    for (activation, rows), (ax1, ax2) in zip(results.items(), axes):
        for name, (fwd, bwd) in rows.items():
            ax1.semilogy(range(1, len(fwd) + 1), fwd, marker="o", ms=2.5, label=name)
            ax2.semilogy(range(1, len(bwd) + 1), bwd, marker="o", ms=2.5, label=name)
        ax1.set(title=f"{activation}: activation std (forward)", xlabel="layer (1 = input side)", ylabel="std (log scale)")
        ax2.set(title=f"{activation}: gradient std (backward)", xlabel="layer (1 = input side)")
        ax1.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- the command


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


def check_args(a: argparse.Namespace) -> None:
    for key in ("depth", "mlp_depth", "mlp_width", "batch"):
        if getattr(a, key) <= 0:
            raise bad_value(f"--{key.replace('_', '-')}", getattr(a, key), "a positive integer")
    for act in a.activations:
        if act not in ACTIVATIONS:
            raise bad_value("--activations", act, f"one of {', '.join(ACTIVATIONS)}", "--activations tanh,relu")
    for init in a.inits or []:
        INITS.get(init)


def run(a: argparse.Namespace, extra: list[str], out: Path) -> str:
    """Run the probes ``a.kind`` asks for, write their files into ``out``; return the printed text."""
    from torch.utils.tensorboard import SummaryWriter

    check_args(a)
    torch.set_flush_denormal(True)  # the chapter's setting: vanishing activations are slow on a CPU otherwise
    text = io.StringIO()
    tb = SummaryWriter(str(out / "tb"))
    if a.kind in ("decoder", "both"):
        results = {(n, s): decoder_probe(n, s, a.depth, a.seed, a.prompt, extra) for n in a.norms for s in a.stds}
        text.write(f"Decoder at initialisation: {a.depth} blocks, prompt {a.prompt!r}, seed {a.seed}\n\n{decoder_table(results, a.depth)}")
        write_atomic(out / "probe_decoder.csv", decoder_csv(results))
        decoder_plot(results, out / "probe_decoder.png")
        for (norm, std), r in results.items():
            for stat, values in r.items():
                for i, v in enumerate(values, 1):
                    tb.add_scalar(f"{stat}/norm={norm},std={std:g}", v, i)
    if a.kind in ("mlp", "both"):
        mlp = {}
        for act in a.activations:
            names = a.inits or CHAPTER_INITS.get(act, list(LABELS))
            mlp[act] = {init_label(i, a.std): signal_per_layer(act, i, a.mlp_depth, a.mlp_width, a.batch, a.mlp_seed, a.std) for i in names}
            text.write(f"{a.mlp_depth}-layer {act} MLP of width {a.mlp_width} at initialisation (batch {a.batch}, seed {a.mlp_seed})\n")
            text.write(mlp_table(act, mlp[act]) + "\n")
            for name, (fwd, bwd) in mlp[act].items():
                for i, (f, b) in enumerate(zip(fwd, bwd), 1):
                    tb.add_scalar(f"act_std/{act}/{name}", f, i)
                    tb.add_scalar(f"grad_std/{act}/{name}", b, i)
        write_atomic(out / "probe_mlp.csv", mlp_csv(mlp))
        mlp_plot(mlp, out / "probe_mlp.png")
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
