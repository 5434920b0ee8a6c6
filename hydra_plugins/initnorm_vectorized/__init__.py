"""initnorm's Hydra launcher plugin: ``hydra/launcher=vectorized`` (the work is in initnorm.cli.vectorized)."""
