#!/usr/bin/env bash
# Builds the Debian package from a build dir and checks it without touching
# this machine: its control data, every file it ships with its mode, the
# binaries run from the extracted tree, `systemd-analyze verify` on its
# units, and a real dpkg install, reinstall, remove and purge into a
# throwaway root.
# Usage: deb_package_test.sh BUILD_DIR [PACKAGE.deb]
#   BUILD_DIR    a configured and built build dir: `cpack -G DEB` runs there
#                (output in a temp dir); web/vendor must be filled
#                (scripts/vendor-web.sh, done by deploy/build.sh)
#   PACKAGE.deb  check this package instead of building one
# Exits 77 ("skipped") without dpkg-deb.
#
# The install: `dpkg --root=DIR --force-script-chrootless` unpacks into DIR
# and runs the maintainer scripts outside it with DPKG_ROOT=DIR, which
# deploy/debian/postinst honours (useradd --prefix, paths under DIR, no
# systemctl). A chrooted run would need a whole Debian in DIR. The host's
# passwd/group/shadow and /etc/systemd are checksummed before and after: the
# test fails if it changed them. Needs root (chown); as another user that
# part is skipped with a note.
#
# systemd-analyze verify: systemd is not PID 1 here, but verify still
# parses the units and checks that ExecStart= names an executable. With
# --root it resolves those paths, and the units' targets, inside the
# installed root, so the units are checked exactly as installed (no copy
# with rewritten paths, unlike systemd_units_test.sh); the host's *.target
# units are copied in beside them, as a real system has them. verify only
# warns on a bad key (exit 0), so any output counts as a failure.
set -uo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: deb_package_test.sh BUILD_DIR [PACKAGE.deb]}
deb=${2:-}

