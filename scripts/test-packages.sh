#!/usr/bin/env bash
# floodgate installed the way operators install it, checked end to end (called by .ci/run
# after the tests; its release builds of the binary and of the module are most of its time):
#   1. the Debian packages (scripts/build-debs.sh): contents, control fields, conffiles;
#      installed with apt-get (dpkg -i), their systemd units checked by
#      `systemd-analyze verify`, the installed binary started with the packaged
#      configurations answering on loopback, the Redis module loaded into a redis-server;
#      removed and purged
#   2. the container image (packaging/Containerfile): user, entrypoint, size, no shell;
#      its entrypoint answering on loopback (podman run --network host, or, where the
#      container runtime may not set rlimits, the image's exported filesystem in a chroot
#      as the image's user)
#   3. the crates: `cargo package` of every library crate (the leaf crates verified),
#      `cargo install --path .` into a temporary root
#   4. the commands of docs/install.md (its `sh,install-test` blocks) run as written
# Needs root, apt-get, podman, systemd-analyze, curl, python3, redis-server, redis-cli
# (scripts/setup.sh installs them). A missing one fails the script, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=line-tables-only
fail() { echo "test-packages: FAIL: $*" >&2; exit 1; }
step() { echo "== test-packages: $*"; }
[ "$(id -u)" = 0 ] || fail "needs root (dpkg -i, chroot, podman)"
for tool in dpkg-deb dpkg-shlibdeps apt-get systemd-analyze podman curl python3 redis-server redis-cli setpriv man; do
    command -v "$tool" >/dev/null || fail "$tool is missing (bash scripts/setup.sh installs it)"
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    dpkg --purge floodgate floodgate-redis-module >/dev/null 2>&1 || true
    podman rm -f floodgate-test-export >/dev/null 2>&1 || true
    podman rmi -f "floodgate:$version" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait until TCP port $1 on loopback accepts, at most 20 s; $2: the log to show if not
wait_port() {
    for _ in $(seq 200); do
        (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    fail "nothing listens on 127.0.0.1:$1 after 20 s: $(cat "${2:-/dev/null}" 2>/dev/null)"
}
# a backend on $1 that answers every GET with 200 "backend"
backend() {
    python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "7"); self.end_headers(); self.wfile.write(b"backend")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()' "$1" &
    pids+=($!)
    wait_port "$1"
}
# `floodgate proxy` started by "$@" (its flags appended) answers through to a backend,
# with the rate-limit headers of the packaged policies
proxy_answers() {
    local up listen admin
    up=$(free_port); listen=$(free_port); admin=$(free_port)
    backend "$up"
    "$@" --listen "127.0.0.1:$listen" --upstream "http://127.0.0.1:$up" --admin "127.0.0.1:$admin" \
        >"$tmp/proxy.log" 2>&1 &
    local pid=$!
    pids+=($pid)
    wait_port "$listen" "$tmp/proxy.log"
    curl -sS -D "$tmp/headers" -o "$tmp/body" "http://127.0.0.1:$listen/hello"
    grep -q '^HTTP/1.1 200' "$tmp/headers" || fail "proxy: $(cat "$tmp/headers" "$tmp/proxy.log")"
    [ "$(cat "$tmp/body")" = backend ] || fail "proxy body: $(cat "$tmp/body")"
    grep -qi '^ratelimit-policy: "per-ip";q=10;w=1;floodgate-capacity=21, "global"' "$tmp/headers" || fail "proxy headers: $(cat "$tmp/headers")"
    curl -sf "http://127.0.0.1:$admin/healthz" >/dev/null || fail "proxy admin /healthz"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}

step "release build (floodgate, floodgate-redis-module)"
t0=$(date +%s)
# two builds, not one: built together, the two packages' dependencies would be compiled
# with their features unified, and `cargo install --path .` below (the binary's features
# alone) would compile them all again
cargo build --release --quiet -p floodgate
cargo build --release --quiet -p floodgate-redis-module
echo "release build: $(( $(date +%s) - t0 )) s"

step "Debian packages"
debs=target/debian
rm -rf "$debs"
bash scripts/build-debs.sh target/release "$debs"
main_deb="$debs/floodgate_${version}-1_${arch}.deb"
mod_deb="$debs/floodgate-redis-module_${version}-1_${arch}.deb"
field() { dpkg-deb -f "$1" "$2"; }
[ "$(field "$main_deb" Package)" = floodgate ] || fail "Package field"
[ "$(field "$main_deb" Version)" = "$version-1" ] || fail "Version field"
[ "$(field "$main_deb" Architecture)" = "$arch" ] || fail "Architecture field"
field "$main_deb" Depends | grep -q '^libc6 (>= ' || fail "Depends: $(field "$main_deb" Depends)"
field "$mod_deb" Depends | grep -q '^libc6 (>= ' || fail "module Depends: $(field "$mod_deb" Depends)"
for f in Maintainer Description Section Priority Homepage Installed-Size; do
    [ -n "$(field "$main_deb" "$f")" ] || fail "no $f field"
