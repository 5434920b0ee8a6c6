"""The loss-against-rate figure for every sweep over a transfer axis, with or without a param axis; colours that tell
15 settings apart; markers inside their axes (the zoomed panel of a horizon sweep cut off the shorter runs' ends)."""

import json
import math
import random

from matplotlib.colors import to_hex

from initnorm import plots
from initnorm.summary import summarize

GRID = [float(x) for x in range(-10, -3)]


def job(axis: str, value: int, log2_lr: float, seed: int, loss: float, steps: int = 100) -> dict:
    return {"status": "finished", "seed": seed, "swept": [axis, "lr", "seed"], "summary_metrics": ["final_val_loss"],
            "summary_plots": ["val_curves"], "diverged": False, "final_val_loss": loss,
            "overrides": {axis: str(value), "lr": str(2.0**log2_lr), "seed": str(seed)},
            "config": {"model": {"family": "decoder"}, "param": {"name": "sp"}, "width": 16, "depth": 2, "steps": steps,
                       "batch_size": 32, "lr": 2.0**log2_lr, axis: value},
            "val_history": [[0, 3.3], [steps // 2, loss + 0.3], [steps, loss]]}


def write_sweep(folder, axis, values, optimum, seeds=(1, 2)):
    rng = random.Random(3)
    for v in values:
        for s in seeds:
            for x in GRID:
                loss = 0.05 * (x - optimum(v)) ** 2 + 2.0 + rng.gauss(0, 0.01)
                rec = job(axis, v, x, s, loss, steps=v if axis == "steps" else 100)
                (folder / f"{axis}={v}_lr={x}_seed={s}").mkdir(parents=True)
                (folder / f"{axis}={v}_lr={x}_seed={s}" / "metrics.json").write_text(json.dumps(rec))


def drawn(monkeypatch) -> dict:
    """Each figure the plots make, by file stem, kept as matplotlib built it."""
    figures, real = {}, plots._png_svg

    def keep(fig, stem):
        figures[stem] = fig
        return real(fig, stem)

    monkeypatch.setattr(plots, "_png_svg", keep)
    return figures


def markers_inside(fig) -> list[str]:
    """Every marker of every panel that lies outside that panel's limits."""
    out = []
    for ax in fig.axes:
        (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
        for line in ax.get_lines():
            if line.get_marker() in (None, "None", "", " "):
                continue
            for x, y in zip(line.get_xdata(), line.get_ydata()):
                if math.isfinite(x) and math.isfinite(y) and not (x0 <= x <= x1 and y0 <= y <= y1):
                    out.append(f"{ax.get_title()}: ({x}, {y}) outside x {x0}..{x1}, y {y0}..{y1}")
    return out


def test_a_batch_sweep_without_a_param_axis_gets_the_figure(tmp_path, monkeypatch):
    figures = drawn(monkeypatch)
    write_sweep(tmp_path, "batch_size", (8, 32, 128), lambda b: -7 + 0.5 * math.log2(b / 32))
    summarize(tmp_path)
    assert (tmp_path / "lr_transfer_batch_size.png").is_file() and "lr_transfer_batch_size.png" in (tmp_path / "summary.md").read_text()
    fig = figures["lr_transfer_batch_size"]
    (ax,) = fig.axes
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 3 and ax.get_title() == "the sweep"  # one optimum per batch size; no "µP: ..." or "all"
    assert ax.collections, "no seed band"
    assert markers_inside(fig) == []


def test_fifteen_horizons_get_fifteen_colours_and_every_marker_inside(tmp_path, monkeypatch):
    figures = drawn(monkeypatch)
    horizons = [100 + 50 * i for i in range(15)]
    write_sweep(tmp_path, "steps", horizons, lambda d: -6 - 0.3 * math.log2(d / 100), seeds=(1,))
    summarize(tmp_path)
    assert (tmp_path / "lr_transfer_steps.png").is_file()
    fig = figures["lr_transfer_steps"]
    stars = [line for line in fig.axes[0].get_lines() if line.get_marker() == "*"]
    assert len({to_hex(line.get_color()) for line in stars}) == 15  # a ramp of oranges made them one colour
    assert markers_inside(fig) == []
    # val_curves: 15 x 7 settings, each its own colour; its zoomed panel keeps the short runs' end markers
    curves = figures["val_curves"]
    assert markers_inside(curves) == [], markers_inside(curves)[:3]
    assert len({to_hex(line.get_color()) for line in curves.axes[0].get_lines()}) == len(horizons) * len(GRID)


def test_the_docs_and_the_help_say_any_transfer_axis_works(capsys):
    """docs/library.md said `axis` must be width or depth, and `initnorm-summarize --help` an lr x width (or depth) sweep."""
    import pytest

    from initnorm import transfer
    from initnorm.cli.summarize import main
    from tests.conftest import ROOT

    page = (ROOT / "docs" / "library.md").read_text(encoding="utf-8")
    assert "must be `width` or `depth`" not in page
    assert all(f"`{axis}`" in page for axis in transfer.SWEPT_AXES), transfer.SWEPT_AXES
    with pytest.raises(SystemExit):
        main(["--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "any transfer axis (width, depth, batch size, steps or tokens, weight decay)" in helped
