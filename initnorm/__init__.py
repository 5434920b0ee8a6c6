"""initnorm: initialisation, normalisation and µP experiments with Lightning + Hydra."""

__version__ = "0.1.0"
