#!/usr/bin/env bash
# Installs built Vigil binaries, the web UI, the systemd units and example
# configs into an operator's layout:
#
#   PREFIX/bin/{vigil-server,vigil-agent,vigil-actuator,vigilctl,vigil-replay}
#   PREFIX/share/vigil/web/            the web UI
#   PREFIX/share/doc/vigil/systemd.md  deploy/systemd/README.md
#   UNIT_DIR/vigil-{server,agent,actuator}.service  (ExecStart under PREFIX)
#   /etc/vigil/{server.json,agent.json,agent.env,actuator.env,actuator.secret}
#                                      only where missing: never overwritten
#
# and creates the `vigil` system user when it is missing.
#
# Usage: deploy/install.sh [--prefix /usr/local] [--build BUILD_DIR]
#          [--unit-dir /etc/systemd/system] [--root DIR] [--dry-run]
#   --build    where the binaries were built (default: <repo>/build)
#   --root     install under DIR instead of / (a staging root for packaging
#              and tests); paths written into the units stay relative to /,
#              no user is created and nothing is chgrp'ed to vigil
#   --dry-run  print what would be done, change nothing
# Exits 2 on a bad flag, 1 when a binary is missing or a step fails.
# Afterwards: systemctl daemon-reload && systemctl enable --now vigil-server
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
build=$src/build
unit_dir=/etc/systemd/system
root=
dry_run=false
config_dir=/etc/vigil
binaries=(server/vigil-server agent/vigil-agent actuator/vigil-actuator
          ctl/vigilctl server/vigil-replay)
units=(vigil-server vigil-server-cluster vigil-agent vigil-actuator)

# Prints the usage (stdout with status 0 for --help, else stderr and 2).
usage() {
  if (($1 != 0)); then exec >&2; fi
  sed -n '/^# Usage:/,/^# Exits/s/^# \{0,1\}//p' "$0"
  exit "$1"
}

while (($#)); do
  case $1 in
    --prefix|--build|--unit-dir|--root)
      (($# >= 2)) || { echo "install.sh: $1 needs a value" >&2; usage 2; }
      case $1 in
        --prefix) prefix=$2 ;;
        --build) build=$2 ;;
        --unit-dir) unit_dir=$2 ;;
        --root) root=$2 ;;
      esac
      shift 2 ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) usage 0 ;;
    *) echo "install.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
prefix=${prefix%/}
unit_dir=${unit_dir%/}
for dir in "$prefix" "$unit_dir"; do
  [[ $dir == /* ]] || { echo "install.sh: '$dir' must be an absolute path" >&2; exit 2; }
done
[[ -z $root ]] || root=$(realpath -m "$root")

missing=()
for binary in "${binaries[@]}"; do
  [[ -x $build/$binary ]] || missing+=("$build/$binary")
done
if ((${#missing[@]})); then
  echo "install.sh: not built (run deploy/build.sh $build): ${missing[*]}" >&2
  exit 1
fi

# Prints a step ("would: ..." in a dry run), then runs it unless dry.
step() {
  if $dry_run; then echo "would: $*"; else echo "$*"; "$@"; fi
}
# Same for a step whose output goes to file $1.
step_to() {
  local file=$1
  shift
  if $dry_run; then echo "would: $* > $file"; else echo "$* > $file"; "$@" >"$file"; fi
}
# 32 random bytes as hex on stdout.
random_hex() {
  od -An -N32 -tx1 /dev/urandom | tr -d ' \n'
}

step install -d -m 0755 "$root$prefix/bin" "$root$prefix/share/vigil" \
  "$root$prefix/share/doc/vigil" "$root$unit_dir"
for binary in "${binaries[@]}"; do
  step install -m 0755 "$build/$binary" "$root$prefix/bin/"
done
step rm -rf "$root$prefix/share/vigil/web"
step cp -R "$src/web" "$root$prefix/share/vigil/web"
step install -m 0644 "$src/deploy/systemd/README.md" "$root$prefix/share/doc/vigil/systemd.md"
for unit in "${units[@]}"; do
  # The units name /usr/local; point them at this prefix.
  step_to "$root$unit_dir/$unit.service" \
    sed "s#/usr/local/#$prefix/#g" "$src/deploy/systemd/$unit.service"
  $dry_run || chmod 0644 "$root$unit_dir/$unit.service"
done

# The service user. A staging root gets none: the package's own scripts (or
# systemd-sysusers) create it on the target.
have_user=false
if [[ -n $root ]]; then
  echo "skipped: creating user vigil (staging root; on the target run" \
       "useradd --system --user-group --home-dir /var/lib/vigil --no-create-home" \
       "--shell /usr/sbin/nologin vigil)"
elif getent passwd vigil >/dev/null; then
  echo "kept: user vigil exists"
  have_user=true
else
  step useradd --system --user-group --home-dir /var/lib/vigil --no-create-home \
    --shell /usr/sbin/nologin --comment "Vigil GPU cluster monitor" vigil
  have_user=true
fi

# Example configs: an operator's edits are never overwritten. agent.json
# is read by the agent's DynamicUser, a uid in no group of ours, so it is
# world-readable (0644, as the Debian package ships it); it holds no
# secret: the agent's key, certificates and token come as systemd
# credentials. The others are root's and vigil's.
step install -d -m 0755 "$root$config_dir"
for example in server.json agent.json agent.env actuator.env; do
  target=$root$config_dir/$example
  if [[ -e $target ]]; then
    echo "kept: $target exists"
  elif [[ $example == agent.json ]]; then
    step install -m 0644 "$src/deploy/systemd/$example" "$target"
  else
    step install -m 0640 "$src/deploy/systemd/$example" "$target"
    if $have_user; then step chgrp vigil "$target"; fi
  fi
done
# The HMAC secret shared by server and actuator: readable by root and vigil.
secret=$root$config_dir/actuator.secret
if [[ -e $secret ]]; then
  echo "kept: $secret exists"
else
  step install -m 0640 /dev/null "$secret"
  step_to "$secret" random_hex
  if $have_user; then step chgrp vigil "$secret"; fi
fi

if $dry_run; then
  echo "dry run: nothing was changed"
elif [[ -z $root ]]; then
  echo "next: edit $config_dir/*, then systemctl daemon-reload &&" \
       "systemctl enable --now vigil-server (vigil-agent on GPU nodes," \
       "vigil-actuator next to the scheduler)"
fi
