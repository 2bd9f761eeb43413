#!/usr/bin/env bash
# Reference runs on an offline GPU machine, in the playbook's checkout there, with the offline bundle in
# .carry/bundle (python -m playbook bundle .carry/bundle --python 3.12 --exclude-present params/present/gpu-machine.txt),
# or packed as .carry/bundle.tar.xz (tar -C .carry -cJf .carry/bundle.tar.xz bundle: a fifth of the transfer), unpacked here.
# A command there may run 10 minutes; each step below fits one (the 1B chain, build and verify with llama-bench,
# took 461 s on an H200: outputs/reference/20261129T034250Z-vm), run back to back on one machine:
#
#   benchmarks/gpu_verify_reference.sh build      the 1B reference chain (params/gpu-reference.yaml), whole: build,
#                                                 verify with llama-bench in interleaved pairs (what
#                                                 scripts/gpu-acceptance.sh runs as the gate, with its verdict)
#   benchmarks/gpu_verify_reference.sh tune       the 7B tune (params/gpu-tune.yaml), the wheel from the wheel cache
#   benchmarks/gpu_verify_reference.sh resume     playbook resume on the newest run (one a command's limit cut short)
#   benchmarks/gpu_verify_reference.sh prebuild-fa-quants
#                                                 the 7B wheel with the flash-attention kernels the tune's rebuild
#                                                 adds (verify.tune_build_flags), into the wheel cache and ccache, with
#                                                 a short verify: the CUDA objects all recompile (the flag changes
#                                                 ggml-cuda's compile definitions), so this takes a command of its own
#   benchmarks/gpu_verify_reference.sh tune-build-flags
#                                                 the 7B tune with verify.tune_build_flags: true (tune budget 240 s);
#                                                 its rebuild then comes from the wheel cache
#
# Everything goes under $WORK (default outputs/gpu-reference: ignored by git, kept between commands on one machine):
# cache/ (ccache, wheel cache, models), runs/ (the run folders), and results/<step>.log. PYTHON picks the interpreter.
set -uo pipefail
case "${1:-}" in build|tune|resume|prebuild-fa-quants|tune-build-flags) ;; *) sed -n '2,23p' "$0"; exit 2 ;; esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"
work="$(mkdir -p "${WORK:-outputs/gpu-reference}" && cd "${WORK:-outputs/gpu-reference}" && pwd)"
bundle="$PWD/.carry/bundle"
mkdir -p "$work/results" "$work/runs"
exec > >(tee -a "$work/results/${1:-usage}.log") 2>&1
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
[ -f "$bundle/BUNDLE.json" ] || [ ! -f .carry/bundle.tar.xz ] || tar -C .carry -xJf .carry/bundle.tar.xz
[ -f "$bundle/BUNDLE.json" ] || { log "no offline bundle in $bundle (see the top of $0)"; exit 2; }
if [ ! -d "$bundle/site" ]; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$bundle/site" "$bundle"/wheels/*.whl \
    || { log "installing the bundle's wheels failed"; exit 1; }
fi
export PYTHONPATH="$bundle/site:$PWD" PATH="$bundle/site/bin:$PATH"
source_args=(--set source.kind=path --set "source.path=$bundle" --set "build.cache_dir=$work/cache")
log "$(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

newest_run() { ls -d "$work"/runs/*/ 2>/dev/null | tail -1; }

case "${1:-}" in
  build)
    "$python" -m playbook run --params params/gpu-reference.yaml "${source_args[@]}" --output "$work/runs"
    log "build and verify: exit status $?"
    ;;
  tune)
    "$python" -m playbook run --params params/gpu-tune.yaml "${source_args[@]}" --output "$work/runs"
    log "tune: exit status $?"
    ;;
  prebuild-fa-quants)
    # the argument the tune's rebuild adds to the plan's (the wheel cache's key ignores the arguments' order)
    flag="$("$python" -c 'from playbook.backends import registry; from playbook.verify.tune import build_flag_candidates as c
print(c(registry.unit("cuda").tune_build_flags, [])[0].cmake_args[0])')"
    "$python" -m playbook run --params params/gpu-tune.yaml "${source_args[@]}" --output "$work/runs" \
      --set "build.cmake_args=[\"$flag\"]" --set verify.tune=false --set verify.sweep_points=1
    log "prebuild with $flag: exit status $?"
    ;;
  tune-build-flags)
    "$python" -m playbook run --params params/gpu-tune.yaml "${source_args[@]}" --output "$work/runs" \
      --set verify.tune_build_flags=true --set verify.tune_budget_s=240
    log "tune with build flags: exit status $?"
    ;;
  resume)
    run="$(newest_run)"
    "$python" -m playbook resume "$run"
    log "resume $run: exit status $?"
    ;;
  *)
    sed -n '2,23p' "$0"
    exit 2
    ;;
esac
for run in "$work"/runs/*/; do
  "$python" -m playbook report "$run" > /dev/null 2>&1
done
