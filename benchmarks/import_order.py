"""Does importing numpy before llama_cpp change whether a model loads? (seen: a segfault on a GPU machine)

Runs each order in its own child process with faulthandler on, and prints how each ended.

    python benchmarks/import_order.py SITE_DIR MODEL.gguf [N_GPU_LAYERS]

SITE_DIR is the folder the wheel was installed into (verify's site folder).
"""

from __future__ import annotations

import os
import subprocess
import sys

ORDERS = {
    "llama_cpp first": "import llama_cpp, numpy",
    "numpy first": "import numpy, llama_cpp",
    "numpy first, one BLAS thread": "import numpy, llama_cpp",
}
LOAD = (
    "; m = llama_cpp.Llama(model_path={model!r}, n_gpu_layers={ngl}, n_ctx=256, verbose=True)"
    "; print('tokens:', m.tokenize(b'hello world')); print('LOADED OK', flush=True)"
)


def main(site_dir: str, model: str, ngl: int) -> None:
    for name, imports in ORDERS.items():
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([site_dir, os.environ.get("PYTHONPATH", "")])}
        if "one BLAS thread" in name:
            env["OPENBLAS_NUM_THREADS"] = "1"
        code = imports + LOAD.format(model=model, ngl=ngl)
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], env=env, capture_output=True,
                              text=True, timeout=300, cwd="/", check=False)
        ended = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        print(f"== {name}: {ended}")
        tail = (proc.stdout + proc.stderr).strip().splitlines()
        print("\n".join(line for line in tail[-12:]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else -1)
