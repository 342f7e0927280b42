#!/usr/bin/env bash
# Debian packages the test suite uses besides Python's: installed when missing, as root only.
# (The local database itself is provisioned by `engram db up`.)
set -euo pipefail
packages=(
  debootstrap
  buildah      # builds the app image without a daemon (tests/test_image.py)
  prometheus   # Prometheus and promtool: metrics, alert rules and dashboard tests
  chromium     # a real browser for the page tests (driven by Playwright; no browser download)
  npm          # the console's browser libraries from the npm registry (make console-assets)
)
missing=()
for p in "${packages[@]}"; do
  # npm often comes with a Node.js from elsewhere (NodeSource's nodejs), which Debian's npm conflicts with
  [ "$p" = npm ] && command -v npm >/dev/null && continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "note: not installing ${missing[*]} (needs root on Debian/Ubuntu); tests that need them will skip" >&2
  exit 0
fi
echo "installing ${missing[*]} ..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
