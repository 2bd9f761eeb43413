#!/usr/bin/env bash
# Why a CPU(+RPC) wheel built on a GPU machine crashed at model load inside print_info's std::stringstream
# (2026-11-25, twice): which compiler and C++ runtime the build used, what each of the wheel's libraries
# needs and defines, which libstdc++ the process maps, and whether the same source built by the system's g++
# loads, with llama_cpp or numpy imported first.
# Usage, in the repository root with the offline bundle (.carry/bundle.tar.xz): PYTHON=... scripts/gpu-cxx-runtime-check.sh
set -uo pipefail
python="${PYTHON:-python3}"
work=/tmp/cxx-check
rm -rf "$work" && mkdir -p "$work"
log() { echo "== [$(date -u +%H:%M:%S)] $*"; }
[ -f .carry/bundle/BUNDLE.json ] || tar -C .carry -xJf .carry/bundle.tar.xz
bundle="$PWD/.carry/bundle"
"$python" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$bundle/site" "$bundle"/wheels/*.whl
export PYTHONPATH="$bundle/site:$PWD" PATH="$bundle/site/bin:$PATH"

log "compilers on PATH"; which -a gcc g++ c++ cc; for cxx in g++ /usr/bin/g++; do "$cxx" --version 2>&1 | head -1; done
log "g++ configuration"; g++ -v 2>&1 | grep -E "Configured with|Thread model" | cut -c1-600
for cxx in g++ /usr/bin/g++; do
  log "$cxx links: $("$cxx" -print-file-name=libstdc++.so) and $("$cxx" -print-file-name=libstdc++.a)"
done
ls -la "$(dirname "$(g++ -print-file-name=libstdc++.so)")"/libstdc++* 2>&1 | head
g++ -dumpspecs | grep -n "static-libstdc++\|static-libgcc" | head

log "a tiny shared library with a std::stringstream, built by each compiler and called from $python"
printf '%s\n' '#include <sstream>' '#include <string>' '#include <cstring>' \
  'extern "C" int format_number(int n, char *out, int size) { std::stringstream ss; ss << "n=" << n; std::string s = ss.str(); std::strncpy(out, s.c_str(), size); return (int)s.size(); }' > "$work/ss.cpp"
for cxx in g++ /usr/bin/g++; do
  lib="$work/libss-$(echo "$cxx" | tr / _).so"
  "$cxx" -shared -fPIC -O2 -o "$lib" "$work/ss.cpp" && readelf -d "$lib" | grep NEEDED
  "$python" -c "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); b=ctypes.create_string_buffer(32); l.format_number(42,b,32); print('called:', b.value)" "$lib"; echo "exit $?"
done

"$python" - <<'PY'
from pathlib import Path
from playbook.verify.synthetic_gguf import ModelSpec, find_vocab_gguf, write_synthetic_gguf
write_synthetic_gguf(Path("/tmp/cxx-check/tiny.gguf"), ModelSpec("tiny", "Q8_0"), find_vocab_gguf(Path(".carry/bundle/source/llama_cpp_python-0.3.36")))
PY

# CMAKE_ARGS of the wheels (default: CPU + RPC, as the crashed client); IMPORT_ORDERS: llama_cpp first (as verify's
# children), numpy first (as the numpy-import-order entry's crash on an H200's CUDA wheel).
cmake_args="${WHEEL_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_RPC=ON -DLLAVA_BUILD=OFF}"
for label in ${LABELS:-default system}; do
  log "wheel ($cmake_args) built by the $label compiler"
  env=(CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=16)
  [ "$label" = system ] && env+=(CC=/usr/bin/gcc CXX=/usr/bin/g++)
  env "${env[@]}" timeout 300 "$python" -m pip wheel -q --no-build-isolation --no-deps --no-index \
    --find-links "$bundle/wheels" -w "$work/wheel-$label" "$bundle/source/llama_cpp_python-0.3.36" > "$work/build-$label.log" 2>&1
  echo "pip wheel exit $?"
  "$python" -m pip install -q --no-index --no-deps --target "$work/site-$label" "$work"/wheel-$label/*.whl
  for so in "$work/site-$label"/llama_cpp/lib/lib*.so; do
    echo "$(basename "$so"): needs $(readelf -d "$so" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')"
    echo "   defines $(nm -DC --defined-only "$so" 2>/dev/null | grep -c ' std::') std:: symbols, std::locale::classic(): $(readelf --dyn-syms -W "$so" | grep -c ' _ZNSt6locale7classicEv')"
  done
  for order in ${IMPORT_ORDERS:-llama_cpp numpy}; do
    PYTHONPATH="$work/site-$label:$PYTHONPATH" FIRST="$order" timeout 120 "$python" - > "$work/load-$label-$order-first.log" 2>&1 <<'PY'
import faulthandler, importlib, os
faulthandler.enable()
importlib.import_module(os.environ["FIRST"])
import numpy
from llama_cpp import Llama
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libstdc++" in line or "libgcc_s" in line})
print("mapped after import:", maps, flush=True)
llm = Llama(model_path="/tmp/cxx-check/tiny.gguf", n_gpu_layers=0, n_ctx=256, verbose=True)
print("loaded; tokens:", llm.tokenize(b"hello world"), flush=True)
PY
    echo "== $label compiler, $order imported first: load exit $?"; grep -E "^loaded|Segmentation|^mapped" "$work/load-$label-$order-first.log" | head -3
  done
done
[ -n "${OUT:-}" ] && cp "$work"/*.log "$OUT"/ 2>/dev/null
exit 0
