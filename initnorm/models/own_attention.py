"""``model=custom``'s attention, judged by what the model does on a tiny forward, never by its class names.

µP scales attention scores as 1/d_k (Yang et al. 2022, Tensor Programs V, §J.2.1): on top of the usual
1/sqrt(d_k), a multiplier sqrt(d_k at the base width / d_k). initnorm can only set it through an attribute
the user's attention multiplies its scores by (``model.attn_mult_attr``). Two things are measured here,
before anything is built for real, on a scratch copy of the model at its base width (CPU, its parameters
redrawn from N(0, 0.5²) so that the scores are far from zero, the job's random stream untouched):

- ``attends``: whether one forward computes attention: a softmax over scores that a product of two
  activations made (``q @ k.T``, ``bmm``, ``einsum``: neither operand a parameter or a buffer), whatever
  their shape (a CLS token prepended inside forward gives (T+1) x (T+1) scores, a sink column T x (T+1)),
  or ``scaled_dot_product_attention`` / ``multi_head_attention_forward``. What the scores went through on
  the way (a scale, a mask, a concatenated column) does not matter: every tensor computed from such a product
  counts. A model that does, with no attribute named, keeps its own 1/sqrt(d_k) under µP, and the run
  says so in one line. A ``Block`` that does its attention inline is found as well as a class named
  ``...Attention``: nothing here reads a name.
- ``check_multiplier``: that the named attribute is the multiplier the docs describe, 1 being the
  model's own attention: set to 1 on every module that has it, the forward is the model's own, bit for
  bit; set to 2, it is not. An attribute that some models use in place of 1/sqrt(d_head) (its own value
  1/sqrt(d_head), and 1 removes the scale) would change SP itself (scores x sqrt(d_head)); one that the
  forward never reads would make µP's scale a no-op. Either is refused in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from initnorm.errors import ConfigError

log = logging.getLogger(__name__)
SOFTMAXES = ("softmax", "_softmax", "log_softmax")
FUSED = ("scaled_dot_product_attention", "multi_head_attention_forward")  # attention in one call (its inside is not seen)
PRODUCTS = ("matmul", "__matmul__", "__rmatmul__", "bmm", "baddbmm", "einsum")
LENGTH = 8  # tokens in the measuring forward (at most the model's context)


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _Watch(TorchFunctionMode):
    """Records whether a forward computes attention: a softmax of scores made by a product of two activations
    (any shape), or a fused attention call. Every tensor computed from such a product is marked, so the scores'
    scale, mask or an added column in between leave them scores."""

    def __init__(self, weights: set[int]):
        super().__init__()
        self.weights, self.seen = weights, False  # weights: the storages of the model's parameters and buffers
        self.marked: set[int] = set()
        self.kept: list[torch.Tensor] = []  # the marked tensors kept alive, so that no id is reused within the forward

    def _activation(self, t: torch.Tensor) -> bool:
        return t.untyped_storage().data_ptr() not in self.weights

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        inputs = _tensors((args, kwargs))
        from_scores = any(id(t) in self.marked for t in inputs)
        if name in FUSED or (name in SOFTMAXES and from_scores):
            self.seen = True
        out = func(*args, **(kwargs or {}))
        operands = [t for t in inputs if t.dim() >= 2]
        if from_scores or (name in PRODUCTS and len(operands) >= 2 and all(self._activation(t) for t in operands)):
            for t in _tensors(out):
                self.marked.add(id(t))
                self.kept.append(t)
        return out


def scratch(make: Callable[[], nn.Module]) -> nn.Module:
    """The model built on the CPU, every floating parameter redrawn (scores near zero at a tiny init would hide a scale)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        with torch.device("cpu"):
            model = make()
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    p.normal_(0.0, 0.5)
    return model.eval()


def _tokens(n_out: int, context: int | None) -> torch.Tensor:
    length = min(LENGTH, context or LENGTH)
    return torch.arange(length).remainder(n_out).unsqueeze(0)


