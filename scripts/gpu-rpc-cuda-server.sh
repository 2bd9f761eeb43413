#!/usr/bin/env bash
# The shape of a small fleet on one GPU machine: a CUDA rpc-server on 127.0.0.1 serving a client wheel built
# CPU-only plus RPC, both from one source tree (the offline bundle). One playbook run does it all:
# params/rpc.yaml with build.rpc_server_backend=cuda builds the CPU+RPC wheel, verify builds rpc-server for CUDA
# from the same tree (ccache, the GPU's own architecture), starts it on a free port for a bounded time, checks
# the logits with every layer on the server against the CPU's, sweeps throughput by layers sent to it, plots
# local against RPC, and stops it. Then `playbook report` writes the run's HTML report.
#
# Usage, in the repository root, with the offline bundle in .carry/bundle (scripts/prepare-gpu-vulkan-carry.sh
# writes it, or: python -m playbook bundle .carry/bundle --python 3.12 --exclude-present params/present/gpu-machine.txt):
#     PYTHON=/path/to/python3 scripts/gpu-rpc-cuda-server.sh
# Writes under $GPU_RPC_WORK (default /tmp/gpu-rpc-cuda): runs/<run> (the run folder, its report in report/) and
# results/ (the run folder as .tar.gz without its wheels, the RPC plot, script.log); touches $GPU_RPC_WORK/DONE
# when it ends, whatever the outcome. MODEL_SHAPE (default 1b) picks the synthetic model. About 6-8 minutes on 16 cores.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
work="${GPU_RPC_WORK:-/tmp/gpu-rpc-cuda}"
python="${PYTHON:-python3}"
results="$work/results"
if [ "$PWD" != "$work/repo" ]; then
  # Run from a copy: the checkout may be replaced while this runs.
  rm -rf "$work" && mkdir -p "$work/repo" "$results"
  tar --exclude=./.git -cf - . | tar -C "$work/repo" -xf -
  exec "$work/repo/scripts/gpu-rpc-cuda-server.sh" "$@"
fi
bundle="$PWD/.carry/bundle"
trap 'touch "$work/DONE"' EXIT
exec > >(tee -a "$results/script.log") 2>&1
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
log "in $PWD: $(nproc) cores, $("$python" --version 2>&1), $(cmake --version 2>/dev/null | head -1)"
log "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo 'not on PATH')"
log "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
[ -f "$bundle/BUNDLE.json" ] || [ ! -f .carry/bundle.tar.xz ] || tar -C .carry -xJf .carry/bundle.tar.xz  # packed
[ -f "$bundle/BUNDLE.json" ] || { log "no offline bundle in $bundle (see the usage at the top of $0)"; exit 2; }

# 1. The bundle's wheels (what the machine's Python lacks), as the bundle's README.txt says.
"$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$bundle/site" "$bundle"/wheels/*.whl \
  || { log "installing the bundle's wheels failed"; exit 1; }
export PYTHONPATH="$bundle/site:$PWD" PATH="$bundle/site/bin:$PATH"

# 2. The plan first, so that the log shows the client's and the server's CMake arguments before anything builds.
settings=(--params params/rpc.yaml --set source.kind=path --set "source.path=$bundle"
          --set build.rpc_server_backend=cuda --set cuda.architectures=native --set "build.cache_dir=$work/cache"
          --set build.native=false
          --set "model.shape=${MODEL_SHAPE:-1b}" --set verify.prompt_tokens=512 --set verify.gen_tokens=64
          --set verify.repetitions=2 --set verify.sweep_points=5)
log "playbook plan ${settings[*]}"
"$python" -m playbook plan "${settings[@]}" || { log "the plan has blockers: nothing built"; exit 1; }

# 3. The run: CPU+RPC wheel, CUDA rpc-server from the same tree, verify through it.
log "playbook run (client: CPU + RPC; server: CUDA)"
"$python" -m playbook run "${settings[@]}" --output "$work/runs"
log "playbook run: exit status $?"

# 4. The report (the RPC plot is in it) and what comes back.
for run in "$work"/runs/*/; do
  name="$(basename "$run")"
  # The client crashed at model load here on 2026-11-25: /opt/gcc/bin/g++ linked libstdc++.a into libggml-rpc.so
  # beside the libstdc++.so.6 numpy loads (verify's cxx-runtime unit names it; repair rebuilds with /usr/bin/c++).
  log "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} LD_PRELOAD=${LD_PRELOAD:-}"
  for library in "$work"/cache/site/*/llama_cpp/lib/libllama.so; do
    [ -f "$library" ] && log "ldd $library:" && ldd "$library" | grep -E "stdc|gcc_s|gomp|ggml|not found"
  done
  grep -h "runtime_libraries" "$run"/verify-logs/attempt-*/probe.log 2>/dev/null \
    | sed 's/.*"runtime_libraries": \(\[[^]]*\]\).*/runtime libraries the probe mapped: \1/'
  "$python" -m playbook report "$run" && log "report: $run/report/index.html"
  tar -C "$work/runs" --exclude wheelhouse -czf "$results/$name.tar.gz" "$name"
  cp "$run"/rpc-attempt-*.png "$run"/throughput-attempt-*.png "$results"/ 2>/dev/null
  "$python" - "$run" <<'EOF'
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
for path in sorted(run.glob("verify-attempt-*.json")):
    verify = json.loads(path.read_text())
    rpc = verify.get("measurements", {}).get("rpc-offload") or {}
    print(f"{path.name}: ok={verify['ok']}; {verify['summary']}")
    for server in rpc.get("servers", []):
        print(f"  server {server['address']}: {server['build']['backend']} {server['build']['binary']} "
              f"(sha256 {server['build']['sha256'][:12]}), devices {server['devices']}, {server['exit_status']}")
        print(f"  MiB held by layers sent: {server['held_mib_by_layers']}")
    for point in rpc.get("points", []):
        print(f"  {point['n_gpu_layers']:>3} layers sent: {point['status']}, pp {point['pp_tokens_per_s'] or 0:.1f} t/s, "
              f"tg {point['tg_tokens_per_s'] or 0:.1f} t/s, offloaded {point['offloaded_layers']}")
    if rpc.get("agreement"):
        agreement = rpc["agreement"]
        print(f"  logits vs CPU: relative error {agreement['relative_error']:.2e}, top-1 {agreement['top1_agreement']:.1%}")
EOF
done
log "results: $(ls "$results" | tr '\n' ' ')"