done
dpkg-deb -c "$main_deb" | awk '{print $6}' | sed 's|^\./|/|' > "$tmp/main.list"
want=(/usr/bin/floodgate /etc/floodgate/proxy.toml /etc/floodgate/server.yaml
    /lib/systemd/system/floodgate-proxy.service /lib/systemd/system/floodgate-server.service
    /usr/share/bash-completion/completions/floodgate /usr/share/zsh/vendor-completions/_floodgate
    /usr/share/fish/vendor_completions.d/floodgate.fish /usr/share/doc/floodgate/copyright
    /usr/share/man/man1/floodgate.1.gz)
for sub in demo simulate throttle proxy server load top completions; do
    want+=("/usr/share/man/man1/floodgate-$sub.1.gz")
done
for f in "${want[@]}"; do grep -qx "$f" "$tmp/main.list" || fail "$main_deb lacks $f"; done
dpkg-deb --ctrl-tarfile "$main_deb" | tar -xO ./conffiles > "$tmp/conffiles"
[ "$(cat "$tmp/conffiles")" = "$(printf '/etc/floodgate/proxy.toml\n/etc/floodgate/server.yaml')" ] \
    || fail "conffiles: $(cat "$tmp/conffiles")"
dpkg-deb -c "$mod_deb" | awk '{print $6}' | sed 's|^\./|/|' > "$tmp/module.list"
for f in /usr/lib/redis/modules/floodgate.so /usr/share/doc/floodgate-redis-module/README.Debian \
    /usr/share/doc/floodgate-redis-module/copyright; do
    grep -qx "$f" "$tmp/module.list" || fail "$mod_deb lacks $f"
done
ls -l "$main_deb" "$mod_deb" | awk '{print "  " $5 " bytes  " $9}'

step "installed with apt-get, units verified"
dpkg --purge floodgate floodgate-redis-module >/dev/null 2>&1 || true
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$PWD/$main_deb" "$PWD/$mod_deb" >/dev/null \
    || fail "apt-get install of the packages"
[ -x /usr/bin/floodgate ] || fail "/usr/bin/floodgate not installed"
man -w floodgate-proxy >/dev/null || fail "man floodgate-proxy finds no page"
man floodgate-server 2>/dev/null > "$tmp/man.txt" || true
grep -q "EXIT STATUS" "$tmp/man.txt" || fail "man floodgate-server has no EXIT STATUS"
bash -c 'source /usr/share/bash-completion/completions/floodgate && complete -p floodgate >/dev/null' \
    || fail "the bash completion does not load"
if ! systemd-analyze verify /lib/systemd/system/floodgate-proxy.service \
    /lib/systemd/system/floodgate-server.service >"$tmp/verify" 2>&1; then
    fail "systemd-analyze verify: $(cat "$tmp/verify")"
fi
grep -q floodgate "$tmp/verify" && fail "systemd-analyze verify warned: $(cat "$tmp/verify")"
for unit in floodgate-proxy floodgate-server; do
    systemd-analyze security --offline=yes "/lib/systemd/system/$unit.service" 2>/dev/null \
        | grep -o 'Overall exposure level.*' | sed "s/^/  /"
done
# the units' own commands, as systemd would run them, with the packaged files
/usr/bin/floodgate proxy --check-config --config /etc/floodgate/proxy.toml >/dev/null \
    || fail "the packaged proxy.toml does not check"
/usr/bin/floodgate server --config /etc/floodgate/server.yaml --check >/dev/null 2>&1 \
    || fail "the packaged server.yaml does not check"

step "the installed binary answers with the packaged configurations"
proxy_answers setpriv --reuid 65534 --regid 65534 --clear-groups \
    /usr/bin/floodgate proxy --config /etc/floodgate/proxy.toml
http=$(free_port)
/usr/bin/floodgate server --config /etc/floodgate/server.yaml --grpc off --resp off \
    --http "127.0.0.1:$http" --no-watch >"$tmp/server.out" 2>"$tmp/server.log" &
pids+=($!); server=$!
wait_port "$http" "$tmp/server.log"
answer=$(curl -sS -X POST -H 'Content-Type: application/json' \
    -d '{"domain":"edge","descriptors":[[{"key":"user_id","value":"alice"}]]}' \
    "http://127.0.0.1:$http/v1/check")
echo "$answer" | grep -q '"allowed":true,"code":"OK"' || fail "server /v1/check: $answer"
kill "$server"; wait "$server" 2>/dev/null || true
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
    --loadmodule /usr/lib/redis/modules/floodgate.so >"$tmp/redis.log" 2>&1 &
pids+=($!)
wait_port "$rport" "$tmp/redis.log"
reply=$(redis-cli -p "$rport" CL.THROTTLE user123 15 30 60 | tr '\n' ' ')
[ "$reply" = "0 16 15 -1 2 " ] || fail "CL.THROTTLE through the packaged module: $reply $(cat "$tmp/redis.log")"
redis-cli -p "$rport" SHUTDOWN NOSAVE >/dev/null 2>&1 || true

