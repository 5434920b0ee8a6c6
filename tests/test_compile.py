"""compile=auto|true|false for a job run alone: the decision, the cache location, eager runs untouched,
and a compiled run that trains as the eager one does (its statistics steps included)."""

import os
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import initnorm.training.stack as stack_py
from initnorm.cli.train import train
from initnorm.config import to_plain, validate
from initnorm.errors import ConfigError
from initnorm.training.compiling import ALONE_FROM, COMPILE_CACHE, GROUP_FROM, should_compile, use_cache
from tests.conftest import ROOT, compose_cfg

# 12 steps, validation every 4, per-layer statistics (forward hooks) at steps 0, 5 and 10. The smallest graph that is
# still a real one: the wide MLP at one ReLU layer of 8 (embedding, linear, ReLU, readout, cross-entropy, and their
# backward) compiles its C++ kernels in less than half the time of the smallest Decoder, cold.
RUN = ["steps=12", "trainer.val_check_interval=4", "log_every=2", "~callbacks.progress", "~callbacks.diagnostics",
       "trainer.enable_progress_bar=false",
       "callbacks.stats.every_n_steps=5", "experiment=mup_mlp_sweep", "depth=1", "width=8"]


def test_auto_decides_by_the_run_length():
    assert should_compile(True, 1) and not should_compile(False, 10**9)
    assert not should_compile("auto", ALONE_FROM - 1) and should_compile("auto", ALONE_FROM)
    assert not should_compile("auto", 1500), "the default run (1,500 steps) must stay eager under auto"
    # a vectorised group: member-steps against GROUP_FROM
    assert should_compile("auto", GROUP_FROM // 4, members=4) and not should_compile("auto", GROUP_FROM // 4 - 1, members=4)
    # any other value is refused in one place, the schema, before a job starts
    with pytest.raises(ConfigError, match=r"compile='maybe'.*auto, true, false.*`compile=auto`"):
        validate(to_plain(compose_cfg("compile=maybe")))


def test_the_cache_sits_below_the_launch_folder_unless_the_user_set_one(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    ours = str(tmp_path.resolve() / COMPILE_CACHE)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    assert use_cache(tmp_path) == ours == os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert use_cache(tmp_path / "elsewhere") == ours  # the first (or the user's) wins
    # importing Lightning writes torch's default into the environment: that one is not the user's
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(default_cache_dir()))
    assert use_cache(tmp_path) == ours
    # `make clean` removes it with outputs/
    assert COMPILE_CACHE.startswith("outputs/")
    clean = (ROOT / "Makefile").read_text().split("\nclean:")[1].splitlines()[1]
    assert "outputs" in clean.split() and ".pytest_cache" in clean.split(), clean  # and the suite's cache


def test_compile_false_and_short_auto_runs_never_compile(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.compile called")

    monkeypatch.setattr(torch, "compile", refuse)
    off = train(compose_cfg(*RUN, "compile=false"), tmp_path / "off")
    auto = train(compose_cfg(*RUN, "compile=auto"), tmp_path / "auto")
    assert off["compiled"] is False and auto["compiled"] is False
    assert off["val_history"] == auto["val_history"]  # bit for bit


def _scalars(folder: Path, prefix: str) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"] if t.startswith(prefix)}


# over 20 s with the compiler's cache cold on 2 loaded cores; the one test of a compiled run, so `make test` keeps it
def test_compiled_run_matches_eager_and_keeps_its_statistics(tmp_path, monkeypatch):
    # A cache the test suite keeps between runs (`make clean` removes .pytest_cache): warm, the compile takes ~2 s.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".pytest_cache" / "torch_compile_cache"))
    # One graph of a tiny model: compiled in this process, not handed to a pool of compile processes that would each import
    # torch first (what the vectorised launcher's workers set too, cli/vectorized.py).
    from torch._inductor import config as inductor_config

    monkeypatch.setattr(inductor_config, "compile_threads", 1)
    eager_steps = []  # per training forward run eagerly: whether it carried the statistics' probe points
    real = stack_py.Stack.losses

    def spy(self, loss_fn, xs, ys, points=None, reduce=None, live=None):
        if not torch.compiler.is_compiling():  # the compiled graph does not call back into Python
            eager_steps.append(bool(points))
        return real(self, loss_fn, xs, ys, points, reduce, live)

    monkeypatch.setattr(stack_py.Stack, "losses", spy)
    eager = train(compose_cfg(*RUN, "compile=false"), tmp_path / "eager")
    assert eager_steps == [True, False, False, False, False, True, False, False, False, False, True, False]
    eager_steps.clear()
    fast = train(compose_cfg(*RUN, "compile=true"), tmp_path / "fast")
    assert fast["compiled"] is True
    # the statistics steps (0, 5, 10: forward hooks) ran eager, the 9 others compiled
    assert eager_steps == [True, True, True]
    # Fused kernels round differently: losses agree to float32 rounding grown over 12 steps.
    assert [s for s, _ in fast["val_history"]] == [0, 4, 8, 12]
    assert [v for _, v in fast["val_history"]] == pytest.approx([v for _, v in eager["val_history"]], rel=1e-5)
    for prefix in ("act_rms/", "grad_rms/", "Loss/train"):
        a, b = _scalars(tmp_path / "eager", prefix), _scalars(tmp_path / "fast", prefix)
        assert a and a.keys() == b.keys(), prefix
        for tag in a:
            assert [s for s, _ in b[tag]] == [s for s, _ in a[tag]], tag
            assert [v for _, v in b[tag]] == pytest.approx([v for _, v in a[tag]], rel=1e-4, abs=1e-7), tag
