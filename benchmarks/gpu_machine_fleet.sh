#!/usr/bin/env bash
# Issue 18's measurements on a GPU machine, in the playbook's checkout there:
#   (1) build_speed.py with the remote-cache case (e): a redis-server on localhost is the shared cache,
#       (b) fills it, (e) is a second machine's cold build against it (empty local cache, another build folder);
#   (2) the runtime-tuning run: playbook run --params params/gpu-tune.yaml (7B-shaped Q4_0, llama-bench, verify.tune).
#
#   benchmarks/gpu_machine_fleet.sh carry            here, on a Debian machine: redis-server as .deb files into
#                                                    .carry/debs/ (git-ignored, about 1.4 MiB), for a machine without it
#   benchmarks/gpu_machine_fleet.sh measure [BUNDLE] there; BUNDLE: an offline bundle (playbook bundle) as the source
#
# Writes outputs/build-speed-remote-<host>.txt and a run folder under outputs/; WORK (default /tmp/build-speed-fleet)
# is build_speed.py's scratch folder. PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python="${PYTHON:-python3}"

redis_server() {
  if command -v redis-server > /dev/null; then
    command -v redis-server
    return
  fi
  local debs=(.carry/debs/*.deb)
  [ -e "${debs[0]}" ] || { echo "no redis-server here and no .carry/debs/*.deb: run '$0 carry' on a Debian machine" >&2; exit 2; }
  rm -rf .carry/redis
  for deb in "${debs[@]}"; do dpkg-deb -x "$deb" .carry/redis; done
  echo "$PWD/.carry/redis/usr/bin/redis-server"
}

case "${1:-}" in
  carry)
    mkdir -p .carry/debs
    (cd .carry/debs && apt-get download redis-server redis-tools libjemalloc2 liblzf1)
    du -sh .carry/debs
    ;;
  measure)
    bundle="${2:-}"
    source_args=()
    [ -n "$bundle" ] && source_args=(--set source.kind=path --set "source.path=$bundle")
    server="$(redis_server)"
    # the carried redis-server finds its jemalloc and lzf beside it
    export LD_LIBRARY_PATH="$PWD/.carry/redis/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    mkdir -p outputs
    report="outputs/build-speed-remote-$(hostname).txt"
    PATH="$(dirname "$server"):$PATH" "$python" benchmarks/build_speed.py --params params/gpu-reference.yaml \
      "${source_args[@]}" ${bundle:+--plain-no-build-isolation} --start-redis --work "${WORK:-/tmp/build-speed-fleet}" \
      | tee "$report"
    "$python" -m playbook run --params params/gpu-tune.yaml "${source_args[@]}"
    echo "build speed: $report; the tuning report: outputs/<run>/tune-attempt-N.md"
    ;;
  *)
    sed -n '2,14p' "$0"
    exit 2
    ;;
esac
