"""u-µP's unit-scaled ops: what its per-role table (``nn.param.umup``) cannot say, set once on the layers.

Blake et al. 2024, "u-µP: The Unit-Scaled Maximal Update Parametrization" (the paper), and its
reference code, graphcore-research/unit-scaling 0.3 (``functional.py``, ``core/functional.py``).
Every formula below is written from those, and ``tests/test_umup_parity.py`` holds the result
against the package's own modules. What is here (each scales the forward pass, so torch's
backward carries the same factor, unit-scaling's ``to_output_scale`` constraint):

- the residual sums (paper §4.4 and Appendix G, ``residual_split``/``residual_add``): branch
  x τ/√(1+τ²), skip x 1/√(1+τ²), τ per sum from the residual multiplier and the attention/MLP
  ratio (``transformer_residual_scaling_rule``), so every attention branch adds the same share,
  every MLP branch the same, and their total stands to the embedding as ``residual_mult``;
- the unit-scaled GELU (``functional.gelu`` at mult 1): output x the empirical 1/std of GELU(N(0, 1));
- the unit-scaled causal attention (``functional.scaled_dot_product_attention``): the heads' output
  x (T / log T)^((1-a)/2), a = 1/(1 + 4 d_head / mult²), an empirical model of its std.

What is not (docs/parameterisations.md says why): the backward-only scales (a weight's gradient x
batch^-1/2, the readout's input gradient x fan_out^-1/2 instead of its forward fan_in^-1, the norms',
the embedding's and the cross-entropy's gradient scales), which multiply every gradient of one
parameter by one number: Adam divides it out, and sees it only through ε.
"""

from __future__ import annotations

import math

from torch import nn

from initnorm.errors import ConfigError


def residual_taus(residual_mult: float, attn_ratio: float):
    """(index, sums) -> τ of residual sum ``index`` of ``sums`` (attention, MLP, attention, ...): the paper's
    Appendix G rule (unit-scaling's ``transformer_residual_scaling_rule``)."""
    a_mlp = residual_mult * math.sqrt(2 / (1 + attn_ratio**2))
    a_attn = attn_ratio * a_mlp

    def tau(index: int, sums: int) -> float:
        n_attn, n_mlp = (index + 1) // 2, index // 2
        return (a_attn if index % 2 == 0 else a_mlp) / math.sqrt(sums / 2 + n_attn * a_attn**2 + n_mlp * a_mlp**2)

    return tau


def _log_interp(alpha: float, lower: float, upper: float) -> float:
    """Between ``lower`` (alpha 0) and ``upper`` (alpha 1) at a constant ratio."""
    return math.exp(alpha * math.log(upper) + (1 - alpha) * math.log(lower))


# unit-scaling's empirical std model of GELU(mult x) / mult for x ~ N(0, 1), here at mult 1: the output's multiplier.
GELU_SCALE = _log_interp(1 / (1 + 0.25), 2.0, math.sqrt(2 / (1 - 1 / math.pi)))


def attention_output_power(attn_mult: float, d_head: int) -> float:
    """The power p with heads' output x (T / log T)^(p/2): 1/std of causal attention's output at init, whose
    weights are near flat (std √(log T / T)) until the scores grow (one-hot: std 1) with attn_mult² / d_head."""
    return 1.0 - 1.0 / (1.0 + 4.0 * d_head / attn_mult**2)


def unit_scale_layers(model: nn.Module, residual_mult: float, attn_ratio: float, attn_mult: float) -> None:
    """Set u-µP's op scales on the layers that apply them, once at build (``Table.layers``). A layer
    states what it can take by its attributes: ``act_mult`` (a GELU's output), ``output_power`` and
    ``d_k`` (an attention), ``RESIDUAL_SUMS`` (a residual block); a model with none keeps its ops."""
    for module in model.modules():
        if hasattr(module, "act_mult"):
            module.act_mult = GELU_SCALE
        if hasattr(module, "output_power"):
            module.output_power = attention_output_power(attn_mult, module.d_k)
    blocks = list(getattr(model, model.BLOCKS)) if getattr(model, "BLOCKS", None) else []
    bare = next((block for block in blocks if not hasattr(block, "RESIDUAL_SUMS")), None)
    if bare is not None:  # without its residual rule u-µP's stream would not be unit-scaled: say so, do not run half of it
        raise ConfigError(f"param=umup weights each residual add of a block (its tau rule, paper §4.4 and Appendix G), but "
                          f"{type(bare).__name__} ({type(model).__name__}.{model.BLOCKS}) says nothing of its adds: "
                          "give it RESIDUAL_SUMS, pairs of "
                          "(branch multiplier, skip multiplier) attribute names its forward applies (as initnorm.models.decoder.Block), "
                          "or use param=mup")
    sums = [(block, branch, skip) for block in blocks for branch, skip in block.RESIDUAL_SUMS]
    tau = residual_taus(residual_mult, attn_ratio)
    for i, (block, branch, skip) in enumerate(sums):
        t = tau(i, len(sums))
        setattr(block, branch, t / math.sqrt(1 + t**2))
        setattr(block, skip, 1 / math.sqrt(1 + t**2))


def unit_normal(w, role, ctx) -> None:
    """Every weight from N(0, 1), whatever ``init`` names: the paper's unit init (§4.1; unit-scaling's
    ``reset_parameters``). Biases and norms keep their fixed start (``roles.FIXED_ROLES``)."""
    w.normal_(0.0, 1.0)
