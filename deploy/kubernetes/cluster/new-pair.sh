#!/usr/bin/env bash
# Writes the manifests of one Vigil shard pair (headless Service,
# PodDisruptionBudget, StatefulSet of 2) from pair.yaml.in to stdout.
# Usage: deploy/kubernetes/cluster/new-pair.sh SHARD    e.g. new-pair.sh s2 > deploy/kubernetes/cluster/vigil-s2.yaml
# then add the file to kustomization.yaml.
# SHARD: lower-case letters, digits and '-', at most 20 characters (it ends
# up in pod names and DNS labels). No '_': leaders/_fleet in etcd is the
# fleet leader's key, not a shard's.
set -euo pipefail
usage() { echo "usage: $0 SHARD   (e.g. s2; [a-z0-9-], at most 20 characters)" >&2; exit 2; }
[[ $# == 1 ]] || usage
shard=$1
[[ $shard =~ ^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?$ ]] || usage
sed "s/@SHARD@/$shard/g" "$(dirname "$0")/pair.yaml.in"
