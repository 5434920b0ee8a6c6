"""Where a sweep's units of work run, apart from how the command line made them: the executors (``executors.py``: in this
process, this machine's worker processes, SLURM tasks), the worker pool (``pool.py`` on pebble, ``workers.py``: started
early, ended with the sweep; ``forkserver_preload.py``) and SLURM through submitit (``slurm.py``).

It imports nothing of ``initnorm/cli`` and no Hydra app code (``tests/test_layout.py``): what a unit is and how its jobs
are recorded, the launcher (``cli/run.py``) passes in.
"""
