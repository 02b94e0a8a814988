#!/usr/bin/env bash
# Runs the test suite on another Node.js line the way CI does: `npm run test:node -- 26`.
# The version comes from .ci/node-versions; the Node build from the npm registry (node-line.sh).
# better-sqlite3, the one native module, is rebuilt against that Node's headers (no download: the
# registry's Node package carries them) and cached per ABI; the machine's own build is put back
# afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
major="${1:?usage: test-node.sh MAJOR [npm test arguments]}"
shift
version="$(grep -v '^#' .ci/node-versions | grep "^${major}\." | head -n 1 || true)"
if [ -z "$version" ]; then
  echo "test-node: no Node $major in .ci/node-versions ($(grep -v '^#' .ci/node-versions | tr '\n' ' '))" >&2
  exit 2
fi
dir="$(scripts/node-line.sh "$version")"
cache="${PROTO_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/proto-node}/native"
mkdir -p "$cache"
module=node_modules/better-sqlite3/build/Release/better_sqlite3.node
sqlite_version="$(node -p 'require("./node_modules/better-sqlite3/package.json").version')"
native_for() { echo "$cache/better-sqlite3-$sqlite_version-abi$1.node"; }
machine_abi="$(node -p process.versions.modules)"
line_abi="$("$dir/bin/node" -p process.versions.modules)"

# Keep the machine's build, and put it back whatever happens.
[ -f "$(native_for "$machine_abi")" ] || cp "$module" "$(native_for "$machine_abi")"
trap 'cp "$(native_for "$machine_abi")" "$module"' EXIT

if [ -f "$(native_for "$line_abi")" ]; then
  cp "$(native_for "$line_abi")" "$module"
else
  echo "test-node: building better-sqlite3 $sqlite_version for Node $version (ABI $line_abi)" >&2
  start=$SECONDS
  PATH="$dir/bin:$PATH" npm_config_nodedir="$dir" npm rebuild better-sqlite3 --foreground-scripts=false >/dev/null
  echo "test-node: built in $((SECONDS - start)) s" >&2
  cp "$module" "$(native_for "$line_abi")"
fi

echo "test-node: Node $("$dir/bin/node" --version) from $dir" >&2
# npm_config_nodedir: native builds inside the tests (tests/packaging installs better-sqlite3) use
# this Node's headers, not the machine's.
PATH="$dir/bin:$PATH" npm_config_nodedir="$dir" npm test "$@"
