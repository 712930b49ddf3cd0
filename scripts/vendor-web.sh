#!/usr/bin/env bash
# Copies the web UI's third-party files (uPlot) from node_modules into
# web/vendor/ (gitignored). Runs `npm ci` first when node_modules/uplot is
# missing. Idempotent: copies nothing when web/vendor is already up to date.
# Usage: scripts/vendor-web.sh        (from anywhere; exits non-zero on error)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/node_modules/uplot/dist"
dst="$root/web/vendor"
files=(uPlot.iife.min.js uPlot.min.css)

if [[ ! -f "$src/uPlot.iife.min.js" || ! -f "$src/uPlot.min.css" ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "vendor-web.sh: node_modules/uplot is missing and npm is not installed;" \
         "install Node.js >= 20 and npm (Debian: apt-get install nodejs npm)" >&2
    exit 1
  fi
  echo "vendor-web.sh: node_modules/uplot missing; running npm ci in $root" >&2
  if ! (cd "$root" && npm ci --no-audit --no-fund); then
    echo "vendor-web.sh: npm ci failed in $root (see npm's message above)" >&2
    exit 1
  fi
  for f in "${files[@]}"; do
    if [[ ! -f "$src/$f" ]]; then
      echo "vendor-web.sh: npm ci finished but $src/$f is still missing" >&2
      exit 1
    fi
  done
fi

mkdir -p "$dst"
for f in "${files[@]}"; do
  # cmp -s: no copy (and no new mtime) when the file is already there.
  if ! cmp -s "$src/$f" "$dst/$f"; then
    cp "$src/$f" "$dst/$f.tmp"
    mv "$dst/$f.tmp" "$dst/$f"
  fi
done
