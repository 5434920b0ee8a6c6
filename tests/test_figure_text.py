"""No two pieces of text overlap in any figure the project writes (issue 36: probe_mlp.png's x-labels printed over
the row below's titles; val_curves.png's right title ran into the left panel). Each figure is drawn by matplotlib's
Agg renderer from inputs of the shapes the project gives it (a search's 18-digit rates, 30-layer probes, three
activations, four parameterisations), and every text drawn (titles, axis labels, tick labels, legends) is measured."""

from __future__ import annotations

import math

import pytest
from matplotlib.text import Text

from initnorm import plots, search_report
from initnorm.instruments.coord import figure as coord_figure
from initnorm.instruments.probe import figure as probe_figure

CONFIG = {"model": {"family": "decoder"}, "data": {"name": "alice"}, "optim": {"name": "adamw"}, "width": 16, "depth": 6,
          "steps": 1500, "lr": 0.01, "batch_size": 32}
SEARCH_LRS = ["0.004430375245218269", "0.013981961408994055", "0.006431172050131994", "0.004311710058685493",
              "0.0009931205580412234", "0.03012544402950022", "0.0002112470361291005", "0.0618309214101455"]


def curve(end: float, steps: int = 1500) -> list[list[float]]:
    return [[s, end + 1.5 * math.exp(-s / 300)] for s in range(0, steps + 1, 100)]


def val_records(key: str, values: list[str]) -> list[dict]:
    return [{"status": "finished", "seed": s, "swept": [key, "seed"], "overrides": {key: v, "seed": str(s)},
             "val_history": curve(1.8 + i / 50 + s / 500), "final_val_loss": 1.8 + i / 50 + s / 500, "config": CONFIG}
            for i, v in enumerate(values) for s in (1, 2, 3)]


def norm_warmup() -> list[dict]:
    return [{"status": "finished", "seed": s, "swept": ["norm", "warmup", "seed"],
             "overrides": {"norm": n, "warmup": w, "seed": str(s)}, "val_history": curve(1.7 + s / 100 + (n == "post") * (w == "0")),
             "final_val_loss": 1.7 + s / 100, "config": CONFIG}
            for n in ("pre", "post") for w in ("0", "200") for s in (1, 2, 3)]


def regularization() -> list[dict]:
    config = {**CONFIG, "model": {"family": "wide_mlp"}, "data": {"kind": "clusters"}}
    return [{"status": "finished", "seed": s, "swept": ["regularizer", "seed"], "overrides": {"regularizer": reg, "seed": str(s)},
             "eval_history": {"val": [[t, 1.0 + i / 5 + 2 * math.exp(-t / 200)] for t in range(0, 2001, 100)],
                              "train": [[t, 0.5 + i / 5 + 2 * math.exp(-t / 200)] for t in range(0, 2001, 100)]}, "config": config}
            for i, reg in enumerate(("none", "dropout_0.2", "dropout_0.5", "weight_decay_1.0")) for s in (1, 2)]


def deep_mlp() -> list[dict]:
    config = {**CONFIG, "model": {"family": "deep_mlp"}, "data": {"kind": "clusters"}, "depth": 30}
    return [{"status": "finished", "seed": s, "swept": ["model.activation", "init", "seed"],
             "overrides": {"model.activation": act, "init": init, "seed": str(s)},
             "train_losses": [2.3 * math.exp(-t / (100 + 50 * i)) for t in range(500)], "val_acc": 0.9 - i / 10, "config": config}
            for act in ("tanh", "relu") for i, init in enumerate(("unit_normal", "small", "xavier", "he")) for s in (1, 2)]


def transfer(axis: str, sizes: tuple[int, ...], params: tuple[str, ...]) -> list[dict]:
    return [{"status": "finished", "seed": s, "swept": ["param", axis, "lr", "seed"], "summary_metrics": ["final_val_loss"],
             "overrides": {"param": p, axis: str(n), "lr": str(2.0**x), "seed": str(s)},
             "final_val_loss": 1.8 + (x + 7 + (p == "sp") * math.log2(n / sizes[0])) ** 2 / 20 + s / 200, "config": CONFIG}
            for p in params for n in sizes for x in range(-12, -1) for s in (1, 2, 3)]


def search_trials(names: tuple[str, ...]) -> list[dict]:
    return [{"number": i, "state": "PRUNED" if i == 5 else "COMPLETE",
             "params": {n: float(v) * (k + 1) for k, n in enumerate(names)}, "loss": 1.8 + abs(math.log(float(v) / 0.01)) / 10}
            for i, v in enumerate(SEARCH_LRS)]


def coord_panels(params: tuple[str, ...]) -> dict:
    layers = [f"block_{b:02d}/{r}" for b in (1, 2) for r in ("stream_in", "attn_out", "mlp_out")] + ["logits/output", "embed/output"]
    return {step: {p: {layer: {w: 0.01 * w ** (0.5 * (p == "sp")) * (i + 1) for w in (16, 32, 64, 128, 256)}
                       for i, layer in enumerate(layers)} for p in params} for step in (1, 10)}


