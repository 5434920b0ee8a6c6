"""The check of a model of one's own (``model=custom``, ``models/own.py``) on a real batch, for the library and the
command line alike: built for real at its base width (the smallest) on the CPU, and run on two examples of the batch;
it must return logits of the task's size (a tensor, an object's ``.logits`` or a tuple whose first element is the
logits, as ``models/own.logits_of`` reads them). An exception raised in the user's code is named as theirs
(``own_errors.yours``); ``own.build`` names its constructor's the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from initnorm.errors import ConfigError
from initnorm.models import own
from initnorm.own_errors import yours


def check_forward(m: Mapping[str, Any], n_out: int, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Model node ``m`` built at ``m["base_width"]``, one forward of two examples of ``batch`` (``(x, y)``), and what it
    returns read as logits of ``[*y.shape, n_out]``; one line for whatever is wrong."""
    what = f"model._target_={own.target_name(m)}"
    small = {**m, "width": m["base_width"]}
    with torch.random.fork_rng(devices=[]):  # the job's own draws are not moved by this check
        model = own.build(small, n_out, logits=False)
        x, y = batch
        x, y = x[:2], y[:2]
        if y.dim() > 1:
            x, y = x[:, :8], y[:, :8]  # a few positions: a language model's logits are per position
        try:
            with torch.no_grad():
                out = model(x)
        except Exception as exc:
            raise yours(exc, f"{what}'s forward on a batch of {list(x.shape)} ({x.dtype})") from exc
    want = [*y.shape, n_out]
    logits = _logits(out)
    if logits is None:
        kind = f"a dict (keys {', '.join(map(str, out))})" if isinstance(out, Mapping) else f"a {type(out).__name__}"
        raise ConfigError(f"{what} returned {kind}, not logits; return the logits tensor ({want}), an object with .logits, or a "
                          "tuple whose first element is the logits")
    if list(logits.shape) != want:
        loss = isinstance(out, (tuple, list)) and logits.dim() == 0
        got = "a tuple whose first element is a scalar (a loss?)" if loss else f"logits of {list(logits.shape)}"
        raise ConfigError(f"{what} returned {got} "
                          f"for inputs of {list(x.shape)}; the task needs logits of {want} ({n_out} = the data's "
                          f"{'classes' if y.dim() == 1 else 'vocabulary'}, `model.vocab_arg` names the argument that takes it)"
                          + ("; return (logits, loss), logits first" if loss else ""))


def _logits(out):
    """``models/own.logits_of`` without its exception: None where ``out`` holds no tensor it would read."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits") and isinstance(out.logits, torch.Tensor):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None
