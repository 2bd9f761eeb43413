#!/usr/bin/env bash
# CUDA against Vulkan on one NVIDIA GPU, built from one source: the playbook runs twice from the offline bundle
# (backend=cuda, then backend=vulkan; params/gpu-reference.yaml: the 1B-shaped Q8_0 synthetic model, 6 sweep
# points), then `playbook compare --overlay` draws both sweeps in one figure. For an offline GPU machine with
# NVIDIA's Vulkan driver: run scripts/prepare-gpu-vulkan-carry.sh first where there is network, and bring
# .carry/bundle and .carry/vulkan along with the working tree.
#
# Usage, in the repository root:  scripts/gpu-vulkan-vs-cuda.sh
# Writes under $GPU_VULKAN_WORK (default /tmp/gpu-vulkan-vs-cuda): runs/cuda/<run>, runs/vulkan/<run>, compare/,
# and results/ (both run folders as .tar.gz without their wheels, overlay.png/.svg/.csv, compare.csv, script.log);
# touches $GPU_VULKAN_WORK/DONE when it ends, whatever the outcome. Takes about 10-12 minutes on 16 cores.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work="${GPU_VULKAN_WORK:-/tmp/gpu-vulkan-vs-cuda}"
python="${PYTHON:-python3}"
results="$work/results"
if [ "$PWD" != "$work/repo" ]; then
  # Run from a copy: the checkout may be replaced while this runs (a later command syncing the working tree).
  rm -rf "$work" && mkdir -p "$work/repo" "$results"
  tar --exclude=./.git -cf - . | tar -C "$work/repo" -xf -
  exec "$work/repo/scripts/gpu-vulkan-vs-cuda.sh" "$@"
fi
bundle="$PWD/.carry/bundle"
debs="$PWD/.carry/vulkan"
trap 'touch "$work/DONE"' EXIT
exec > >(tee -a "$results/script.log") 2>&1
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
log "in $PWD: $(nproc) cores, $("$python" --version 2>&1), $(cmake --version 2>/dev/null | head -1)"

# 1. A Vulkan SDK from the Debian packages, unpacked into the work folder (never into /).
root="$work/vulkan-root"
rm -rf "$root" && mkdir -p "$root"
for deb in "$debs"/*.deb; do dpkg -x "$deb" "$root" || { log "cannot unpack $deb"; exit 1; }; done
ln -sf x86_64-linux-gnu/libvulkan.so "$root/usr/lib/libvulkan.so"  # CMake's FindVulkan looks in $VULKAN_SDK/lib
export VULKAN_SDK="$root/usr" PATH="$root/usr/bin:$PATH"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
glslc --version | head -1 || { log "the carried glslc does not start on this machine (needs glibc 2.38)"; exit 1; }
devices=$("$python" playbook/child_scripts/vulkan_devices.py)
if ! grep -q '"discrete"' <<<"$devices"; then
  # The loader found no NVIDIA device where it looks by default: try where NVIDIA's container runtime puts the ICD.
  # NVIDIA's ICD (libGLX_nvidia) hands out vkCreateInstance only with the GL vendor-neutral libraries beside it
  # (libEGL, libGLX, libOpenGL from the carried libglvnd packages) and its EGL vendor file named.
  for vendor in /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json; do
    if [ -f "$vendor" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES="$vendor"; break; fi
  done
  for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then export VK_DRIVER_FILES="$icd" VK_ICD_FILENAMES="$icd"; break; fi
  done
  devices=$("$python" playbook/child_scripts/vulkan_devices.py)
fi
log "Vulkan: $devices${VK_DRIVER_FILES:+ (VK_DRIVER_FILES=$VK_DRIVER_FILES)}"

# 2. The bundle's wheels (what the machine's Python lacks), as the bundle's README.txt says.
"$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$bundle/site" "$bundle"/wheels/*.whl \
  || { log "installing the bundle's wheels failed"; exit 1; }
export PYTHONPATH="$bundle/site:$PWD" PATH="$bundle/site/bin:$PATH"

# 3. Two runs of the chain: one source tree, one model, one cache folder (the model is written once).
common=(--params params/gpu-reference.yaml --set source.kind=path --set "source.path=$bundle"
        --set verify.llama_bench=false --set "build.cache_dir=$work/cache")
for backend in ${GPU_BACKENDS:-cuda vulkan}; do
  log "playbook run --set backend=$backend"
  "$python" -m playbook run "${common[@]}" --set "backend=$backend" --output "$work/runs/$backend"
  log "backend=$backend: exit status $?"
done

# 4. One figure: tokens/s by offloaded layers, both backends, pp and tg, with the bandwidth limit.
"$python" -m playbook compare "$work"/runs/cuda/* "$work"/runs/vulkan/* --overlay --output "$work/compare"
log "compare: exit status $?"

# 5. What comes back: the run folders without their wheels, the figure and the tables.
for backend in ${GPU_BACKENDS:-cuda vulkan}; do
  for run in "$work/runs/$backend"/*/; do
    tar -C "$work/runs/$backend" --exclude wheelhouse -czf "$results/$backend-run.tar.gz" "$(basename "$run")"
  done
done
cp "$work"/compare/overlay.png "$work"/compare/overlay.svg "$work"/compare/overlay.csv "$work"/compare/compare.csv \
  "$results"/ 2>/dev/null
log "results: $(ls "$results" | tr '\n' ' ')"