FIGURES = {
    "val_curves (norm x warmup)": lambda: plots.PLOTS.get("val_curves")(norm_warmup()),
    "val_curves (a search's rates)": lambda: plots.PLOTS.get("val_curves")(val_records("lr", SEARCH_LRS)),
    "train_val_curves": lambda: plots.PLOTS.get("train_val_curves")(regularization()),
    "train_curves": lambda: plots.PLOTS.get("train_curves")(deep_mlp()),
    "lr_transfer": lambda: plots.PLOTS.get("lr_transfer")(transfer("width", (64, 256, 1024), ("sp", "mup", "umup", "completep"))),
    "lr_transfer_depth": lambda: plots.PLOTS.get("lr_transfer_depth")(transfer("depth", (2, 4, 8), ("sp", "depth_mup"))),
    "lr_optimum (batch size)": lambda: plots.PLOTS.get("lr_optimum")(transfer("batch_size", (8, 16, 32, 64, 128), ("sp", "mup"))),
    "search (lr)": lambda: search_report.figure(search_trials(("lr",)), search_trials(("lr",))[1], "final_val_loss", ["lr"]),
    "search (three multipliers)": lambda: search_report.figure(search_trials(("lr", "param.output_mult", "param.attn_mult")),
                                                               None, "final_loss", ["lr"]),
    "probe_decoder": lambda: probe_figure.probe_decoder_png({(n, std): {"stream_rms": [0.7 * 1.2**b for b in range(9)],
                                                                        "grad_norm": [1e-3 * 3**b for b in range(8)]}
                                                             for n in ("pre", "post") for std in (0.02, 0.25)}),
    "probe_mlp": lambda: probe_figure.probe_mlp_png({act: {name: ([10.0 ** (k * n / 3) for n in range(30)],
                                                                  [10.0 ** (-k * n) for n in range(30)])
                                                           for k, name in enumerate(("N(0, 1)", "N(0, 0.01)", "Xavier", "He"), -1)}
                                                     for act in ("tanh", "relu", "gelu")}),
    "coord_check": lambda: coord_figure.coord_check_png(coord_panels(("sp", "mup", "umup")), "width",
                                                        {"sp": "SP", "mup": "µP", "umup": "u-µP"}, ("logits/output",)),
}


def texts_drawn(fig) -> list[tuple[str, object]]:
    """Every piece of text the renderer draws, with its box in pixels."""
    drawn: list[tuple[str, object]] = []
    draw = Text.draw

    def spy(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append((self.get_text(), self.get_window_extent(renderer)))

    Text.draw = spy
    try:
        fig.canvas.draw()
    finally:
        Text.draw = draw
    return drawn


@pytest.mark.parametrize("name", FIGURES)
def test_no_two_texts_overlap(name, monkeypatch):
    """Each figure is caught where it would be written (``png``; a sweep plot's ``_png_svg``) and drawn once below at
    the PNG's dpi, as savefig draws it; its files are not rendered (with ``bbox_inches="tight"`` each is two draws
    more, nothing this test reads)."""
    made = []
    for module in (plots, probe_figure, coord_figure):
        monkeypatch.setattr(module, "png", lambda fig: made.append(fig) or b"")
    monkeypatch.setattr(plots, "_png_svg", lambda fig, stem: made.append(fig) or {})
    FIGURES[name]()
    assert made, f"{name} drew no figure"
    for fig in made:
        fig.set_dpi(plots.DPI)
        boxes = texts_drawn(fig)
        clashes = [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
                   if box_a.x0 < box_b.x1 - 1 and box_b.x0 < box_a.x1 - 1 and box_a.y0 < box_b.y1 - 1 and box_b.y0 < box_a.y1 - 1]
        assert not clashes, f"{name}: overlapping text {clashes[:6]}"
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:  # a title wider than its panel runs into the next one
            box, title = ax.get_window_extent(renderer), ax.title
            if title.get_text():
                t = title.get_window_extent(renderer)
                slack = 0.05 * box.width
                assert box.x0 - slack <= t.x0 and t.x1 <= box.x1 + slack, f"{name}: {title.get_text()!r} is wider than its panel"


def test_every_figure_the_project_writes_is_measured_above():
    """A figure added later is measured too: every sweep plot in the registry has an entry in FIGURES, and every module of
    initnorm that renders a figure (``plots.png`` or ``savefig``) is one whose ``png`` the test above intercepts, or draws
    through one that is (``search_report``: ``plots.png``; ``own_runs``: the registry's plots)."""
    import pathlib
    import re

    import initnorm

    assert set(plots.PLOTS.names()) <= {name.split(" (")[0] for name in FIGURES}, "a sweep plot FIGURES does not draw"
    root = pathlib.Path(initnorm.__file__).parent
    renders = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                     if re.search(r"\.savefig\(|import [^\n]*\bpng\b|plots\.png\(", p.read_text(encoding="utf-8")))
    assert renders == ["instruments/coord/figure.py", "instruments/probe/figure.py", "plots.py", "search_report.py"], renders
