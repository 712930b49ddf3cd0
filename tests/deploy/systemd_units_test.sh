#!/usr/bin/env bash
# Lints the systemd units in deploy/systemd and checks deploy/install.sh.
# Usage: systemd_units_test.sh BUILD_DIR   (exits 77, "skipped", without
# systemd-analyze; BUILD_DIR is used for the dry run when it holds the
# binaries).
#
# systemd is not PID 1 here, so the units cannot run; `systemd-analyze
# verify` still parses them, and `systemd-analyze security --offline=yes`
# scores their sandbox. verify only *warns* (exit 0) on an unknown key or a
# bad value, so any output at all counts as a failure. verify also requires
# ExecStart= to name an existing executable: rather than depend on a build,
# the test installs stand-in binaries (tiny shell scripts) with install.sh
# into a staging root and lints the installed units with their /opt/vigil
# paths pointed into that root. That checks the units as shipped, the
# prefix rewrite done by install.sh, and works on a tree that was never built.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-}
units=(vigil-server vigil-server-cluster vigil-agent vigil-actuator)
binaries=(server/vigil-server agent/vigil-agent actuator/vigil-actuator
          ctl/vigilctl server/vigil-replay)
# Highest acceptable `systemd-analyze security` exposure (0 best, 10 worst).
# The agent needs the GPU device nodes and sysfs, so it gets a little more.
declare -A max_exposure=([vigil-server]=2.0 [vigil-server-cluster]=2.0 [vigil-actuator]=2.0 [vigil-agent]=2.5)

command -v systemd-analyze >/dev/null || { echo "SKIP: no systemd-analyze"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); }

# Runs `systemd-analyze verify` on unit file $1; fails on a non-zero exit or
# any output.
lint() {
  local unit=$1 out rc
  check
  out=$(cd "$(dirname "$unit")" && systemd-analyze verify "./$(basename "$unit")" 2>&1)
  rc=$?
  if ((rc != 0)) || [[ -n $out ]]; then
    fail "systemd-analyze verify $(basename "$unit") (rc $rc): $out"
  fi
}

# --- Stand-in build and staged install -----------------------------------
fake_build=$tmp/build
for binary in "${binaries[@]}"; do
  mkdir -p "$fake_build/$(dirname "$binary")"
  printf '#!/bin/sh\nexit 0\n' >"$fake_build/$binary"
  chmod 0755 "$fake_build/$binary"
done
root=$tmp/root
prefix=/opt/vigil
check
if ! install_log=$("$src/deploy/install.sh" --root "$root" --build "$fake_build" \
    --prefix "$prefix" --unit-dir /lib/systemd/system 2>&1); then
  fail "staged install: $install_log"
fi

# --- Layout ----------------------------------------------------------------
# Prints the octal mode of $1.
mode() { stat -c %a "$1" 2>/dev/null; }
# Checks that path $1 (under the staging root) exists with mode $2.
expect_file() {
  check
  local path=$root$1
  if [[ ! -f $path ]]; then fail "missing $1"; return; fi
  [[ $(mode "$path") == "$2" ]] || fail "$1 has mode $(mode "$path"), want $2"
}
for binary in "${binaries[@]}"; do expect_file "$prefix/bin/$(basename "$binary")" 755; done
for unit in "${units[@]}"; do expect_file "/lib/systemd/system/$unit.service" 644; done
expect_file "$prefix/share/vigil/web/index.html" 644
expect_file "$prefix/share/doc/vigil/systemd.md" 644
for config in server.json agent.env actuator.env actuator.secret; do
  expect_file "/etc/vigil/$config" 640
done
# Read by the agent's DynamicUser: world-readable, and free of secrets.
expect_file /etc/vigil/agent.json 644
check
grep -Eqx '[0-9a-f]{64}' "$root/etc/vigil/actuator.secret" ||
  fail "actuator.secret is not 32 random bytes in hex"
check
grep -q 'skipped: creating user vigil' <<<"$install_log" ||
  fail "a staged install must not create the vigil user: $install_log"
for unit in "${units[@]}"; do
  check
  grep -q "^ExecStart=$prefix/bin/${unit%-cluster} " "$root/lib/systemd/system/$unit.service" ||
    fail "$unit.service: ExecStart does not use the prefix $prefix"
  check
  if grep -q '/usr/local/' "$root/lib/systemd/system/$unit.service"; then
    fail "$unit.service: /usr/local left after --prefix $prefix"
  fi
done

# Re-install: an operator's configs and secret are kept.
echo '{"edited": true}' >"$root/etc/vigil/server.json"
secret_before=$(cat "$root/etc/vigil/actuator.secret")
check
reinstall_log=$("$src/deploy/install.sh" --root "$root" --build "$fake_build" \
  --prefix "$prefix" --unit-dir /lib/systemd/system 2>&1) || fail "re-install: $reinstall_log"
check
[[ $(cat "$root/etc/vigil/server.json") == '{"edited": true}' ]] ||
  fail "re-install overwrote /etc/vigil/server.json"
check
[[ $(cat "$root/etc/vigil/actuator.secret") == "$secret_before" ]] ||
  fail "re-install replaced actuator.secret"
