"""The launcher's integration tests against a real SLURM (`make test-slurm`, scripts/slurm/test.sh).

They are not collected by the main suite (`make test`): they need root, a single-node SLURM with
accounting brought up by scripts/slurm/cluster.sh, and several minutes.
"""

import os

if os.environ.get("INITNORM_SLURM") != "1":
    collect_ignore_glob = ["test_*.py"]
