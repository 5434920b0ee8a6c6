"""initnorm's instruments as Lightning callbacks, for initnorm's own runs and for any Lightning project::

    from initnorm.callbacks import CoordCheck, Diagnostics, LayerStats

    trainer = L.Trainer(callbacks=[LayerStats(every_n_steps=50), Diagnostics(every_n_steps=50), CoordCheck(steps=10)],
                        logger=TensorBoardLogger("runs"))

- ``LayerStats(every_n_steps=50, activations=True, gradients=True, updates=True, per_param=False)``: per-layer
  activation RMS at the model's probe points, gradient norm and RMS, ‖ΔW‖/‖W‖ (``instruments/stats``);
- ``Diagnostics(every_n_steps=50, effective_lr=True, eps=True, spectral=True, power_steps=20)``: each parameter's
  effective rate, Adam's ε fraction, the top singular values of W and ΔW (``instruments/diagnostics``);
- ``CoordCheck(steps=10, windows=16, width=None, depth=None, param=None, seed=None)``: the coordinate check's
  RMS change from step 0 on the first ``windows`` validation inputs of the data module, and ``coord.csv`` in the
  trainer's ``default_root_dir`` (``instruments/coord``);
- ``Spectral(every_n_steps=50, weight=True, update=True, ns_residual=True, power_steps=20)``: ``||W||₂`` and
  ``||ΔW||₂`` over sqrt(fan_out / fan_in), and for the matrices a ``torch.optim.Muon`` steps the Newton-Schulz
  residual ``||OᵀO − I||₂`` (``instruments/spectral``).

Each reads the model through ``members.members_of(pl_module, trainer)``: a LightningModule's ``.model``, else the
module itself, and the trainer's first optimiser; a stacked group of initnorm's brings its own view. Records go
to every logger under ``stat/layer/role`` (docs/tensorboard.md), as initnorm's own runs write them. Activations
and the coordinate check need the model's ``probe_points()``, which ``initnorm.parameterize`` gives a model of
one's own. Each class loads on first use (Lightning is most of a command's start).
"""

from initnorm.instruments import lazy

__all__ = ["CoordCheck", "Diagnostics", "LayerStats", "Spectral"]

__getattr__ = lazy(__name__, {"CoordCheck": "initnorm.instruments.coord.callback",
                              "Diagnostics": "initnorm.instruments.diagnostics.callback",
                              "LayerStats": "initnorm.instruments.stats.callback",
                              "Spectral": "initnorm.instruments.spectral.callback"})
