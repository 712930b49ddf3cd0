#!/usr/bin/env bash
# `pip install ./python` works offline and gives a usable package: installs
# the client into a fresh venv (--system-site-packages, so setuptools and
# torch are Debian's) with no index and no pip configuration, then, from a
# directory outside the repository, checks that `import vigil` finds the
# installed copy and its version, and runs the client's unit tests
# (python/tests) against it.
#
# Usage: tests/python/pip_install_test.sh
# Needs Debian's python3-venv, python3-pip and python3-setuptools
# (deploy/install-deps.sh). setuptools builds in the tree: python/build/
# and python/*.egg-info/ are left there, ignored by python/.gitignore.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d /tmp/vigil-pip-install.XXXXXX)
venv=$work/venv

fail() { echo "pip-install-test: FAIL: $*" >&2; exit 1; }
log() { echo "pip-install-test: $*"; }
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited with status $?"' ERR

# Only what this script asks for: no index, find-links or config of the
# machine or the user, no user site-packages, nothing from PYTHONPATH.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(PIP_|PYTHON)' || true)
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1

for m in venv pip setuptools; do
  "$py" -c "import $m" 2>/dev/null ||
    fail "$py cannot import $m (apt-get install python3-venv python3-pip python3-setuptools)"
done
expected=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$src/python/vigil/__init__.py")
[ -n "$expected" ] || fail "no __version__ = \"...\" line in python/vigil/__init__.py"

log "creating venv $venv"
"$py" -m venv --system-site-packages "$venv" || fail "python3 -m venv failed"
log "pip install --no-build-isolation --no-index $src/python"
"$venv/bin/python" -m pip install --no-build-isolation --no-index "$src/python" \
  > "$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; fail "pip install failed (log above)"; }

# Outside the repository, so the source tree is not on sys.path.
mkdir "$work/run"
cd "$work/run"
"$venv/bin/python" - "$venv" "$expected" <<'EOF' || fail "the installed package is not the one expected (above)"
import importlib.metadata, os, sys, sysconfig
venv, expected = sys.argv[1], sys.argv[2]
import vigil
site = os.path.realpath(sysconfig.get_path("purelib"))
where = os.path.realpath(vigil.__file__)
errors = []
if not site.startswith(os.path.realpath(venv) + os.sep):
    errors.append(f"site-packages {site} is not inside the venv {venv}")
if os.path.commonpath([where, site]) != site:
    errors.append(f"vigil imported from {where}, not from {site}")
if vigil.__version__ != expected:
    errors.append(f"vigil.__version__ {vigil.__version__!r}, source says {expected!r}")
dist = importlib.metadata.version("vigil-client")
if dist != expected:
    errors.append(f"installed vigil-client is {dist!r}, source says {expected!r}")
import vigil.client
try:
    import torch  # optional (the "torch" extra); Debian's python3-torch here
except ImportError:
    torch = None
mods = [vigil.client] + ([__import__("vigil.torch").torch] if torch else [])
for m in mods:
    if os.path.commonpath([os.path.realpath(m.__file__), site]) != site:
        errors.append(f"{m.__name__} imported from {m.__file__}, not from {site}")
for e in errors:
    print("pip-install-test:", e, file=sys.stderr)
sys.exit(1 if errors else 0)
EOF
log "vigil $expected imported from the venv's site-packages"

# The unit tests, copied out of the tree (test_torch imports test_client as
# a top-level module), against the installed package.
cp -r "$src/python/tests" "$work/run/tests"
"$venv/bin/python" -m unittest discover -s tests -v > "$work/unittest.log" 2>&1 ||
  { cat "$work/unittest.log" >&2; fail "the unit tests failed against the installed package (log above)"; }
ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$work/unittest.log")
[ "${ran:-0}" -gt 0 ] || { cat "$work/unittest.log" >&2; fail "no unit tests ran"; }
log "$(grep -E '^(Ran |OK)' "$work/unittest.log" | tr '\n' ' ')"
log "PASS"
