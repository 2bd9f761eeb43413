#!/usr/bin/env bash
# Prepares what an offline GPU machine needs for scripts/gpu-vulkan-vs-cuda.sh, in git-ignored folders:
#   .carry/bundle  the offline bundle (`playbook bundle`: wheels + the trimmed llama-cpp-python source)
#   .carry/vulkan  Debian 13 (trixie) packages: the Vulkan loader and headers (1.4.309), glslc and libshaderc
#                  (shaderc 2025.2, which knows the cooperative-matrix GLSL extensions llama.cpp's NVIDIA shaders use;
#                  Debian 12's 2023.2 does not) and the SPIR-V headers. They need glibc 2.38 and libstdc++ 3.4.32
#                  (Ubuntu 24.04 has both); gpu-vulkan-vs-cuda.sh checks that glslc starts before building. Also
#                  Debian 12's libglvnd libraries (libGLdispatch, libEGL, libGLX, libOpenGL, libGL, libGLESv2), for a
#                  machine whose NVIDIA driver came without them: its Vulkan ICD needs them.
# Downloads are cached (sha256 checked) under $LLAMA_PLAYBOOK_CACHE/downloads. Prints the sizes: the working tree
# and these folders travel together to the offline machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="${LLAMA_PLAYBOOK_CACHE:-$HOME/.cache/llama-cpp-playbook}/downloads"
pool="https://deb.debian.org/debian/pool/main"
packages=(
  "v/vulkan-loader/libvulkan1_1.4.309.0-1_amd64.deb f47da79cd140264fe21cceb08bc87a71bc7fec05819e4a421f3f518d21101a37"
  "v/vulkan-loader/libvulkan-dev_1.4.309.0-1_amd64.deb 8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a"
  "s/shaderc/glslc_2025.2-1_amd64.deb e05374965709159303041b104d4a26022d6ac5eb8296450364d66ae864a20367"
  "s/shaderc/libshaderc1_2025.2-1_amd64.deb 2a67c8f784c65e1aa0d251819c020917405b490fbb543c6a73a52a631e476463"
  "s/spirv-headers/spirv-headers_1.6.1+1.4.309.0-1_all.deb dc18db866d63680351c40ac6b6bece34cb52da64a7799ce1cc4f16f6bff4d064"
  # libGLdispatch, which NVIDIA's Vulkan driver library (libGLX_nvidia.so.0) links against; Debian 12's build
  "libg/libglvnd/libglvnd0_1.6.0-1_amd64.deb b6da5b153dd62d8b5e5fbe25242db1fc05c068707c365db49abda8c2427c75f8"
  # libEGL, libGLX, libOpenGL, libGL, libGLESv2: without them NVIDIA's ICD gives the loader no vkCreateInstance
  "libg/libglvnd/libegl1_1.6.0-1_amd64.deb fe4d8b39f6e6fe1a32ab1efd85893553eaa9cf3866aa668ccf355f585b37d523"
  "libg/libglvnd/libglx0_1.6.0-1_amd64.deb 95f568df73dedf43ae66834a75502112e0d4f3ad7124f3dbfa790b739383b896"
  "libg/libglvnd/libopengl0_1.6.0-1_amd64.deb dc71cb5aaddeb8b09b3d63b8426fd651d8c79ad55b23dbe640c1abbc94c85013"
  "libg/libglvnd/libgl1_1.6.0-1_amd64.deb 6f89b1702c48e9a2437bb3c1ffac8e1ab2d828fc28b3d14b2eecd4cc19b2c790"
  "libg/libglvnd/libgles2_1.6.0-1_amd64.deb 07b2f51b8aa3c8d6d928133cd46087bd8793d0d67c203f09fc289d45a2cf5f47"
)
mkdir -p "$cache" .carry
rm -rf .carry/vulkan && mkdir .carry/vulkan
for entry in "${packages[@]}"; do
  read -r path sha <<<"$entry"
  name=$(basename "$path")
  if [ ! -f "$cache/$name" ] || ! echo "$sha  $cache/$name" | sha256sum -c --status; then
    curl -fsSL --retry 3 -o "$cache/$name.part" "$pool/$path"
    echo "$sha  $cache/$name.part" | sha256sum -c --status || { echo "sha256 mismatch: $pool/$path" >&2; exit 1; }
    mv "$cache/$name.part" "$cache/$name"
  fi
  cp "$cache/$name" .carry/vulkan/
done

python="${PYTHON:-.venv/bin/python}"
rm -rf .carry/bundle
"$python" -m playbook bundle .carry/bundle --python 3.12 --exclude-present params/present/gpu-machine.txt

tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s}')
carried=$(find .carry/bundle .carry/vulkan -type f -printf '%s\n' | awk '{s+=$1} END {print s}')
awk -v t="$tree" -v c="$carried" 'BEGIN {
  printf "working tree %.1f MiB + .carry/bundle and .carry/vulkan %.1f MiB = %.1f MiB (limit 64)\n", t/2^20, c/2^20, (t+c)/2^20
  exit (t + c > 64 * 2^20) }'
