"""Stacked Muon: every member against torch.optim.Muon stepping that member alone, and its state per member."""

import pytest
import torch

from initnorm.training.muon_scale import torch_group
from initnorm.training.muon_stack import StackedMuon, newton_schulz

E, STEPS = 3, 5
LRS, WDS = [0.02, 0.005, 0.08], [0.1, 0.0, 0.3]
SHAPES = [(48, 16), (16, 40), (24, 24)]  # taller than wide (transposed inside), wider, square


def weights_and_grads(shape, steps=STEPS):
    g = torch.Generator().manual_seed(1)
    return torch.randn(E, *shape, generator=g), [torch.randn(E, *shape, generator=g) for _ in range(steps)]


def run_alone(w0, grads, scale, nesterov):
    """Each member with its own torch.optim.Muon; the weights after every step, and the optimisers."""
    params = [torch.nn.Parameter(w0[i].clone()) for i in range(E)]
    opts = [torch.optim.Muon([{"params": [params[i]], **torch_group(scale, w0.shape[1:], LRS[i], WDS[i])}],
                             nesterov=nesterov) for i in range(E)]
    trace = []
    for g in grads:
        for i in range(E):
            params[i].grad = g[i].clone()
            opts[i].step()
        trace.append(torch.stack([p.detach().clone() for p in params]))
    return trace, params, opts


def run_stacked(w0, grads, scale, nesterov, **kw):
    w, muon = w0.clone(), StackedMuon(scale, nesterov=nesterov, **kw)
    trace = []
    for g in grads:
        muon.step(w, g, LRS, WDS)
        trace.append(w.clone())
    return trace, w, muon


@pytest.mark.parametrize(("shape", "scale"), [(SHAPES[0], "original"), (SHAPES[1], "spectral"), (SHAPES[2], "spectral")])
def test_each_member_steps_as_torch_muon_alone(shape, scale):
    w0, grads = weights_and_grads(shape)
    alone, _, _ = run_alone(w0, grads, scale, nesterov=True)
    stacked, _, _ = run_stacked(w0, grads, scale, nesterov=True)
    for t in range(STEPS):  # bf16 iteration as torch's: bit for bit on this CPU (docstring of muon_stack)
        assert torch.equal(stacked[t], alone[t]), (t, (stacked[t] - alone[t]).abs().max())


def test_without_nesterov_and_as_separate_views():
    shape = (40, 24)
    w0, grads = weights_and_grads(shape, 3)
    alone, _, _ = run_alone(w0, grads, "match_rms_adamw", nesterov=False)
    views = [w.clone() for w in w0]
    muon = StackedMuon("match_rms_adamw", nesterov=False)
    for g in grads:
        muon.step(views, list(g), LRS, WDS)
    assert torch.equal(torch.stack(views), alone[-1])


def test_float32_iteration_is_near_torch_bf16_within_bf16_rounding():
    shape = (48, 16)
    w0, grads = weights_and_grads(shape)
    alone, _, _ = run_alone(w0, grads, "original", nesterov=True)
    stacked, _, _ = run_stacked(w0, grads, "original", nesterov=True, ns_dtype=torch.float32)
    moved = (alone[-1] - w0).norm()
    gap = (stacked[-1] - alone[-1]).norm()
    assert 0 < gap < 0.02 * moved  # a different rounding, not a different update (measured <= 0.011)


def test_orthogonalised_matrix_has_singular_values_near_one():
    s = torch.linalg.svdvals(newton_schulz(torch.randn(2, 32, 8), dtype=torch.float32))
    assert s.min() > 0.5 and s.max() < 1.3  # Keller Jordan's quintic: S' ~ U(0.5, 1.5), not exactly 1


def test_state_splits_into_torch_format_and_back():
    shape = (16, 40)
    w0, grads = weights_and_grads(shape)
    _, _, opts = run_alone(w0, grads[:3], "original", nesterov=True)
    _, w, muon = run_stacked(w0, grads[:3], "original", nesterov=True)
    for i, opt in enumerate(opts):  # a stacked checkpoint holds each job alone's numbers, in its format
        (state,) = opt.state_dict()["state"].values()
        assert state.keys() == muon.member_state(i).keys()
        assert torch.equal(state["momentum_buffer"], muon.member_state(i)["momentum_buffer"])
    merged = StackedMuon("original")
    merged.load_members([opt.state_dict()["state"][0] for opt in opts])
    assert torch.equal(merged.state_dict()["momentum_buffer"], muon.state_dict()["momentum_buffer"])
    # resumed from the merged state, the stack goes on as it would have
    w2 = w.clone()
    muon.step(w, grads[3], LRS, WDS)
    merged.step(w2, grads[3], LRS, WDS)
    assert torch.equal(w, w2)
    assert StackedMuon().member_state(0) == {}
    with pytest.raises(ValueError, match="every member"):
        merged.load_members([{}, muon.member_state(1), {}])
