#!/usr/bin/env bash
# deploy/completion/vigilctl.bash completes what vigilctl takes. (That it
# lists every command and flag of `vigilctl --help` is the cli_doc test's:
# scripts/gen-cli-doc.py --check.) Usage: completion_test.sh SOURCE_DIR
set -u
source "$1/deploy/completion/vigilctl.bash" || exit 1
fails=0
expect() {  # WANT LINE...: completing the last word of LINE offers exactly WANT
  local want=$1; shift
  COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
  _vigilctl
  local got="${COMPREPLY[*]}"
  if [[ $got == "$want" ]]; then
    echo "ok: '$*' -> '$got'"
  else
    echo "FAIL: '$*' -> '$got', want '$want'"; fails=$((fails + 1))
  fi
}
expect "silences silence" vigilctl sil
expect "add expire" vigilctl silence ""
expect "add" vigilctl --server http://v:8080 silence a
expect "reset" vigilctl remediation r
expect "--match" vigilctl silence add --ma
expect "--server --state --severity" vigilctl incidents --s
expect "--server --severity" vigilctl incidents --state firing --se
expect "--json" vigilctl --js
expect "--json" vigilctl remediation --js
expect "" vigilctl incidents --state ""
expect "" vigilctl ack ""
expect "--ca-cert --comment" vigilctl ack inc-1 --c
expect "help" vigilctl hel
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
touch "$work/token.txt"
expect "$work/token.txt" vigilctl whoami --token-file "$work/tok"
expect "" vigilctl whoami --token ""
expect "incidents incident" vigilctl help inciden
type -t complete >/dev/null && [[ $(complete -p vigilctl) == "complete -F _vigilctl vigilctl" ]] \
  && echo "ok: registered" || { echo "FAIL: not registered"; fails=$((fails + 1)); }
[ $fails -eq 0 ] || { echo "$fails failed"; exit 1; }
