#!/usr/bin/env bash
# Assemble the image's root filesystem in DIR from a built `floodgate` binary: the binary,
# each shared library `ldd` names (and the dynamic loader), an /etc/passwd and /etc/group
# naming the user 65532 (floodgate), and /etc/floodgate/{proxy.toml,server.yaml}.
# Usage: packaging/rootfs.sh BINARY DIR
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: packaging/rootfs.sh BINARY DIR}
dir=${2:?usage: packaging/rootfs.sh BINARY DIR}
rm -rf "$dir"
install -D -m 0755 "$bin" "$dir/usr/bin/floodgate"
strip --strip-debug "$dir/usr/bin/floodgate"
# ldd's lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and the loader's
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file
ldd "$bin" | awk '/=> \// { print $3 } /^\s*\// { print $1 }' | while read -r lib; do
    install -D -m 0755 "$(readlink -f "$lib")" "$dir$lib"
done
install -d -m 0755 "$dir/etc/floodgate" "$dir/tmp"
install -d -m 0750 -o 65532 -g 65532 "$dir/var/lib/floodgate"
chmod 1777 "$dir/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nfloodgate:x:65532:65532:floodgate:/var/lib/floodgate:/sbin/nologin\n' > "$dir/etc/passwd"
printf 'root:x:0:\nfloodgate:x:65532:\n' > "$dir/etc/group"
install -m 0644 packaging/etc/proxy.toml packaging/etc/server.yaml "$dir/etc/floodgate/"
