"""The coordinate check's picture, in the style of microsoft/mup's coordinate-check plots (the shared look: ``initnorm.plots``)."""

from __future__ import annotations

from initnorm.plots import grid, png


def coord_check_png(panels: dict[int, dict[str, dict[str, dict[int, float]]]], axis: str, names: dict[str, str],
                    key_layers: tuple[str, ...], judged: int | None = None) -> bytes:
    """microsoft/mup's coordinate-check picture: one row of panels per step, one column per
    parameterisation (``panels``: step -> param -> layer -> axis value -> change), log-log; the row of
    ``judged``, the step the verdict judges, says so in its titles."""
    params = list(dict.fromkeys(p for data in panels.values() for p in data))
    fig, axes = grid(5 * len(params), 3.2 * len(panels), len(panels), len(params), sharey="row")
    for i, (step, data) in enumerate(panels.items()):
        for j, param in enumerate(params):
            ax = axes[i][j]
            for name, v in sorted(data.get(param, {}).items()):
                xs = sorted(v)
                key = name in key_layers
                ax.plot(xs, [v[x] for x in xs], marker="o", ms=3, lw=2.2 if key else 1, alpha=1 if key else 0.6, label=name)
            title = f"{names.get(param, param)}, step {step}{' (judged)' if step == judged else ''}"
            ax.set(yscale="log", title=title, xlabel=axis if i == len(panels) - 1 else "")
            ax.set_xscale("log", base=2)
            if j == 0:
                ax.set_ylabel("RMS change from step 0")
    handles = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}  # every layer once, in plot order
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(5, len(handles)), fontsize=7, frameon=False)
    return png(fig)
