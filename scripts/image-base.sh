#!/usr/bin/env bash
# A Python base image made from a Debian trixie root, for building the Dockerfile with buildah
# where base images cannot be pulled (the image then matches python:3.13-slim-trixie in Debian
# release and Python version, not byte for byte):
#
#   scripts/image-base.sh [NAME]                      # default localhost/engram-base:python3-trixie
#   buildah build --isolation chroot --build-arg PYTHON_IMAGE=NAME -t engram:dev .
#
# Needs root, debootstrap and buildah; buildah's storage comes from its usual configuration
# (CONTAINERS_STORAGE_CONF, STORAGE_DRIVER=vfs where overlay is unavailable). An existing NAME is
# reused.
set -euo pipefail
name=${1:-localhost/engram-base:python3-trixie}

if buildah inspect --type image "$name" >/dev/null 2>&1; then
  echo "$name"
  exit 0
fi

# The Debian mirror this machine's apt already uses.
mirror=$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | head -n1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d "${TMPDIR:-/var/tmp}/engram-base.XXXXXX")
ctr=""
cleanup() {
  [ -n "$ctr" ] && buildah rm "$ctr" >/dev/null 2>&1
  rm -rf "$root"
}
trap cleanup EXIT

echo "debootstrap trixie from $mirror ..." >&2
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates trixie "$root" "$mirror" >/dev/null
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/usr/share/doc/* "$root"/usr/share/man/*

ctr=$(buildah from scratch)
mnt=$(buildah mount "$ctr")
tar -C "$root" -cf - . | tar -C "$mnt" -xf -
buildah umount "$ctr" >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
  --cmd python3 --label org.opencontainers.image.description="Debian trixie with python3 (debootstrap)" "$ctr"
buildah commit --quiet --rm "$ctr" "$name" >/dev/null
ctr=""
echo "$name"
