"""The spectral condition during training, one package: ``callback.py``'s ``Spectral`` records, per weight matrix
and member, ``||W||₂`` and ``||ΔW||₂`` over sqrt(fan_out / fan_in) and, for the matrices Muon steps, the Newton-Schulz
residual ``||OᵀO − I||₂`` (``muon.py``: which matrices those are, and the residual), under ``Spectral/`` in
TensorBoard (docs/tensorboard.md)."""

from initnorm.instruments import lazy

__all__ = ["MUON_TYPES", "MuonMatrix", "Spectral", "muon_matrices", "ns_residual", "residual_records"]

# The callback's names are looked up when first used (instruments.lazy): it imports Lightning.
__getattr__ = lazy(__name__, {"MUON_TYPES": "initnorm.instruments.spectral.muon", "MuonMatrix": "initnorm.instruments.spectral.muon",
                              "muon_matrices": "initnorm.instruments.spectral.muon", "ns_residual": "initnorm.instruments.spectral.muon",
                              "Spectral": "initnorm.instruments.spectral.callback",
                              "residual_records": "initnorm.instruments.spectral.callback"})
