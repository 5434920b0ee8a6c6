#!/usr/bin/env bash
# `make test-slurm`: bring up a real single-node SLURM (scripts/slurm/cluster.sh), run the integration tests
# against it (tests/slurm/: the launcher, and a search whose workers are SLURM tasks), and stop the daemons it
# started, whatever happened.
# Needs root on a Debian-like machine (apt-get installs slurm-wlm, munge, slurmdbd and mariadb-server
# if they are missing). Extra arguments go to pytest (e.g. -k scancel).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
# A fresh folder each time: configs, logs, the accounting database, the daemons' PIDs.
fresh=${INITNORM_SLURM_DIR:-}
export INITNORM_SLURM_DIR=${INITNORM_SLURM_DIR:-$(mktemp -d /tmp/initnorm-slurm.XXXXXX)}
begin=$(date +%s)
finish() {
    local rc=$?
    scripts/slurm/cluster.sh down || true
    # Keep the logs; the database (about 170 MB) and the spool go with a folder this script made.
    [ -z "$fresh" ] && rm -rf "$INITNORM_SLURM_DIR/mysql" "$INITNORM_SLURM_DIR/spool"
    echo "[slurm] $(( $(date +%s) - begin )) s in all (load: $(cut -d' ' -f1-3 /proc/loadavg)); logs in $INITNORM_SLURM_DIR/log"
    exit $rc
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
scripts/slurm/cluster.sh up
eval "$(scripts/slurm/cluster.sh env)"
echo "[slurm] cluster up after $(( $(date +%s) - begin )) s"
INITNORM_SLURM=1 "$PY" -m pytest -p no:warnings -p no:cacheprovider -v --durations=0 tests/slurm "$@"
