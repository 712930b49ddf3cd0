#!/usr/bin/env bash
# Stops what deploy/slurm/start-local-slurm.sh started under STATE_DIR:
# cancels the cluster's jobs, then slurmd, slurmctld and munged (by their
# pid files, checking each pid is still that program). Safe to run again,
# or when nothing is running.
# Usage: deploy/slurm/stop-local-slurm.sh STATE_DIR
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 STATE_DIR" >&2; exit 2; }
[ -d "$1" ] || exit 0
state=$(cd "$1" && pwd)
export PATH=$PATH:/usr/sbin:/sbin
export SLURM_CONF=$state/slurm.conf

pid_of() {  # pid file, program name: the pid if that program runs it
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] && echo "$pid"
}

stop() {  # pid file, program name
  local pid
  pid=$(pid_of "$1" "$2") || { rm -f "$1"; return 0; }
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do
    [ -d "/proc/$pid" ] || break
    sleep 0.1
  done
  [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null
  rm -f "$1"
  echo "stop-local-slurm: stopped $2 ($pid)" >&2
}

# Jobs outlive slurmd (slurmstepd keeps them), so cancel them first.
if pid_of "$state/run/slurmctld.pid" slurmctld >/dev/null && [ -f "$SLURM_CONF" ]; then
  jobs=$(squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086  # one id per word
    scancel $jobs 2>/dev/null
    for _ in $(seq 100); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
fi
for pid_file in "$state"/run/slurmd-*.pid; do
  [ -e "$pid_file" ] && stop "$pid_file" slurmd
done
stop "$state/run/slurmctld.pid" slurmctld
stop "$state/run/munged.pid" munged
exit 0
