#!/usr/bin/env bash
# Browser end-to-end tests of the web UI (tests/web/*.test.mjs): Playwright
# (playwright-core from npm) drives Debian's Chromium headless against a
# real vigil-server and simulated vigil-agents from BUILD_DIR.
#
# Usage: tests/web/run.sh BUILD_DIR
# Env:   VIGIL_SCREENSHOTS=DIR  also save every page as PNG into DIR
#        VIGIL_CHROMIUM=PATH    browser (default /usr/bin/chromium)
#        KEEP=1                 keep the cluster's temp dir (logs, data)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
fail() { echo "web-e2e: FAIL: $*" >&2; exit 1; }

command -v node >/dev/null || fail "node is not installed (Debian: apt-get install nodejs npm; need >= 20)"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || fail "node $(node --version) is too old; need >= 20"
chromium=${VIGIL_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || fail "$chromium not found (Debian: apt-get install chromium)"
for bin in server/vigil-server agent/vigil-agent; do
  [ -x "$build/$bin" ] || fail "$build/$bin not built"
done
if [ ! -f "$root/node_modules/playwright-core/package.json" ]; then
  command -v npm >/dev/null || fail "node_modules/playwright-core missing and npm not installed"
  echo "web-e2e: node_modules/playwright-core missing; running npm ci in $root"
  (cd "$root" && npm ci --no-audit --no-fund) || fail "npm ci failed"
fi
if [ -f "$root/scripts/vendor-web.sh" ]; then  # uPlot into web/vendor
  bash "$root/scripts/vendor-web.sh" || fail "scripts/vendor-web.sh failed"
fi

cd "$root"
start=$SECONDS
if VIGIL_BUILD="$build" node --test --test-concurrency=1 tests/web/; then
  echo "web-e2e: PASS in $((SECONDS - start)) s"
else
  fail "browser tests failed after $((SECONDS - start)) s (details above)"
fi
