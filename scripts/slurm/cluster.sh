#!/usr/bin/env bash
# A real single-node SLURM on this machine, from Debian's packages, for the launcher's integration
# tests (tests/slurm/). Needs root and a Debian-like system without systemd.
#
#   scripts/slurm/cluster.sh up      install what is missing, write the configs, start the daemons
#   scripts/slurm/cluster.sh env     print `export SLURM_CONF=...` (eval it to use the cluster)
#   scripts/slurm/cluster.sh down    stop the daemons this script started (by the PIDs it kept)
#
# Everything lives in $INITNORM_SLURM_DIR (default /tmp/initnorm-slurm): configs, spool, logs,
# a private MariaDB data folder, and pids/ (one file per daemon started here). Nothing is written
# under /etc except munge's key when the package did not create one; a munged that was already
# running is used and left running.
set -euo pipefail

DIR=${INITNORM_SLURM_DIR:-/tmp/initnorm-slurm}
HOST=$(hostname -s)
CLUSTER=initnorm
DB_PORT=${INITNORM_SLURM_DB_PORT:-3317}
PIDS=$DIR/pids
export SLURM_CONF=$DIR/etc/slurm.conf

say() { echo "[slurm] $*" >&2; }
die() { echo "[slurm] error: $*" >&2; exit 1; }

install_packages() {
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurm-wlm)
    command -v munged >/dev/null || missing+=(munge)
    command -v slurmdbd >/dev/null || missing+=(slurmdbd)
    command -v mariadbd >/dev/null || missing+=(mariadb-server)
    [ ${#missing[@]} -eq 0 ] && return
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them; install them by hand"
    say "installing ${missing[*]} (a few minutes)"
    apt-get update -q >/dev/null
    # Another apt-get may hold the lock: wait for it instead of failing.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends "${missing[@]}" >"$DIR/log/apt.log" 2>&1 \
        || die "apt-get install ${missing[*]} failed; see $DIR/log/apt.log"
}

# start NAME COMMAND...: run a daemon in the foreground mode of its own, in the background of this
# shell, with its output in log/NAME.out and its PID in pids/NAME.
start() {
    local name=$1; shift
    setsid "$@" >"$DIR/log/$name.out" 2>&1 </dev/null &
    echo $! >"$PIDS/$name"
    say "started $name (pid $!)"
}

# wait_for WHAT SECONDS COMMAND...: retry COMMAND every half second until it succeeds.
wait_for() {
    local what=$1 secs=$2; shift 2
    for _ in $(seq $((secs * 2))); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    die "$what did not come up within ${secs}s; logs in $DIR/log"
}

write_configs() {
    local node
    # The node as slurmd sees it, with memory rounded down so that slurmd never finds less than configured.
    node=$(slurmd -C | head -1 | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^RealMemory=/) { split($i, a, "="); $i = "RealMemory=" int(a[2] * 0.9) } print}')
    cat >"$DIR/etc/slurm.conf" <<CONF
# Written by scripts/slurm/cluster.sh: one node, root runs everything, accounting through slurmdbd (sacct).
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again cred_expire seconds after it ended (120 by default): 15 keeps the tests short.
AuthInfo=cred_expire=15
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/d
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
ReturnToService=2
MpiDefault=none
# A site's usual grace between SIGTERM and SIGKILL at a time limit or scancel.
KillWait=30
# Jobs stay visible to squeue/scontrol a while after they end (submitit reads sacct anyway).
MinJobAge=300
$node
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
    cat >"$DIR/etc/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=initnorm
StorageLoc=slurm_acct_db
CONF
    chmod 600 "$DIR/etc/slurmdbd.conf"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        say "munged already running: using it"
        return
    fi
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
        chmod 400 /etc/munge/munge.key
    fi
    mkdir -p /run/munge /var/lib/munge /var/log/munge
    start munged munged --foreground --force
    wait_for munged 20 bash -c 'munge -n | unmunge'
}

start_db() {
    local sock=$DIR/run/mysqld.sock
    if [ ! -d "$DIR/mysql/mysql" ]; then
        mariadb-install-db --user=root --datadir="$DIR/mysql" --auth-root-authentication-method=socket --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed; see $DIR/log/mariadb-install.log"
    fi
    start mariadbd mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$sock" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --pid-file="$DIR/run/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" \
        --innodb-buffer-pool-size=64M --skip-name-resolve
    wait_for mariadbd 60 mariadb --no-defaults --socket="$sock" -e 'select 1'
    mariadb --no-defaults --socket="$sock" -e "
        CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'initnorm';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

up() {
    [ "$(id -u)" = 0 ] || die "needs root (the daemons run as root here); on a real cluster none of this is needed"
    if [ -d "$PIDS" ] && ls "$PIDS"/* >/dev/null 2>&1; then
        die "$PIDS holds PIDs of a cluster started before; run '$0 down' first"
    fi
    mkdir -p "$DIR"/{etc,spool/ctld,spool/d,log,run} "$PIDS"
    install_packages
    for port in 6817 6818 6819 "$DB_PORT"; do
        if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then die "port $port is taken: is another SLURM or database running?"; fi
    done
    write_configs
    start_munge
    start_db
    start slurmdbd slurmdbd -D
    wait_for slurmdbd 60 sacctmgr -n show cluster
    if ! sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null
    fi
    start slurmctld slurmctld -D -i
    wait_for slurmctld 60 scontrol ping
    start slurmd slurmd -D
    wait_for "the node" 60 bash -c "sinfo -h -N -o %t | grep -qx idle"
    wait_for "sacct" 30 sacct -n -X
    say "up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %t'); SLURM_CONF=$SLURM_CONF"
}

down() {
    [ -d "$PIDS" ] || { say "nothing to stop"; return 0; }
    # Jobs first (their steps would otherwise outlive slurmd), then the daemons in reverse order.
    if [ -f "$PIDS/slurmctld" ] && kill -0 "$(cat "$PIDS/slurmctld")" 2>/dev/null; then
        scancel --quiet --user=root 2>/dev/null || true
        for _ in $(seq 80); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
    fi
    for name in slurmd slurmctld slurmdbd mariadbd munged; do
        [ -f "$PIDS/$name" ] || continue
        local pid; pid=$(cat "$PIDS/$name")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; say "killed $name (pid $pid)"; else say "stopped $name (pid $pid)"; fi
        fi
        rm -f "$PIDS/$name"
    done
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