step "removed, then purged"
dpkg -r floodgate >/dev/null
[ ! -e /usr/bin/floodgate ] || fail "dpkg -r left /usr/bin/floodgate"
[ -f /etc/floodgate/proxy.toml ] || fail "dpkg -r removed a conffile"
dpkg --purge floodgate floodgate-redis-module >/dev/null
[ ! -e /etc/floodgate/proxy.toml ] || fail "dpkg --purge left /etc/floodgate/proxy.toml"

step "container image"
tag="localhost/floodgate:$version-test"
bash scripts/build-image.sh target/release "$tag" >/dev/null
user=$(podman image inspect "$tag" --format '{{.Config.User}}')
entry=$(podman image inspect "$tag" --format '{{json .Config.Entrypoint}}')
size=$(podman image inspect "$tag" --format '{{.Size}}')
[ "$user" = "65532:65532" ] || fail "image user: $user"
[ "$entry" = '["/usr/bin/floodgate"]' ] || fail "image entrypoint: $entry"
[ "$size" -lt 40000000 ] || fail "image size $size bytes, above 40 MB"
echo "  image $tag: user $user, entrypoint $entry, $size bytes"
podman create --name floodgate-test-export "$tag" >/dev/null
mkdir "$tmp/image"
podman export floodgate-test-export | tar -x -C "$tmp/image"
for sh in bin/sh usr/bin/sh bin/bash usr/bin/cc usr/bin/apt-get; do
    [ ! -e "$tmp/image/$sh" ] || fail "the image holds /$sh"
done
if podman run --rm --network host "$tag" --version >"$tmp/run.out" 2>&1; then
    grep -q "^floodgate $version" "$tmp/run.out" || fail "podman run: $(cat "$tmp/run.out")"
    proxy_answers podman run --rm --network host "$tag" proxy --config /etc/floodgate/proxy.toml
    echo "  podman run --network host: answered"
else
    grep -q "setrlimit" "$tmp/run.out" || fail "podman run: $(cat "$tmp/run.out")"
    echo "  podman run is refused here ($(head -1 "$tmp/run.out")): the entrypoint runs from the exported filesystem in a chroot, as 65532"
    proxy_answers chroot --userspec=65532:65532 "$tmp/image" /usr/bin/floodgate proxy --config /etc/floodgate/proxy.toml
fi
podman rmi -f "$tag" >/dev/null

step "crates: cargo package, cargo install"
libs=(floodgate-core floodgate-dist floodgate-redis floodgate-engine floodgate-http floodgate-net
    floodgate-proxy floodgate-server floodgate-client floodgate-load floodgate-demo)
# every library crate, packaged together so that siblings not on crates.io resolve to each
# other (a crate whose siblings are unpublished cannot be verified alone; `cargo publish
# --dry-run` would stop at the same point)
flags=()
for c in "${libs[@]}"; do flags+=(-p "$c"); done
cargo package --quiet --allow-dirty --no-verify "${flags[@]}" 2>"$tmp/package.log" \
    || fail "cargo package --no-verify: $(cat "$tmp/package.log")"
for c in "${libs[@]}"; do
    [ -f "target/package/$c-$version.crate" ] || fail "no target/package/$c-$version.crate"
    tar -tzf "target/package/$c-$version.crate" > "$tmp/crate.list"
    if grep -E '/(tests|benches|fuzz|proptest-regressions)/' "$tmp/crate.list"; then
        fail "$c's crate holds test files"
    fi
done
# the leaf crates, verified: unpacked and built alone against crates.io's dependencies
cargo package --quiet --allow-dirty -p floodgate-core -p floodgate-net 2>"$tmp/verify.log" \
    || fail "cargo package (verified) of floodgate-core and floodgate-net: $(cat "$tmp/verify.log")"
echo "  packaged ${#libs[@]} library crates; floodgate-core and floodgate-net verified"
CARGO_TARGET_DIR="$PWD/target" cargo install --quiet --locked --offline --path . --root "$tmp/cargo-root" \
    || fail "cargo install --path ."
"$tmp/cargo-root/bin/floodgate" --version | grep -q "^floodgate $version" || fail "the installed binary's --version"
echo "  cargo install --path . installed $tmp/cargo-root/bin/floodgate"

step "docs/install.md's commands, as written"
python3 - docs/install.md >"$tmp/install-blocks.sh" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```sh,install-test\n(.*?)```", text, re.S)
assert blocks, "docs/install.md has no sh,install-test block"
for b in blocks:
    print(b)
PY
CARGO_TARGET_DIR="$PWD/target" CARGO_INSTALL_ROOT="$tmp/page-root" bash -euxo pipefail "$tmp/install-blocks.sh" >"$tmp/page.log" 2>&1 \
    || fail "docs/install.md's commands: $(tail -20 "$tmp/page.log")"
dpkg --purge floodgate floodgate-redis-module >/dev/null 2>&1 || true
echo "test-packages: all checks passed"
