"""Signal and gradient through depth at initialisation: the measurements behind
``python -m initnorm.probe`` (the command is initnorm/cli/probe.py).

``decoder_probe`` (deck 000, §7a): a Decoder at initialisation; the prompt goes through it, the
next-character loss is backpropagated, and per block we report the RMS of the residual stream
entering it (and leaving the last) and the norm of the block's weight-matrix gradients.

``signal_per_layer`` (chapter 003, steps 1-2): the chapter's protocol, a bare 30-layer,
width-256 MLP without biases: ``torch.manual_seed(seed)``, the weight matrices drawn one after
another, a batch of 512 standard-normal inputs, a random gradient of std 1 at the top; per layer
the std of the activation (forward) and of the gradient at the pre-activation (backward). The
weights come from the init registry (``initnorm.nn.init.INITS``), which makes the same draws as
``torch.nn.init`` (one ``normal_`` per matrix with the same std), so the printed numbers are the
chapter's. It is not the MLP family (``models/mlp.py``): biases, an input layer and a readout
would change the order of the draws.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from initnorm.callbacks.probes import capture, grouped
from initnorm.data.corpus import load_corpus
from initnorm.errors import bad_value
from initnorm.models.build import build_model
from initnorm.nn.init import INITS, InitContext, init_parameter
from initnorm.nn.layers import ACTIVATIONS
from initnorm.nn.roles import Role

# The model activations (nn.layers) and, for the chapter's linear network, none at all.
PROBE_ACTIVATIONS = {**ACTIVATIONS, "linear": nn.Identity}
# The chapter's four initialisations, by registry name (their labels: the schemes' display names); the tanh table omits He as it does.
CHAPTER_INITS = {"tanh": ["normal", "small", "xavier"], "relu": ["normal", "small", "xavier", "he"]}
OTHER_INITS = ["small", "xavier", "he", "lecun", "orthogonal"]  # for an activation the chapter does not probe



def check_prompt(c: dict, prompt: str):
    """The corpus of ``c``, once ``prompt`` is known to be two or more of its characters."""
    corpus = load_corpus(c["data"]["name"], c["data"].get("path"))
    unknown = sorted(set(prompt) - set(corpus.symbols))
    if unknown or len(prompt) < 2:
        raise bad_value("--prompt", prompt, f"two or more characters of the corpus's {corpus.symbols!r}", "--prompt 'alice was'")
    return corpus


def decoder_probe(c: dict, prompt: str) -> dict[str, list[float]]:
    """One configuration (a resolved, validated training config ``c``): ``stream_rms`` (entering
    each block, then leaving the last; depth + 1 values) and ``grad_norm`` (each block's weight
    matrices; depth values)."""
    depth, seed = c["model"]["depth"], c["seed"]
    corpus = check_prompt(c, prompt)
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
    for stat, title, extra in (("stream_rms", "RMS of the residual stream entering each block (out: leaving the last)", "   out"),
                               ("grad_norm", "norm of each block's weight gradients", "")):
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


def signal_per_layer(activation: str, init: str, depth: int = 30, width: int = 256, batch: int = 512, seed: int = 0, std: float = 1.0,
                     options: Mapping[str, Any] | None = None) -> tuple[list[float], list[float]]:
    """The chapter's protocol: per layer, the std of the activations (forward) and of the
    gradient at the pre-activations (backward), with a random std-1 gradient arriving at the top.
    ``options``: the trainer's ``init.*`` keys (``{"nonlinearity": "relu"}``: the chapter's He for tanh, ReLU's gain)."""
    act = PROBE_ACTIVATIONS[activation]()
    # init.std is normal's option only: "small" keeps its own 0.01
    ctx = InitContext(depth=depth, width=width, nonlinearity=activation,
                      options={**({"std": std} if init == "normal" else {}), **(options or {})})
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
    """A scheme's name in the tables: its display name (``Xavier``); ``normal`` by its std."""
    return f"N(0, {std:g})" if init == "normal" else INITS.display(init)


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