check
grep -q "kept: $root/etc/vigil/server.json exists" <<<"$reinstall_log" ||
  fail "re-install does not say it kept server.json: $reinstall_log"

# --- Dry run and bad input ---------------------------------------------------
dry_build=$fake_build
have_build=true
for binary in "${binaries[@]}"; do [[ -x $build/$binary ]] || have_build=false; done
if $have_build; then dry_build=$build; else
  echo "note: '$build' lacks the binaries; the dry run uses stand-ins"
fi
check
dry_log=$("$src/deploy/install.sh" --root "$tmp/dry" --build "$dry_build" --dry-run 2>&1) ||
  fail "dry run: $dry_log"
check
[[ ! -e $tmp/dry ]] || fail "the dry run created $tmp/dry"
for unit in "${units[@]}"; do
  check
  grep -q "^would: .*> $tmp/dry/etc/systemd/system/$unit.service" <<<"$dry_log" ||
    fail "dry run does not mention $unit.service: $dry_log"
done
check
"$src/deploy/install.sh" --bogus >/dev/null 2>&1
[[ $? == 2 ]] || fail "install.sh --bogus: want exit status 2"
check
"$src/deploy/install.sh" --prefix relative/path --root "$tmp/bad" --build "$fake_build" \
  >/dev/null 2>&1
[[ $? == 2 ]] || fail "install.sh --prefix relative/path: want exit status 2"
check
out=$("$src/deploy/install.sh" --root "$tmp/bad" --build "$tmp/nowhere" 2>&1)
[[ $? == 1 && $out == *"not built"* ]] || fail "install.sh with no binaries: want exit 1 and 'not built': $out"

# --- Lint the installed units --------------------------------------------------
lintdir=$tmp/lint
mkdir -p "$lintdir"
for unit in "${units[@]}"; do
  sed "s#$prefix/#$root$prefix/#g" "$root/lib/systemd/system/$unit.service" \
    >"$lintdir/$unit.service"
  lint "$lintdir/$unit.service"
done

# The lint must notice an unknown key (verify only warns on one).
mkdir -p "$tmp/bad-unit"
sed 's/^\[Service\]$/[Service]\nNoSuchHardening=yes/' "$lintdir/vigil-server.service" \
  >"$tmp/bad-unit/vigil-server.service"
check
out=$(cd "$tmp/bad-unit" && systemd-analyze verify ./vigil-server.service 2>&1)
[[ $out == *NoSuchHardening* ]] || fail "verify did not report an unknown key: '$out'"

# --- Hardening that every unit must keep -----------------------------------------
common_settings=(
  Type=simple Restart=on-failure NoNewPrivileges=yes ProtectSystem=strict
  ProtectHome=yes PrivateTmp=yes ProtectKernelTunables=yes
  ProtectKernelModules=yes ProtectControlGroups=yes RestrictSUIDSGID=yes
  LockPersonality=yes MemoryDenyWriteExecute=yes RestrictRealtime=yes
  RestrictNamespaces=yes SystemCallArchitectures=native
  SystemCallFilter=@system-service CapabilityBoundingSet= StandardOutput=journal
  StandardError=journal)
declare -A unit_settings=(
  [vigil-server]="User=vigil StateDirectory=vigil PrivateDevices=yes"
  [vigil-server-cluster]="User=vigil StateDirectory=vigil PrivateDevices=yes EnvironmentFile=/etc/vigil/server.env"
  [vigil-actuator]="User=vigil StateDirectory=vigil-actuator PrivateDevices=yes"
  [vigil-agent]="DynamicUser=yes StateDirectory=vigil-agent PrivateDevices=no DevicePolicy=closed CPUQuota=5% MemoryMax=64M EnvironmentFile=-/etc/vigil/agent.env RuntimeDirectory=vigil")
for unit in "${units[@]}"; do
  file=$src/deploy/systemd/$unit.service
  read -ra wanted <<<"${unit_settings[$unit]}"
  for setting in "${common_settings[@]}" "${wanted[@]}"; do
    check
    grep -qxF "$setting" "$file" || fail "$unit.service lacks '$setting'"
  done
  for key in RestartSec LimitNOFILE; do
    check
    grep -q "^$key=." "$file" || fail "$unit.service lacks $key="
  done
done

# --- Exposure score ----------------------------------------------------------------
if systemd-analyze security --help 2>&1 | grep -q -- --offline; then
  for unit in "${units[@]}"; do
    check
    out=$(cd "$lintdir" && systemd-analyze security --offline=yes "./$unit.service" 2>&1)
    score=$(sed -n 's/.*Overall exposure level for .*: \([0-9.]*\) .*/\1/p' <<<"$out")
    if [[ -z $score ]]; then
      fail "no exposure score for $unit: $out"
      continue
    fi
    echo "exposure $unit: $score (max ${max_exposure[$unit]})"
    awk -v s="$score" -v m="${max_exposure[$unit]}" 'BEGIN { exit !(s <= m) }' ||
      fail "$unit exposure $score > ${max_exposure[$unit]}"
  done
else
  echo "note: systemd-analyze security has no --offline (systemd < 250); scores not checked"
fi

if ((failures)); then
  echo "$failures of $checks checks failed"
  exit 1
fi
echo "all $checks checks passed"
