#!/usr/bin/env python3
"""How long `cuda.toolkit: pypi:<release>` takes: download and assembly into an empty cache, then reuse.

    python benchmarks/pypi_toolkit.py [RELEASE] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playbook.toolkits import pypi


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("release", nargs="?", default="13.0")
    parser.add_argument("--cache", type=Path, help="default: a new temporary folder (a cold cache)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pypi-toolkit-") as tmp:
        cache = args.cache or Path(tmp)
        request = pypi.full_request(f"pypi:{args.release}")
        wheels = pypi.release(args.release).wheels
        size = 0
        started = time.monotonic()
        cold = pypi.provision(request, cache)
        cold_s = time.monotonic() - started
        for component in request.components:
            size += (pypi.toolkits_dir(cache) / "wheels" / wheels[component].file).stat().st_size
        started = time.monotonic()
        warm = pypi.provision(request, cache)
        warm_s = time.monotonic() - started
        root_bytes = sum(p.stat().st_size for p in Path(cold.root).rglob("*") if p.is_file() and not p.is_symlink())
        print(f"CUDA {args.release}: {len(request.components)} wheels, {size / 1e6:.0f} MB downloaded, "
              f"root {root_bytes / 1e6:.0f} MB")
        print(f"  empty cache: {cold_s:.1f} s (download and assembly; reused={cold.reused})")
        print(f"  second run:  {warm_s:.2f} s (reused={warm.reused})")


if __name__ == "__main__":
    main()
