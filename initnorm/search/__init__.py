"""A hyperparameter search's work apart from Hydra (``hparams_search=...``; docs/search.md): the study in one Optuna
journal file (``study.py``), a worker's loop of trials (``worker.py``), the sweep's process watching its workers
(``workers.py``, ``hang.py``) and the pruner's callback (``pruning.py``). The command line (``cli/search.py``, a Hydra
sweeper, and ``cli/search_workers.py``) reads the space and says how a trial's job is trained.
"""
