#!/usr/bin/env bash
# The admin page's screenshot in the book (docs/images/admin.png): floodgate proxy with a
# fixed window of 100 per 10 s keyed on x-api-key, three keys under the limit and one
# flooding at 60/s for 25 s (floodgate load), then headless chromium on /admin.
# Needs Debian's chromium (apt-get install chromium). Loopback only, bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/images/admin.png}
cargo build --quiet
bin=target/debug/floodgate
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
backend=$(free_port); listen=$(free_port); admin=$(free_port)
python3 -m http.server "$backend" --bind 127.0.0.1 --directory "$dir" >/dev/null 2>&1 &
pids+=($!)
cat >"$dir/floodgate.toml" <<TOML
listen = "127.0.0.1:$listen"
upstream = "http://127.0.0.1:$backend"
admin = "127.0.0.1:$admin"

[[policy]]
name = "api"
algorithm = "fixed-window"
rate = "100/10s"
key = "header:x-api-key"
TOML
"$bin" proxy --config "$dir/floodgate.toml" --threads 1 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$listen") 2>/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$listen/"
loads=()
for spec in mallory:60 alice:2 bob:4 carol:6; do
    "$bin" load "$url" -z 25s -q "${spec#*:}" -c 4 -H "x-api-key: ${spec%%:*}" >/dev/null 2>&1 &
    loads+=($!)
done
wait "${loads[@]}"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$dir/chromium" --virtual-time-budget=3000 --window-size=1280,1000 \
    --screenshot="$PWD/$out" "http://127.0.0.1:$admin/admin" 2>/dev/null
echo "wrote $out"
