#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for the recipe's `--cmd slurm` test
# (crates/invar-cli/tests/slurm.rs) in CI or on a developer's machine.
#
#   slurm_env=$(.ci/slurm-up.sh) && eval "$slurm_env"
#
# Needs root and Debian's packages `slurm-wlm` and `munge` (installed here with apt-get when
# `sbatch` is missing and INVAR_SLURM_INSTALL=1, as .ci/run sets it). Writes a minimal slurm.conf
# for this host (its CPUs and memory as `slurmd -C` reports them; proctrack/linuxproc,
# task/none and select/cons_tres, so no cgroups are needed) into $INVAR_SLURM_DIR (default
# /tmp/invar-slurm), starts munged, slurmctld and slurmd, and waits until `sinfo` shows the node
# idle. Progress goes to stderr; stdout is only the `export` lines a caller evaluates
# (SLURM_CONF, so that sbatch/sinfo find this cluster). If a daemon does not come up, the script
# exits non-zero with that daemon's log. Running it again stops the daemons it started before.
set -euo pipefail

dir=${INVAR_SLURM_DIR:-/tmp/invar-slurm}
say() { echo "slurm-up: $*" >&2; }
die() {
  say "$1"
  if [ $# -gt 1 ] && [ -e "$2" ]; then
    say "---- the end of $2:"
    tail -n 40 "$2" >&2
  fi
  exit 1
}

if ! command -v sbatch >/dev/null 2>&1 || ! command -v slurmctld >/dev/null 2>&1 \
  || ! command -v munged >/dev/null 2>&1; then
  if [ "${INVAR_SLURM_INSTALL:-0}" = 1 ]; then
    say "installing slurm-wlm and munge (apt-get's output in $dir/apt.log)"
    mkdir -p "$dir"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update > "$dir/apt.log" 2>&1 || die "apt-get update failed" "$dir/apt.log"
    apt-get install -y --no-install-recommends slurm-wlm munge >> "$dir/apt.log" 2>&1 \
      || die "apt-get install slurm-wlm munge failed" "$dir/apt.log"
  else
    die "sbatch, slurmctld or munged is missing: apt-get install slurm-wlm munge (or set INVAR_SLURM_INSTALL=1)"
  fi
fi
[ "$(id -u)" = 0 ] || die "must run as root (slurmd runs jobs as their users)"

mkdir -p "$dir"
# Stop what an earlier run of this script started (their pid files are ours).
for d in slurmd slurmctld munged; do
  if [ -s "$dir/$d.pid" ]; then
    pid=$(cat "$dir/$d.pid")
    if [ "$pid" -gt 1 ] 2>/dev/null && kill -0 "$pid" 2>/dev/null; then
      say "stopping the $d ($pid) an earlier run started"
      kill "$pid" || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$dir/$d.pid"
  fi
done
rm -rf "$dir/state" "$dir/spool" "$dir/munge"
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
rm -f "$dir"/*.log

# munge: a key of our own, its socket in $dir/munge (no system paths touched).
key=$dir/munge/munge.key
if [ -s /etc/munge/munge.key ]; then
  cp /etc/munge/munge.key "$key"
else
  dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
fi
chmod 0400 "$key"
chmod 0700 "$dir/munge"
socket=$dir/munge/munge.socket
munged --force --key-file="$key" --socket="$socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/munged.log" --seed-file="$dir/munge/munge.seed" \
  || die "munged did not start" "$dir/munged.log"
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done
[ -S "$socket" ] || die "munged did not create its socket $socket" "$dir/munged.log"

host=$(hostname -s)
node=$(slurmd -C | head -n 1)
case $node in NodeName=*) ;; *) die "slurmd -C printed no node line: $node" ;; esac
conf=$dir/slurm.conf
cat > "$conf" <<EOF
# Written by .ci/slurm-up.sh: one node, this machine.
ClusterName=invar
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SlurmctldPort=6817
SlurmdPort=6818
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
export SLURM_CONF=$conf

if sinfo -h >/dev/null 2>&1; then
  die "a slurmctld already answers at $host:6817 (another cluster on this machine?); stop it first"
fi
slurmctld -f "$conf" || die "slurmctld did not start" "$dir/slurmctld.log"
slurmd -f "$conf" || die "slurmd did not start" "$dir/slurmd.log"

say "waiting for the node to be idle"
state=""
for i in $(seq 120); do
  state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)
  [ "$state" = idle ] && break
  for d in slurmctld slurmd; do
    # A daemon writes its pid file once it runs; none after 5 s means it died starting.
    if [ -s "$dir/$d.pid" ]; then
      kill -0 "$(cat "$dir/$d.pid")" 2>/dev/null || die "$d exited" "$dir/$d.log"
    elif [ "$i" -gt 10 ]; then
      die "$d did not start (no pid file)" "$dir/$d.log"
    fi
  done
  sleep 0.5
done
if [ "$state" != idle ]; then
  say "the node is '${state:-not listed}' after 60 s"
  tail -n 20 "$dir/slurmd.log" >&2 || true
  die "the cluster did not come up" "$dir/slurmctld.log"
fi
# The node is ours only if our daemons are still up (not another cluster's answering).
for d in slurmctld slurmd; do
  if ! { [ -s "$dir/$d.pid" ] && kill -0 "$(cat "$dir/$d.pid")" 2>/dev/null; }; then
    die "$d is not running" "$dir/$d.log"
  fi
done
say "node $host idle: $(sinfo -h -N -o '%N %c CPUs %m MB')"
echo "export SLURM_CONF=$conf"
