"""The unit-scale check (u-µP): every layer's output near RMS 1 at initialisation and after a few steps,
for any parameterisation: ``callback.py``'s ``UnitScale``, per member, into TensorBoard and ``unit_scale.txt``."""

from initnorm.instruments.unitscale.callback import UNIT_FILE, UnitScale, verdict

__all__ = ["UNIT_FILE", "UnitScale", "verdict"]
