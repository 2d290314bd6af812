#!/usr/bin/env bash
# The Redis benchmark with the native peer: builds redis-cell 0.2.2 (the CL.THROTTLE
# module) from crates.io once (scripts/lib/redis-cell.sh caches libredis_cell.so under the
# target dir), and runs the floodgate-redis bench example with it loaded into the bench's
# own redis-server, so the scripts, the seed INCR+EXPIRE baseline and native CL.THROTTLE
# are measured in one run on one server. Needs the network only for the first build of
# the module. Then scripts/bench-redis-module.sh: floodgate's own Redis module against
# redis-cell, each in a redis-server of its own.
#
#   scripts/bench-redis.sh [bench options, e.g. --seconds 3]
set -euo pipefail
cd "$(dirname "$0")/.."
SO=$(bash scripts/lib/redis-cell.sh)
echo "redis-cell module: $SO"
echo "load before: $(uptime)"
cargo run -q --profile dist -j 2 -p floodgate-redis --example bench -- --cell-module "$SO" "$@"
echo "load after: $(uptime)"
echo "== floodgate's Redis module against redis-cell (scripts/bench-redis-module.sh)"
bash scripts/bench-redis-module.sh
