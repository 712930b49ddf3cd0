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
check "I/O or protobuf in detector/, rules/ or escalation/" "$(grep -rlE '#include [<"](fstream|iostream|cstdio|thread|vigil/v1/|google/protobuf|storage/|server/|notify/|curl/|httplib)' detector rules escalation 2>/dev/null)"
check "clock read outside common/" "$(grep -rnE 'system_clock::now|steady_clock::now|absl::Now\(\)|time\(nullptr\)' --include='*.h' --include='*.cc' detector rules escalation notify storage server agent actuator ctl 2>/dev/null)"
if [ $fail -eq 0 ]; then echo "layering: ok"; fi
exit $fail
