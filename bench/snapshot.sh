#!/usr/bin/env bash
# Builds one committed revision of Longhaul into a directory outside the work tree, so a
# benchmark measures exactly that commit (not uncommitted edits in src/), compiled by tsc
# like the published package:
#
#   bench/snapshot.sh [REV=HEAD] [DIR=/tmp/longhaul-<rev>]
#   npm run bench -- --lib /tmp/longhaul-<rev>/dist
#
# It writes nothing inside the repository (git archive + tsc into DIR; DIR/node_modules is a
# symlink to this checkout's node_modules).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rev="$(git -C "$root" rev-parse --short "${1:-HEAD}")"
dir="${2:-/tmp/longhaul-$rev}"
rm -rf "$dir"
mkdir -p "$dir"
git -C "$root" archive "$rev" src package.json tsconfig.json tsconfig.build.json | tar -x -C "$dir"
ln -s "$root/node_modules" "$dir/node_modules"
(cd "$dir" && "$root/node_modules/.bin/tsc" -p tsconfig.build.json --declaration false --sourceMap false)
# The stores' migration files (SQL, which tsc does not copy), where the compiled code reads them.
for m in "$dir"/src/store/*/migrations; do
  if [ -d "$m" ]; then rel=${m#"$dir/src/"}; mkdir -p "$dir/dist/$rel" && cp "$m"/*.sql "$dir/dist/$rel/"; fi
done
git -C "$root" rev-parse "$rev" > "$dir/dist/REVISION"
echo "$dir/dist"
