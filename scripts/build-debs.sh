#!/usr/bin/env bash
# Build the Debian packages from binaries already built:
#   floodgate_VERSION-1_ARCH.deb               the command, its man pages and shell completions,
#                                              /etc/floodgate/{proxy.toml,server.yaml} (conffiles),
#                                              systemd units for `floodgate proxy` and `floodgate server`
#   floodgate-redis-module_VERSION-1_ARCH.deb  the Redis module (.so) and how to load it
# Usage: scripts/build-debs.sh PROFILE_DIR OUT_DIR   (PROFILE_DIR holds floodgate and
# libfloodgate_redis_module.so, e.g. target/release). Needs dpkg-deb and dpkg-shlibdeps
# (Debian's dpkg-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${1:?usage: scripts/build-debs.sh PROFILE_DIR OUT_DIR}
out=${2:?usage: scripts/build-debs.sh PROFILE_DIR OUT_DIR}
for tool in dpkg-deb dpkg-shlibdeps gzip; do
    command -v "$tool" >/dev/null || { echo "build-debs: $tool is missing (apt-get install dpkg-dev)" >&2; exit 1; }
done
for f in floodgate libfloodgate_redis_module.so; do
    [ -f "$bin_dir/$f" ] || { echo "build-debs: $bin_dir/$f is missing: build it first (cargo build --release -p floodgate -p floodgate-redis-module)" >&2; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
maintainer="floodgate maintainers <maintainers@floodgate.invalid>"
homepage=$(sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -1)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The Depends line of the ELF files under $1 (dpkg-shlibdeps wants a debian/control).
shlibdeps() {
    local root=$1; shift
    mkdir -p "$work/shlib/debian"
    printf 'Source: floodgate\n\nPackage: floodgate\nArchitecture: any\n' > "$work/shlib/debian/control"
    (cd "$work/shlib" && dpkg-shlibdeps -O "${@/#/$root/}" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
}

# control file fields common to both packages, then the package
package() {
    local root=$1 name=$2 depends=$3 description=$4
    local size
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    {
        echo "Package: $name"
        echo "Version: $version-1"
        echo "Architecture: $arch"
        echo "Maintainer: $maintainer"
        echo "Installed-Size: $size"
        echo "Depends: $depends"
        echo "Section: net"
        echo "Priority: optional"
        echo "Homepage: $homepage"
        echo "Description: $description"
    } > "$root/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$root" "$out/${name}_${version}-1_${arch}.deb" >/dev/null
    echo "$out/${name}_${version}-1_${arch}.deb"
}

copyright() {
    local doc=$1
    mkdir -p "$doc"
    {
        echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
        echo "Upstream-Name: floodgate"
        echo "Source: $homepage"
        echo
        echo "Files: *"
        echo "Copyright: The floodgate authors"
        echo "License: MIT or Apache-2.0"
        echo " On Debian systems the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0."
        echo " The MIT license:"
        sed 's/^$/./; s/^/ /' LICENSE-MIT
    } > "$doc/copyright"
}

# --- floodgate
r="$work/floodgate"
install -D -m 0755 "$bin_dir/floodgate" "$r/usr/bin/floodgate"
strip --strip-debug "$r/usr/bin/floodgate" 2>/dev/null || true
mkdir -p "$r/usr/share/man/man1"
"$bin_dir/floodgate" man "$r/usr/share/man/man1" >/dev/null
gzip -9n "$r"/usr/share/man/man1/*.1
install -d "$r/usr/share/bash-completion/completions" "$r/usr/share/zsh/vendor-completions" \
    "$r/usr/share/fish/vendor_completions.d"
"$bin_dir/floodgate" completions bash > "$r/usr/share/bash-completion/completions/floodgate"
"$bin_dir/floodgate" completions zsh > "$r/usr/share/zsh/vendor-completions/_floodgate"
"$bin_dir/floodgate" completions fish > "$r/usr/share/fish/vendor_completions.d/floodgate.fish"
install -D -m 0644 packaging/etc/proxy.toml "$r/etc/floodgate/proxy.toml"
install -D -m 0644 packaging/etc/server.yaml "$r/etc/floodgate/server.yaml"
install -D -m 0644 packaging/systemd/floodgate-proxy.service "$r/lib/systemd/system/floodgate-proxy.service"
install -D -m 0644 packaging/systemd/floodgate-server.service "$r/lib/systemd/system/floodgate-server.service"
copyright "$r/usr/share/doc/floodgate"
install -d "$r/DEBIAN"
printf '/etc/floodgate/proxy.toml\n/etc/floodgate/server.yaml\n' > "$r/DEBIAN/conffiles"
for script in postinst postrm; do
    cat > "$r/DEBIAN/$script" <<'SH'
#!/bin/sh
set -e
# the units are installed, not enabled: systemctl enable --now floodgate-proxy (or floodgate-server)
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null || true
fi
SH
    chmod 0755 "$r/DEBIAN/$script"
done
package "$r" floodgate "$(shlibdeps "$r" usr/bin/floodgate)" "rate limiting that names its guarantee at the window boundary
 floodgate proxy, a rate-limiting reverse proxy (nginx limit_req's semantics and
 more algorithms), and floodgate server, a central rate limit service (Envoy's
 RLS v3 over gRPC, CL.THROTTLE over RESP, HTTP/JSON), with systemd units and
 configurations under /etc/floodgate; also floodgate throttle, load, top,
 simulate and demo."

# --- floodgate-redis-module
r="$work/module"
install -D -m 0755 "$bin_dir/libfloodgate_redis_module.so" "$r/usr/lib/redis/modules/floodgate.so"
strip --strip-debug "$r/usr/lib/redis/modules/floodgate.so" 2>/dev/null || true
copyright "$r/usr/share/doc/floodgate-redis-module"
cat > "$r/usr/share/doc/floodgate-redis-module/README.Debian" <<'TXT'
floodgate's Redis module: CL.THROTTLE (redis-cell's command) and FG.THROTTLE inside Redis.

Load it at Redis's start, in /etc/redis/redis.conf:

    loadmodule /usr/lib/redis/modules/floodgate.so

then restart Redis (systemctl restart redis-server), or load it into a running Redis:

    redis-cli MODULE LOAD /usr/lib/redis/modules/floodgate.so

Check: redis-cli CL.THROTTLE user123 15 30 60   answers five integers.
TXT
install -d "$r/DEBIAN"
package "$r" floodgate-redis-module "$(shlibdeps "$r" usr/lib/redis/modules/floodgate.so)" "floodgate's Redis module: CL.THROTTLE and FG.THROTTLE inside Redis
 redis-cell's CL.THROTTLE command (same arguments, same five integers) and
 floodgate's FG.THROTTLE, decided by floodgate-core, with replica-safe time.
 Load it with loadmodule /usr/lib/redis/modules/floodgate.so in redis.conf."
