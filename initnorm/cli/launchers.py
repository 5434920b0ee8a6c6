"""initnorm's own Hydra launchers, registered by hand.

Hydra instantiates a launcher only from a class under the ``hydra_plugins`` namespace, and finds
those by scanning the ``hydra_plugins`` folders on ``sys.path``, which an editable install
(``pip install -e``) does not expose. Registering the classes by hand works for every kind of
install: ``hydra/launcher=slurm`` (initnorm/cli/slurm.py), ``hydra/launcher=vectorized``
(initnorm/cli/vectorized.py) and the sweeper ``hydra/sweeper=checked`` (initnorm/cli/sweeper.py).
"""


def register() -> None:
    from hydra.core.plugins import Plugins
    from hydra_plugins.initnorm_launchers import CheckedSweeper, SlurmLauncher
    from hydra_plugins.initnorm_vectorized.vectorized_launcher import VectorizedLauncher

    for plugin in (SlurmLauncher, VectorizedLauncher, CheckedSweeper):
        Plugins.instance().register(plugin)
