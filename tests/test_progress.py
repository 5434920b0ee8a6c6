"""A fit's progress lines (initnorm/callbacks/progress.py) when its step is compiled: the compile is said first and left
out of the time left, which the canonical sweep compiled on a cold cache read as "step 2/1500, about 5h25m left"."""

import io
from types import SimpleNamespace

from initnorm.callbacks import progress


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def run(monkeypatch, tmp_path, compiled: bool, E: int = 2) -> list[str]:
    """A 100-step fit whose first step takes 60 s (the compile), then 0.1 s a step; a line every 10 s or 25%."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    view = SimpleNamespace(E=E, folders=[tmp_path / f"m{e}" for e in range(E)], configs=[None] * E, active=lambda: [True] * E)
    for f in view.folders:
        f.mkdir()
    module = SimpleNamespace(compiled=compiled, member_view=lambda: view)
    trainer = SimpleNamespace(global_step=0)
    out = io.StringIO()
    cb = progress.GroupProgress("seed=1 .. seed=2", 100, stream=out)
    cb.on_train_start(trainer, module)
    for step in range(1, 100):
        clock.now += 60.0 if step == 1 else 0.1
        trainer.global_step = step
        cb.on_train_batch_end(trainer, module, None, None, step - 1)
    return out.getvalue().splitlines()


def test_a_compiled_groups_time_left_leaves_out_its_compile_and_says_it(monkeypatch, tmp_path):
    lines = run(monkeypatch, tmp_path, compiled=True)
    assert lines[0] == "group of 2 (seed=1 .. seed=2): 100 steps, its step compiled first (torch.compile)"
    # the step-1 line (10 s had passed): no rate without the compile yet; the next line names the compile, once
    assert lines[1] == "group of 2 (seed=1 .. seed=2): step 1/100 (1%), 2/2 alive, estimating time left", lines
    assert "compiled in 1m00s" in lines[2] and sum("compiled in" in line for line in lines) == 1, lines
    quarter = next(line for line in lines if ": step 25/100 (25%)" in line)
    assert quarter.endswith("about 7s left"), quarter  # 75 steps at 0.1 s, not 75 x (62.4 s / 25)


def test_an_eager_fit_counts_every_step_as_before(monkeypatch, tmp_path):
    lines = run(monkeypatch, tmp_path, compiled=False)
    assert lines[0] == "group of 2 (seed=1 .. seed=2): 100 steps" and not any("compil" in line for line in lines)
    quarter = next(line for line in lines if ": step 25/100 (25%)" in line)
    assert quarter.endswith("about 3m07s left"), quarter  # (60 + 2.4 s) / 25 steps x 75


def test_a_compiled_job_alone_says_it_compiles_first(monkeypatch, tmp_path):
    lines = run(monkeypatch, tmp_path, compiled=True, E=1)
    assert lines[0] == "seed=1 .. seed=2: 100 steps, its step compiled first (torch.compile)"


def test_a_foreign_modules_attribute_named_compiled_is_not_taken_for_the_engines_flag(monkeypatch, tmp_path):
    """A LightningModule of one's own may have a ``compiled`` method or property of another meaning."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    view = SimpleNamespace(E=2, folders=[tmp_path, tmp_path], configs=[None, None], active=lambda: [True, True])
    out = io.StringIO()
    cb = progress.GroupProgress("mine", 10, stream=out)
    cb.on_train_start(SimpleNamespace(global_step=0), SimpleNamespace(compiled=lambda: None, member_view=lambda: view))
    assert out.getvalue() == "group of 2 (mine): 10 steps\n"