command -v dpkg-deb >/dev/null || { echo "SKIP: no dpkg-deb"; exit 77; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() { checks=$((checks + 1)); }

binaries=(vigil-server vigil-agent vigil-actuator vigilctl vigil-replay vigil-sim)
units=(vigil-server vigil-server-cluster vigil-agent vigil-actuator)
conffiles=(/etc/vigil/server.json /etc/vigil/agent.json /etc/vigil/agent.env /etc/vigil/actuator.env)
version=$(sed -n 's/^project(vigil VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
arch=$(dpkg --print-architecture)

# --- Build ---------------------------------------------------------------------
if [[ -z $deb ]]; then
  [[ -f $build/CPackConfig.cmake ]] || { echo "FAIL: no $build/CPackConfig.cmake (configure first)"; exit 1; }
  echo "cpack -G DEB in $build (output in a temp dir)"
  if ! cpack_log=$(cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/cpack" 2>&1); then
    echo "FAIL: cpack: $cpack_log"
    exit 1
  fi
  deb=$(ls "$tmp"/cpack/*.deb 2>/dev/null | head -n 1)
  [[ -n $deb ]] || { echo "FAIL: cpack made no .deb: $cpack_log"; exit 1; }
fi
[[ -f $deb ]] || { echo "FAIL: no package $deb"; exit 1; }
echo "package: $deb"

# --- Control data --------------------------------------------------------------------
field() { dpkg-deb -f "$deb" "$1"; }
check
[[ $(basename "$deb") == "vigil_${version}-1_${arch}.deb" ]] ||
  fail "file name $(basename "$deb"), want vigil_${version}-1_${arch}.deb"
check; [[ $(field Package) == vigil ]] || fail "Package: $(field Package)"
check; [[ $(field Version) == "$version-1" ]] || fail "Version: $(field Version), want $version-1 (project version)"
check; [[ $(field Architecture) == "$arch" ]] || fail "Architecture: $(field Architecture), want $arch"
for key in Maintainer Description Section Priority Homepage Installed-Size; do
  check
  [[ -n $(field "$key") ]] || fail "no $key field"
done
depends=$(field Depends)
echo "Depends: $depends"
# dpkg-shlibdeps names the packages of the libraries the binaries link.
for lib in libc6 'libstdc\+\+6' 'libgrpc\+\+1' libgrpc[0-9] libprotobuf[0-9] librocksdb libabsl \
    libcurl4 libssl3 libsnappy libzstd adduser; do
  check
  grep -Eq "(^|, )$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done

control=$tmp/control
dpkg-deb -e "$deb" "$control"
check
diff <(printf '%s\n' "${conffiles[@]}") "$control/conffiles" >/dev/null ||
  fail "conffiles: $(cat "$control/conffiles" 2>&1), want ${conffiles[*]}"
for script in postinst prerm postrm; do
  check
  if [[ ! -f $control/$script ]]; then fail "no $script"; continue; fi
  [[ $(stat -c %a "$control/$script") == 755 ]] || fail "$script mode $(stat -c %a "$control/$script")"
  sh -n "$control/$script" || fail "$script: sh -n"
done

# --- Files and modes -----------------------------------------------------------------
listing=$(dpkg-deb -c "$deb")
check
others=$(awk '$2 != "root/root"' <<<"$listing")
[[ -z $others ]] || fail "not owned by root/root: $others"
# Nothing outside the layout.
check
stray=$(awk '{ print $6 }' <<<"$listing" | grep -Ev '^\./(|etc/|etc/vigil/.*|lib/|lib/systemd/|lib/systemd/system/.*|usr/|usr/bin/.*|usr/share/|usr/share/vigil/.*|usr/share/doc/|usr/share/doc/vigil/.*|usr/share/bash-completion/|usr/share/bash-completion/completions/|usr/share/bash-completion/completions/vigilctl)$')
[[ -z $stray ]] || fail "outside the layout: $stray"

x=$tmp/extracted
dpkg-deb -x "$deb" "$x"
# Checks that $1 exists in the extracted tree as a regular file of mode $2.
expect_file() {
  check
  local path=$x$1
  if [[ ! -f $path || -L $path ]]; then fail "missing $1"; return; fi
  [[ $(stat -c %a "$path") == "$2" ]] || fail "$1 has mode $(stat -c %a "$path"), want $2"
}
for binary in "${binaries[@]}"; do expect_file "/usr/bin/$binary" 755; done
for unit in "${units[@]}"; do expect_file "/lib/systemd/system/$unit.service" 644; done
expect_file /etc/vigil/server.json 640
expect_file /etc/vigil/agent.json 644
expect_file /etc/vigil/agent.env 640
expect_file /etc/vigil/actuator.env 640
# The web UI: every file of web/ (vendor included), 0644.
check
[[ -f $src/web/vendor/uPlot.iife.min.js ]] || fail "web/vendor is empty in the tree: run scripts/vendor-web.sh"
while IFS= read -r file; do
  expect_file "/usr/share/vigil/web/$file" 644
done < <(cd "$src/web" && find . -type f ! -name '.*' ! -name '*~' -printf '%P\n' | sort)
expect_file /usr/share/vigil/web/vendor/uPlot.iife.min.js 644
expect_file /usr/share/vigil/web/vendor/uPlot.min.css 644
expect_file /usr/share/doc/vigil/README.md 644
expect_file /usr/share/doc/vigil/systemd.md 644
for doc in "$src"/docs/*.md; do expect_file "/usr/share/doc/vigil/$(basename "$doc")" 644; done
for example in vigil-escalation.json lab-100-gpus.json cluster-10000-gpus.json server.json \
    server.env vigil-server-cluster.json agent.json agent.env actuator.env nginx-vigil.conf; do
  expect_file "/usr/share/doc/vigil/examples/$example" 644
done
expect_file /usr/share/bash-completion/completions/vigilctl 644
check
cmp -s "$x/usr/share/bash-completion/completions/vigilctl" "$src/deploy/completion/vigilctl.bash" ||
  fail "the completion differs from deploy/completion/vigilctl.bash"
for config in server.json agent.json agent.env actuator.env; do
  check
  cmp -s "$x/etc/vigil/$config" "$src/deploy/systemd/$config" ||
    fail "/etc/vigil/$config differs from deploy/systemd/$config"
done
# Stripped: no DWARF in the package (the build dir keeps it).
if command -v readelf >/dev/null; then
  for binary in "${binaries[@]}"; do
    check
    if readelf -S "$x/usr/bin/$binary" 2>/dev/null | grep -q '\.debug_info'; then
      fail "/usr/bin/$binary is not stripped"
    fi
  done
fi

# --- Units name the package's paths -------------------------------------------------------
for unit in "${units[@]}"; do
  file=$x/lib/systemd/system/$unit.service
  [[ -f $file ]] || continue
  check
  grep -q "^ExecStart=/usr/bin/${unit%-cluster} " "$file" || fail "$unit.service: ExecStart is not /usr/bin/${unit%-cluster}"
  check
  ! grep -q '/usr/local/' "$file" || fail "$unit.service still names /usr/local: $(grep /usr/local/ "$file")"
  check
  doc=$(sed -n 's#^Documentation=file://##p' "$file")
  [[ -n $doc && -f $x$doc ]] || fail "$unit.service: Documentation=$doc is not in the package"
  # Everything but the paths is as in deploy/systemd.
  check
  diff <(sed 's#/usr/local/#/usr/#g' "$src/deploy/systemd/$unit.service") "$file" >/dev/null ||
    fail "$unit.service differs from deploy/systemd/$unit.service beyond /usr/local -> /usr"
done
check
grep -q -- '--web-dir /usr/share/vigil/web' "$x/lib/systemd/system/vigil-server.service" ||
  fail "vigil-server.service does not serve /usr/share/vigil/web"

# --- The binaries run from the extracted tree, on the system's libraries ----------------
for binary in "${binaries[@]}"; do
  check
  out=$(env -u LD_LIBRARY_PATH "$x/usr/bin/$binary" --version 2>&1)
  [[ $out == "$binary $version" ]] || fail "$binary --version: '$out', want '$binary $version'"
done

# --- systemd-analyze verify on installed units --------------------------------------------
# Verifies the four units inside root $1 (see the header); prints nothing.
verify_units() {
  local vroot=$1 unit out rc target
  for target in /lib/systemd/system/*.target; do
    [[ -e $vroot/lib/systemd/system/$(basename "$target") ]] || cp -P "$target" "$vroot/lib/systemd/system/"
  done
  for unit in "${units[@]}"; do
    check
    out=$(systemd-analyze verify --root="$vroot" "/lib/systemd/system/$unit.service" 2>&1)
    rc=$?
    if ((rc != 0)) || [[ -n $out ]]; then
      fail "systemd-analyze verify --root $unit.service (rc $rc): $out"
    fi
  done
  # The check must see through the root: without the binary there, it fails.
  check
  mv "$vroot/usr/bin/vigil-agent" "$tmp/vigil-agent.aside"
  out=$(systemd-analyze verify --root="$vroot" /lib/systemd/system/vigil-agent.service 2>&1)
  [[ $out == *vigil-agent* ]] || fail "verify --root did not notice /usr/bin/vigil-agent missing: '$out'"
  mv "$tmp/vigil-agent.aside" "$vroot/usr/bin/vigil-agent"
}
have_verify=false
if command -v systemd-analyze >/dev/null && systemd-analyze --help 2>&1 | grep -q -- '--root'; then
  have_verify=true
else
  echo "note: no systemd-analyze with --root: units not verified (install systemd)"
fi

# --- dpkg install into a throwaway root -------------------------------------------------------
host_state() {
  md5sum /etc/passwd /etc/group /etc/shadow /etc/gshadow 2>/dev/null
  find /etc/systemd/system -printf '%p %l\n' 2>/dev/null | sort
}
if (($(id -u) != 0)); then
  echo "note: not root: the dpkg install into a throwaway root is skipped; units verified in the extracted tree"
  $have_verify && verify_units "$x"
else
  host_before=$(host_state)
  root=$tmp/root
  mkdir -p "$root"/var/lib/dpkg/{info,updates,triggers} "$root/etc"
  touch "$root"/var/lib/dpkg/{status,available}
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf 'root:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
  printf 'root:*::\n' >"$root/etc/gshadow"
  chmod 0640 "$root/etc/shadow" "$root/etc/gshadow"
  dpkg_root() {
    dpkg --root="$root" --force-not-root --force-depends --force-script-chrootless "$@" </dev/null 2>&1
  }
  status() { dpkg-query --root="$root" -W -f='${Status}' vigil 2>/dev/null; }
  # Prints owner uid:gid and mode of $1 in the root.
  owner_mode() { stat -c '%u:%g %a' "$root$1" 2>/dev/null; }

  check
  log=$(dpkg_root -i "$deb") || fail "dpkg --root -i: $log"
  check; [[ $(status) == "install ok installed" ]] || fail "after install, status '$(status)'"
  check
  installed_conffiles=$(dpkg-query --root="$root" -W -f='${Conffiles}\n' vigil | awk 'NF { print $1 }')
  [[ $installed_conffiles == "$(printf '%s\n' "${conffiles[@]}")" ]] ||
    fail "dpkg lists conffiles '$installed_conffiles'"
  check
  grep -q 'no service was enabled or started' <<<"$log" || fail "postinst did not say nothing was started: $log"
  user=$(grep '^vigil:' "$root/etc/passwd")
  IFS=: read -r _ _ uid gid _ home shell <<<"$user"
  check
  [[ -n $user && $uid -lt 1000 && $home == /var/lib/vigil && $shell == /usr/sbin/nologin ]] ||
    fail "vigil user: '$user' (want a system user, home /var/lib/vigil, shell nologin)"
  check
  [[ $(awk -F: '$1 == "vigil" { print $3 }' "$root/etc/group") == "$gid" ]] ||
    fail "no group vigil with gid $gid: $(cat "$root/etc/group")"
  check; [[ $(owner_mode /var/lib/vigil) == "$uid:$gid 750" ]] || fail "/var/lib/vigil: $(owner_mode /var/lib/vigil)"
  check; [[ $(owner_mode /var/lib/vigil-actuator) == "$uid:$gid 750" ]] || fail "/var/lib/vigil-actuator: $(owner_mode /var/lib/vigil-actuator)"
  check; [[ $(owner_mode /var/lib/vigil-agent) == "0:0 750" ]] || fail "/var/lib/vigil-agent: $(owner_mode /var/lib/vigil-agent)"
  for config in server.json agent.env actuator.env actuator.secret; do
    check
    [[ $(owner_mode "/etc/vigil/$config") == "0:$gid 640" ]] ||
      fail "/etc/vigil/$config: $(owner_mode "/etc/vigil/$config"), want 0:$gid 640"
  done
  check; [[ $(owner_mode /etc/vigil/agent.json) == "0:0 644" ]] || fail "/etc/vigil/agent.json: $(owner_mode /etc/vigil/agent.json)"
  check
  grep -Eqx '[0-9a-f]{64}' "$root/etc/vigil/actuator.secret" || fail "actuator.secret is not 32 bytes in hex"
  # No unit enabled (nothing under /etc/systemd in the root).
  check
  [[ ! -e $root/etc/systemd/system ]] || fail "a unit was enabled: $(find "$root/etc/systemd")"
  $have_verify && verify_units "$root"

  # Reinstall: local edits, the secret, the user and a statoverride are kept.
  echo '{"edited": true}' >"$root/etc/vigil/server.json"
  secret=$(cat "$root/etc/vigil/actuator.secret")
  dpkg-statoverride --root "$root" --add root root 0600 /etc/vigil/agent.env
  chown root:root "$root/etc/vigil/agent.env"; chmod 0600 "$root/etc/vigil/agent.env"
  check
  log=$(dpkg_root -i "$deb") || fail "reinstall: $log"
  check; [[ $(cat "$root/etc/vigil/server.json") == '{"edited": true}' ]] || fail "reinstall overwrote an edited conffile"
  check; [[ $(cat "$root/etc/vigil/actuator.secret") == "$secret" ]] || fail "reinstall replaced actuator.secret"
  check; [[ $(grep -c '^vigil:' "$root/etc/passwd") == 1 ]] || fail "reinstall added the user again"
  check; [[ $(owner_mode /etc/vigil/agent.env) == "0:0 600" ]] || fail "postinst ignored a dpkg-statoverride: $(owner_mode /etc/vigil/agent.env)"

  # Remove: programs and units go; configs, data and the user stay.
  check
  log=$(dpkg_root -r vigil) || fail "dpkg -r: $log"
  check; [[ $(status) == "deinstall ok config-files" ]] || fail "after remove, status '$(status)'"
  check; [[ ! -e $root/usr/bin/vigil-server && ! -e $root/lib/systemd/system/vigil-server.service ]] ||
    fail "remove left the binaries or units"
  check; [[ -f $root/etc/vigil/server.json && -f $root/etc/vigil/actuator.secret ]] || fail "remove deleted configs"
  # Purge: /etc/vigil goes; data and the user stay (postrm says why).
  check
  log=$(dpkg_root -P vigil) || fail "dpkg -P: $log"
  check; [[ -z $(status) ]] || fail "after purge, status '$(status)'"
  check; [[ ! -e $root/etc/vigil ]] || fail "purge left /etc/vigil: $(ls -A "$root/etc/vigil")"
  check; [[ -d $root/var/lib/vigil ]] && grep -q '^vigil:' "$root/etc/passwd" || fail "purge removed data or the user"

  check
  [[ $(host_state) == "$host_before" ]] || fail "the host's users, groups or /etc/systemd changed"
fi

if ((failures)); then
  echo "$failures of $checks checks failed"
  exit 1
fi
echo "all $checks checks passed"
