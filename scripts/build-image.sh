#!/usr/bin/env bash
# Build the container image (packaging/Containerfile) with podman from a built binary.
# Usage: scripts/build-image.sh PROFILE_DIR TAG   (e.g. target/release floodgate:0.1.0)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${1:?usage: scripts/build-image.sh PROFILE_DIR TAG}
tag=${2:?usage: scripts/build-image.sh PROFILE_DIR TAG}
command -v podman >/dev/null || { echo "build-image: podman is missing (apt-get install podman buildah)" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
bash packaging/rootfs.sh "$bin_dir/floodgate" "$ctx/rootfs"
podman build --quiet --file packaging/Containerfile --tag "$tag" "$ctx" >/dev/null
echo "$tag"
