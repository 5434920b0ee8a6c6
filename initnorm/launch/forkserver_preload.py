"""Imported by the sweep's fork server only, first of its preloads (``workers.pool``): the stop signals ignored there.

The server imports torch, Lightning and initnorm (seconds) and then forks every worker. A SIGTERM to the process group
killed it (every worker it had forked then read as lost, "status 255", and their jobs were recorded failed), and a
Ctrl-C during its imports printed a ``KeyboardInterrupt`` traceback. Blocking them in the thread that starts it did not
hold: the server ran with SIGTERM and SIGINT unblocked. Ignored, they stay ignored in each worker it forks until pebble
and the pool's initializer (``pool._worker_start``) set the worker's own handlers; only the sweep's process ends the
server (``workers.end``).

Python's garbage collector is off in the server from here on: it imports and forks, nothing else, and each worker
turns it back on over a frozen heap (``initnorm/collector.py``: the imports' CPU 5.1-5.3 s -> 3.9-4.1 s).
"""

import gc
import signal

gc.disable()

for _name in ("SIGTERM", "SIGINT", "SIGUSR2"):
    signal.signal(getattr(signal, _name), signal.SIG_IGN)
