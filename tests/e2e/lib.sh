# Helpers the end-to-end scripts of this folder share:
#   source "$(dirname "$0")/lib.sh"
# (after `set -euo pipefail`; each script keeps its own log/fail/cleanup,
# which know what it started).

# A TCP port free on 127.0.0.1 now (the script binds it soon after).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_for SECONDS COMMAND...: runs COMMAND (output discarded) every 0.25 s
# until it succeeds; returns 1 if it has not within SECONDS.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.25
  done
}
