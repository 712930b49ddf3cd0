#!/usr/bin/env bash
# Starts a single-node Slurm cluster on loopback, for tests and demos: its
# own munged (own key and socket), slurmctld and slurmd, everything under
# STATE_DIR. Runs as root in a container without systemd.
#
# Usage: deploy/slurm/start-local-slurm.sh STATE_DIR [NODE_NAME]
#   NODE_NAME         default vigil-n001
#   SLURMCTLD_PORT    environment; default: the first free pair of ports
#   SLURMD_PORT       from 16817/16818 upwards
# Prints on stdout the lines to eval for the Slurm clients:
#   eval "$(deploy/slurm/start-local-slurm.sh /tmp/slurm)"
#   sinfo; sbatch --wrap 'sleep 60'; ...
# Everything else goes to stderr. Running it again while the cluster is up
# only prints the exports. Stop it with deploy/slurm/stop-local-slurm.sh.
set -euo pipefail

die() { echo "start-local-slurm: $*" >&2; exit 1; }
say() { echo "start-local-slurm: $*" >&2; }

[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 STATE_DIR [NODE_NAME]" >&2; exit 2; }
node=${2:-vigil-n001}
[[ $node =~ ^[A-Za-z][A-Za-z0-9_-]{0,62}$ ]] || die "bad node name '$node'"
for program in munged slurmctld slurmd sinfo scontrol; do
  command -v "$program" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$program" >/dev/null 2>&1 ||
    die "$program is missing: apt-get install munge slurmctld slurmd slurm-client"
done
export PATH=$PATH:/usr/sbin:/sbin

mkdir -p "$1"
state=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
conf=$state/slurm.conf
socket=$state/munge/munge.socket
export SLURM_CONF=$conf

alive() {  # pid file, program name
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}

print_exports() {
  echo "export SLURM_CONF=$conf"
  echo "export VIGIL_SLURM_NODE=$node"
}

if alive "$state/run/munged.pid" munged && alive "$state/run/slurmctld.pid" slurmctld &&
   alive "$state/run/slurmd-$node.pid" slurmd; then
  say "already running ($conf)"
  print_exports
  exit 0
fi
# Whatever is left of an earlier run goes first.
"$here/stop-local-slurm.sh" "$state" >/dev/null 2>&1 || true

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if [ -n "${SLURMCTLD_PORT:-}" ] || [ -n "${SLURMD_PORT:-}" ]; then
  ctld_port=${SLURMCTLD_PORT:-16817}
  slurmd_port=${SLURMD_PORT:-$((ctld_port + 1))}
else
  ctld_port=16817
  while ! port_free "$ctld_port" || ! port_free "$((ctld_port + 1))"; do
    ctld_port=$((ctld_port + 2))
    [ "$ctld_port" -lt 17817 ] || die "no free port pair in 16817-17817"
  done
  slurmd_port=$((ctld_port + 1))
fi

mkdir -p "$state/munge" "$state/ctld" "$state/spool" "$state/log" "$state/run"
chmod 0700 "$state/munge"
key=$state/munge/munge.key
if [ ! -s "$key" ]; then
  mungekey --create --keyfile="$key" 2>/dev/null ||
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
fi
chmod 0600 "$key"

cpus=$(nproc)
memory_mb=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
cat > "$conf" <<CONF
# Written by deploy/slurm/start-local-slurm.sh: one node on loopback.
ClusterName=vigil
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/spool/%n
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd-%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

show_logs() {
  for log in "$state"/log/*.log; do
    [ -f "$log" ] || continue
    echo "---- $log" >&2
    tail -n 30 "$log" >&2
  done
}
fail() {
  say "$*"
  show_logs
  "$here/stop-local-slurm.sh" "$state" >&2 || true
  exit 1
}

munged --socket="$socket" --key-file="$key" --pid-file="$state/run/munged.pid" \
  --log-file="$state/log/munged.log" --seed-file="$state/munge/munged.seed" --force \
  2>>"$state/log/munged.log" || fail "munged did not start"
slurmctld -f "$conf" -i 2>>"$state/log/slurmctld.log" || fail "slurmctld did not start"
slurmd -f "$conf" -N "$node" 2>>"$state/log/slurmd-$node.log" || fail "slurmd did not start"

deadline=$((SECONDS + 30))
node_state=""
while [ $SECONDS -lt $deadline ]; do
  node_state=$(sinfo -h -n "$node" -o %T 2>/dev/null || true)
  [ "$node_state" = idle ] && break
  sleep 0.2
done
[ "$node_state" = idle ] || fail "node $node is not idle after 30 s (state: '${node_state:-none}')"
say "node $node idle; slurmctld on 127.0.0.1:$ctld_port, slurmd on 127.0.0.1:$slurmd_port"
print_exports
