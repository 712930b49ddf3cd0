#!/usr/bin/env bash
# Makes a private CA and the certificates for mTLS between vigil-agent and
# vigil-server, with the openssl CLI (EC P-256 keys, mode 0600).
#
# Usage: deploy/make-test-ca.sh [--server-name NAME]... [--days N] DIR [NODE...]
#
#   DIR/ca.crt, DIR/ca.key            the CA (reused when DIR already has one)
#   DIR/server.crt, DIR/server.key    server certificate; SANs: localhost,
#                                     127.0.0.1, ::1, this host's name and
#                                     every --server-name (DNS name or IP)
#   DIR/nodes/NODE.crt, NODE.key      one client certificate per node:
#                                     CN=NODE and DNS SAN NODE
#
# Files that exist are kept, so a second run with more nodes only adds
# theirs (delete server.* to reissue the server certificate). Good for tests,
# demos and small fleets; a large fleet would issue certificates from its
# own PKI (the server only needs the CA bundle that signed them).
set -euo pipefail

usage() {
  sed -n '5p' "$0" | sed 's/^# //' >&2
  exit 2
}

days=365
server_names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server-name) [ $# -ge 2 ] || usage; server_names+=("$2"); shift 2 ;;
    --days) [ $# -ge 2 ] || usage; days=$2; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "make-test-ca: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
dir=$1
shift
case "$days" in ''|*[!0-9]*) echo "make-test-ca: --days needs a number" >&2; exit 2 ;; esac
command -v openssl >/dev/null || { echo "make-test-ca: the openssl CLI is missing (apt-get install openssl)" >&2; exit 1; }
valid_name='^[A-Za-z0-9][A-Za-z0-9._-]*$'
for node in "$@"; do
  [[ $node =~ $valid_name ]] || { echo "make-test-ca: bad node name '$node' (letters, digits, . _ -)" >&2; exit 2; }
done

umask 077
mkdir -p "$dir/nodes"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

new_key() {  # path
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
}

# Signs a certificate for key $1 with subject CN $2 and extensions $3 into $4.
sign() {
  local key=$1 cn=$2 ext=$3 out=$4
  openssl req -new -key "$key" -subj "/CN=$cn" -out "$tmp/req.csr"
  printf '%b\n' "$ext" >"$tmp/ext.cnf"
  openssl x509 -req -in "$tmp/req.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 \
    -extfile "$tmp/ext.cnf" -out "$out" 2>/dev/null
  chmod 0644 "$out"
}

if [ ! -s "$dir/ca.crt" ] || [ ! -s "$dir/ca.key" ]; then
  new_key "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=Vigil test CA" \
    -days "$days" -sha256 -out "$dir/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign"
  chmod 0644 "$dir/ca.crt"
  echo "make-test-ca: new CA in $dir/ca.crt"
fi

if [ ! -s "$dir/server.crt" ] || [ ! -s "$dir/server.key" ]; then
  sans="DNS:localhost,IP:127.0.0.1,IP:::1"
  host=$(hostname 2>/dev/null || true)
  [ -n "$host" ] && [ "$host" != localhost ] && sans="$sans,DNS:$host"
  for name in "${server_names[@]}"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then sans="$sans,IP:$name"; else sans="$sans,DNS:$name"; fi
  done
  new_key "$dir/server.key"
  sign "$dir/server.key" vigil-server \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=$sans" \
    "$dir/server.crt"
  echo "make-test-ca: server certificate $dir/server.crt ($sans)"
fi

for node in "$@"; do
  [ -s "$dir/nodes/$node.crt" ] && [ -s "$dir/nodes/$node.key" ] && continue
  new_key "$dir/nodes/$node.key"
  sign "$dir/nodes/$node.key" "$node" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:$node" \
    "$dir/nodes/$node.crt"
done
[ $# -eq 0 ] || echo "make-test-ca: client certificates for $# node(s) in $dir/nodes/"
