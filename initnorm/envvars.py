"""The environment variables initnorm reads and sets, each named once here.

A sweep's parent sets some after its worker processes started (they get those with each unit of work,
``SHARED``); a job, a worker or a SLURM task reads them. Nothing here imports anything: the command's
first modules (``initnorm/launch/workers.py``) read them before torch is imported.
"""

SWEEP_TOTAL = "INITNORM_SWEEP_TOTAL"  # jobs in this sweep (set by the parent before launching)
SWEEP_START = "INITNORM_SWEEP_START"  # time.time() when the sweep started
SWEPT_KEYS = "INITNORM_SWEPT_KEYS"  # the keys the sweep sweeps, comma-separated (job folder names, tables)
STOP_SIGNALS = "INITNORM_STOP_SIGNALS"  # the stop signals a job honours (training/signals.py)
LAUNCHER_PID = "INITNORM_LAUNCHER_PID"  # the launching process: a worker tells from it that it is a worker
FORKSERVER = "INITNORM_FORKSERVER"  # 0: loky's own start method for the workers, not the fork server
UNUSABLE_CACHE = "INITNORM_UNUSABLE_COMPILER_CACHE"  # the compiler cache folder that could not be written (cli/disk.py)
DATA_DIR = "INITNORM_DATA_DIR"  # a folder that holds the corpora
CACHE = "INITNORM_CACHE"  # where downloaded corpora are kept (default ~/.cache/initnorm)
PREFIX = "INITNORM_"  # every one of them: a SLURM job (--export=NONE) is handed these

# What the parent sets after the vectorised launcher's workers started: handed to each unit of work.
SHARED = (SWEEP_TOTAL, SWEEP_START, SWEPT_KEYS, STOP_SIGNALS)
