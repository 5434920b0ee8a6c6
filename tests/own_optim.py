"""A user's own optimiser for the tests: examples/lion.py's Lion, trained by
``optim=custom optim._target_=tests.own_optim.Lion optim.family=adam`` as from a module of one's own."""

from examples.lion import Lion

__all__ = ["Lion"]
