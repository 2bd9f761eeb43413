#!/usr/bin/env bash
# Newer Vulkan headers than Debian 12's (1.3.239; the pinned llama.cpp needs 1.3.272 or newer): Debian 13's
# libvulkan-dev, downloaded once into the cache (sha256 checked) and unpacked with dpkg -x, no install.
# Prints the folder to use as VULKAN_SDK (it holds include/vulkan/vulkan_core.h); the playbook's detect
# looks there. Usage: VULKAN_SDK=$(scripts/vulkan-headers.sh)
set -euo pipefail
cache="${LLAMA_PLAYBOOK_CACHE:-$HOME/.cache/llama-cpp-playbook}"
deb_name="libvulkan-dev_1.4.309.0-1_amd64.deb"
deb_url="https://deb.debian.org/debian/pool/main/v/vulkan-loader/${deb_name}"
deb_sha256="8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a"
downloads="$cache/downloads"
root="$cache/vulkan-headers-1.4.309"
deb="$downloads/$deb_name"
if [ ! -f "$root/usr/include/vulkan/vulkan_core.h" ]; then
  mkdir -p "$downloads"
  if [ ! -f "$deb" ] || ! echo "$deb_sha256  $deb" | sha256sum -c --status; then
    curl -fsSL --retry 3 -o "$deb.part" "$deb_url"
    echo "$deb_sha256  $deb.part" | sha256sum -c --status || { echo "sha256 mismatch: $deb_url" >&2; rm -f "$deb.part"; exit 1; }
    mv "$deb.part" "$deb"
  fi
  rm -rf "$root.part" && mkdir -p "$root.part" && dpkg -x "$deb" "$root.part" && rm -rf "$root" && mv "$root.part" "$root"
fi
echo "$root/usr"
