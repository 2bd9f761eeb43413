#!/usr/bin/env bash
# The GPU acceptance gate: the README's GPU route on a fresh GPU machine, in one command of at most 10 minutes.
#
#   scripts/gpu-acceptance.sh DEST [COMMIT]
#
# It runs params/gpu-reference.yaml (CUDA for the detected GPU, a 1B Q8_0 synthetic GGUF, llama-bench beside
# the binding) from this checkout, with the environment exactly as the machine has it, and exits 0 only when the
# CUDA wheel was built on the first attempt and passed verify with no repair. DEST receives the verdict
# (gpu-acceptance.json) and the run folder packed as <run id>.tar.xz (without the wheel) and the children's logs as
# <run id>.verify-logs.tar.xz, to unpack under outputs/reference/.
# COMMIT is the playbook's commit, recorded in the verdict (a copied checkout may have no .git to ask).
#
# An offline machine needs the offline bundle: BUNDLE=path, else .carry/bundle, else .carry/bundle.tar.xz
# unpacked there. Make it where pip reaches an index:
#   playbook bundle .carry/bundle --python 3.12 --exclude-present params/present/gpu-machine.txt
# A machine with an index needs no bundle: the sdist is downloaded and checked against its sha256.
# State that outlives the run (the bundle's installed wheels, caches, run folders) goes under WORK
# (default /tmp/playbook-acceptance). PYTHON picks the interpreter (default python3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest="${1:?usage: $0 DEST [COMMIT]}"
commit="${2:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
python="${PYTHON:-python3}"
work="${WORK:-/tmp/playbook-acceptance}"
limit_s="${ACCEPTANCE_LIMIT_S:-540}"  # the chain's own limit, so that the verdict and archive still get written
mkdir -p "$dest" "$work/runs"
dest="$(cd "$dest" && pwd)"
log() { echo "[gpu-acceptance $(date -u +%H:%M:%S)] $*"; }

bundle="${BUNDLE:-$PWD/.carry/bundle}"
if [ ! -f "$bundle/BUNDLE.json" ] && [ -f .carry/bundle.tar.xz ] && [ -z "${BUNDLE:-}" ]; then
  log "unpacking .carry/bundle.tar.xz"
  tar -C .carry -xJf .carry/bundle.tar.xz
fi
source_args=()
if [ -f "$bundle/BUNDLE.json" ]; then
  site="$work/site"
  if [ ! -f "$site/.installed" ]; then
    log "installing the bundle's wheels into $site (no index needed)"
    "$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" "$bundle"/wheels/*.whl \
      || { log "installing the bundle's wheels failed"; exit 1; }
    touch "$site/.installed"
  fi
  export PYTHONPATH="$site:$PWD" PATH="$site/bin:$PATH"
  source_args=(--set source.kind=path --set "source.path=$bundle")
else
  log "no offline bundle: the playbook must already be installed and the sdist reachable"
  export PYTHONPATH="$PWD"
fi

log "$(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"
log "environment as found: CC=${CC:-} CXX=${CXX:-} CUDAHOSTCXX=${CUDAHOSTCXX:-}"
started=$(date +%s)
timeout --signal=INT --kill-after=30 "$limit_s" \
  "$python" -m playbook run --params params/gpu-reference.yaml "${source_args[@]}" \
  --set "build.cache_dir=$work/cache" --output "$work/runs"
log "playbook run: exit status $? after $(( $(date +%s) - started )) s"

run="$(ls -d "$work"/runs/*/ 2>/dev/null | tail -1)"
[ -n "$run" ] || { log "no run folder was written"; exit 1; }
"$python" -m playbook report "$run" > /dev/null 2>&1 || log "the HTML report could not be written"
"$python" -m playbook.interfaces.acceptance "$run" --commit "$commit" --write "$dest/gpu-acceptance.json"
verdict=$?
# The archive as outputs/reference/ keeps runs: everything but the wheel (its sha256 is in build-attempt-N.json),
# the children's logs packed apart; its manifest amended to say so, so that `playbook check` passes on the archive
id="$(basename "$run")"
stage="$work/archive/$id"
rm -rf "$stage" && mkdir -p "$work/archive" && cp -r "$run" "$stage" && rm -rf "$stage/wheelhouse" "$stage/verify-logs"
"$python" -c 'import sys; from pathlib import Path; from playbook.runfolder.integrity import amend_manifest
amend_manifest(Path(sys.argv[1]), ["wheelhouse/*", "verify-logs/*"], "archived without the wheel (its sha256 stays "
               f"listed) and with verify-logs/ packed beside the folder as {sys.argv[2]}.verify-logs.tar.xz")' \
  "$stage" "$id" || log "the archive's manifest could not be amended"
tar -C "$work/archive" -cJf "$dest/$id.tar.xz" "$id"
[ ! -d "$run/verify-logs" ] || tar -C "$run" -cJf "$dest/$id.verify-logs.tar.xz" verify-logs
log "archived $id in $dest: $(du -ch "$dest/$id"*.tar.xz | tail -1 | cut -f1); unpack $id.tar.xz under outputs/reference/"
exit "$verdict"
