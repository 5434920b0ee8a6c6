"""Per-layer statistics during training (activation RMS, gradient RMS and norm, ‖ΔW‖/‖W‖):
``callback.py``'s ``LayerStats``, per member, into TensorBoard (``docs/instruments.md``).
"""

from initnorm.instruments.stats.callback import (
    LayerStats,
    activation_records,
    gradient_records,
    member_gradient_records,
    member_update_records,
)

__all__ = [
    "LayerStats", "activation_records", "gradient_records", "member_gradient_records",
    "member_update_records",
]
