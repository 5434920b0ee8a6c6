"""The probes' pictures: deck §7a's stream and gradients through depth, the chapter's MLP probe (the shared look: ``initnorm.plots``)."""

from __future__ import annotations

from initnorm.plots import figure, grid, png


def probe_decoder_png(results: dict[tuple[str, float], dict[str, list[float]]]) -> bytes:
    """Deck §7a: the residual stream's RMS entering each block and each block's weight-gradient norm."""
    fig, (ax1, ax2) = figure(10, 3.6, ncols=2)
    for (norm, std), r in results.items():
        label = f"{norm}-LN, std {std:g}"
        ax1.plot(range(1, len(r["stream_rms"]) + 1), r["stream_rms"], marker="o", ms=3, label=label)
        ax2.plot(range(1, len(r["grad_norm"]) + 1), r["grad_norm"], marker="o", ms=3, label=label)
    ax1.set(title="residual stream RMS entering each block", xlabel="block (last point: leaving the last)", ylabel="RMS")
    ax2.set(title="weight-gradient norm per block", xlabel="block", ylabel="norm", yscale="log")
    ax1.legend()
    return png(fig)


def probe_mlp_png(results: dict[str, dict[str, tuple[list[float], list[float]]]]) -> bytes:
    """Chapter 003, steps 1-2: activation and gradient std per layer, one row per activation."""
    fig, axes = grid(10, 3.4 * len(results), len(results), 2)
    for (activation, rows), (ax1, ax2) in zip(results.items(), axes):
        for name, (fwd, bwd) in rows.items():
            ax1.semilogy(range(1, len(fwd) + 1), fwd, marker="o", ms=2.5, label=name)
            ax2.semilogy(range(1, len(bwd) + 1), bwd, marker="o", ms=2.5, label=name)
        ax1.set(title=f"{activation}: activation std (forward)", xlabel="layer (1 = input side)", ylabel="std (log scale)")
        ax2.set(title=f"{activation}: gradient std (backward)", xlabel="layer (1 = input side)")
        ax1.legend()
    return png(fig)