def _forward(model: nn.Module, x: torch.Tensor, logits_of: Callable[[Any], torch.Tensor]) -> torch.Tensor:
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        return logits_of(model(x)).detach().clone()


def _features(model: nn.Module, context: int | None) -> list[torch.Tensor]:
    """Inputs for a model that reads features, not token ids: N(0, 1) vectors of its first matrix's fan-in, one example
    and one sequence of them."""
    first = next((p for p in model.parameters() if p.dim() == 2), None)
    if first is None:
        return []
    g = torch.Generator().manual_seed(0)
    n = first.shape[1]
    return [torch.randn(1, n, generator=g), torch.randn(1, min(LENGTH, context or LENGTH), n, generator=g)]


def attends(model: nn.Module, n_out: int, context: int | None, logits_of: Callable[[Any], torch.Tensor]) -> bool | None:
    """Whether one forward of ``model`` computes attention scores; None where no forward could run: on token ids first,
    then on features of its first matrix's fan-in (a model of vectors, an MLP)."""
    weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    for x in [_tokens(n_out, context), *_features(model, context)]:
        seen = _watched(model, x, logits_of, weights)
        if seen is not None:
            return seen
    return None


def _watched(model: nn.Module, x: torch.Tensor, logits_of: Callable[[Any], torch.Tensor], weights: set[int]) -> bool | None:
    watch = _Watch(weights)
    try:
        with watch:
            _forward(model, x, logits_of)
    except Exception:  # a forward that needs what this scratch input lacks: the caller tries the next, or says it could not tell
        return None
    return watch.seen


def plain_name(target: Any) -> str:
    """A constructor as a person names it: ``Net`` for a class of the running script, ``mypkg.models.Net`` otherwise."""
    name = getattr(target, "__qualname__", None) or str(target)
    module = getattr(target, "__module__", None)
    return name if not module or module == "__main__" else f"{module}.{name}"


def check_multiplier(model: nn.Module, attr: str, n_out: int, context: int | None, logits_of: Callable[[Any], torch.Tensor]) -> None:
    """Refuse, in one line, an ``attr`` that no module has, that the forward does not read, or whose 1 is not the model's
    own attention (it replaces 1/sqrt(d_head) rather than multiplying it)."""
    found = [m for m in model.modules() if hasattr(m, attr)]
    name = type(model).__name__
    if not found:
        raise ConfigError(f"model.attn_mult_attr={attr!r}: no module of {name} has that attribute; fix it with "
                          "`model.attn_mult_attr=<the attribute your attention multiplies its scores by>` or `model.attn_mult_attr=null`")
    x = _tokens(n_out, context)
    own = [getattr(m, attr) for m in found]
    try:
        results = {}
        for value in ("own", 1.0, 2.0):
            for m, v in zip(found, own):
                setattr(m, attr, v if value == "own" else value)
            results[value] = _forward(model, x, logits_of)
    finally:
        for m, v in zip(found, own):
            setattr(m, attr, v)
    shown = ", ".join(sorted({f"{v:g}" if isinstance(v, (int, float)) else type(v).__name__ for v in own}))
    keep = "or keep your model's own scale with `model.attn_mult_attr=null` (µP then says so in one line)"
    if not torch.equal(results[1.0], results["own"]):
        raise ConfigError(f"model.attn_mult_attr={attr!r}: {name}'s attention does not multiply its usual scores by {attr}: set to 1 it "
                          f"changes the model's output from its own value's ({attr}={shown}), so {attr} stands in place of 1/sqrt(d_head) "
                          f"and µP would change SP itself; name an attribute that is 1 for the usual attention and multiplies the scores "
                          f"on top of 1/sqrt(d_head) (examples/nanogpt.py's attn_mult), {keep}")
    if torch.equal(results[2.0], results["own"]):
        raise ConfigError(f"model.attn_mult_attr={attr!r}: setting {attr} to 2 leaves {name}'s output unchanged: its forward does not read "
                          f"it, so µP's 1/d_k would not apply; name the attribute its attention multiplies its scores by, {keep}")
