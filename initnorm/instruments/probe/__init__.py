"""Signal and gradients through depth at initialisation (deck §7a, the chapter's MLP probe), in one place:
``probe.py`` measures and tabulates, ``figure.py`` draws. The command is ``python -m initnorm.probe``
(``cli/probe.py``).
"""

from initnorm.instruments.probe.figure import (
    probe_decoder_png,
    probe_mlp_png,
)
from initnorm.instruments.probe.probe import (
    CHAPTER_INITS,
    OTHER_INITS,
    PROBE_ACTIVATIONS,
    check_prompt,
    decoder_csv,
    decoder_probe,
    decoder_table,
    init_label,
    mlp_csv,
    mlp_table,
    signal_per_layer,
)

__all__ = [
    "CHAPTER_INITS", "OTHER_INITS", "PROBE_ACTIVATIONS", "check_prompt", "decoder_csv", "decoder_probe",
    "decoder_table", "init_label", "mlp_csv", "mlp_table", "probe_decoder_png", "probe_mlp_png",
    "signal_per_layer",
]
