#!/usr/bin/env bash
# Keeps the dependency direction of docs/ARCHITECTURE.md honest.
set -u
root=${1:-.}
cd "$root" || exit 2
fail=0
check() {  # description, grep output
  if [ -n "$2" ]; then echo "layering: $1:"; echo "$2"; fail=1; fi
}
check "RocksDB outside storage/rocksdb_*" "$(grep -rlE '#include [<"]rocksdb/' --include='*.h' --include='*.cc' common detector rules storage server agent proto 2>/dev/null | grep -vE '^storage/rocksdb_')"
check "gRPC outside server/, agent/, proto/" "$(grep -rlE '#include [<"](grpcpp|grpc\+\+|grpc/)' --include='*.h' --include='*.cc' common detector rules storage 2>/dev/null)"
check "httplib outside server/, actuator/, ctl/" "$(grep -rlE '#include [<"]httplib' --include='*.h' --include='*.cc' common detector rules escalation notify storage agent 2>/dev/null)"
check "I/O or protobuf in detector/, rules/, escalation/ or promcompat/" "$(grep -rlE '#include [<"](fstream|iostream|cstdio|thread|vigil/v1/|google/protobuf|storage/|server/|notify/|curl/|httplib)' detector rules escalation promcompat 2>/dev/null)"
check "clock read outside common/" "$(grep -rnE 'system_clock::now|steady_clock::now|absl::Now\(\)|time\(nullptr\)' --include='*.h' --include='*.cc' detector rules escalation notify storage server agent actuator ctl promcompat 2>/dev/null)"
# The agent reaches the simulator (agent/sim/) only through its collector
# adapter, and the simulator knows nothing of the agent around it.
check "agent/sim/ included by agent/ files other than simulator_collector.*" "$(grep -rlE '#include "agent/sim/' --include='*.h' --include='*.cc' agent 2>/dev/null | grep -vE '^agent/(sim/|simulator_collector\.(h|cc)$)')"
check "agent/sim/ includes agent/ headers outside agent/sim/" "$(grep -rnE '#include "agent/' --include='*.h' --include='*.cc' agent/sim 2>/dev/null | grep -v '#include "agent/sim/')"
# The server's parts (server/<part>/) never include the wiring (server/server.h).
check "server/server.h included by a server library" "$(grep -rlE '#include "server/server\.h"' --include='*.h' --include='*.cc' server/*/ 2>/dev/null)"
# The server's parts and which others each may include (docs/ARCHITECTURE.md,
# "Dependency direction"); frame_observer is server/frame_observer.h.
while read -r part allowed; do
  check "server/$part/ includes a server part it may not use" "$(grep -rnoE '#include "server/[a-z_]+(/|\.h)' --include='*.h' --include='*.cc' "server/$part" 2>/dev/null | grep -vE "#include \"server/($part|$allowed)(/|\.h)")"
done <<'PARTS'
watchdog     -
alertmanager -
remote_write frame_observer
cluster      -
config       watchdog|remote_write|cluster|alertmanager
ingest       config|cluster|frame_observer
fleet        config|frame_observer
detection    fleet|frame_observer
health       -
delivery     -
escalation   config|cluster|delivery|detection|fleet
api          config|cluster|ingest|detection|fleet|escalation|alertmanager
replay       -
PARTS
# Every server source file lives in a part's folder, except the wiring and
# the seam between ingest and the frame watchers.
check "server/ top level holds more than the wiring" "$(ls server/*.h server/*.cc 2>/dev/null | grep -vE '^server/(server\.(h|cc)|main\.cc|frame_observer\.h)$')"
if [ $fail -eq 0 ]; then echo "layering: ok"; fi
exit $fail
