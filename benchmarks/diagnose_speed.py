"""How long ``playbook diagnose`` takes on a large log.

Writes a log of SIZE MB (default 50) from real lines, repeated, then times ``diagnose_file`` on it (as the
command line calls it) and prints the seconds. Two logs:

* ``build``: the lines of the healthy build logs (tests/data/clean), with one real failure example at its
  end, as a long verbose build that failed at the last step looks;
* ``dense``: lines drawn at random from every failure example and every log of the corpus's train part
  (never its test part), so nearly every line holds an error word;
* ``unique``: the ``build`` log with a running number at the end of every line, so no two lines are alike
  (diagnose searches each distinct line once: this is its worst case).

    python benchmarks/diagnose_speed.py [SIZE_MB]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from playbook.knowledge.failures import diagnose_file

DATA = REPO / "tests" / "data"


def _lines(paths: list[Path]) -> list[str]:
    lines = []
    for path in paths:
        body = path.read_text(encoding="utf-8", errors="replace").split("\n")
        lines += [line for line in body if not line.startswith(("# source:", "# expected:"))]
    return lines


def write_log(path: Path, lines: list[str], size: int, tail: list[str], seed: int, numbered: bool = False) -> None:
    chooser = random.Random(seed)
    written = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size:
            chunk = "\n".join(chooser.choice(lines) + (f" #{written + i}" if numbered else "")
                              for i in range(1000)) + "\n"
            out.write(chunk)
            written += len(chunk.encode("utf-8"))
        out.write("\n".join(tail) + "\n")


def main(size_mb: float) -> None:
    size = int(size_mb * 1e6)
    examples = sorted((DATA / "failures").glob("*/*.txt"))
    train = sorted((DATA / "corpus" / "train").glob("*/*.txt"))
    failure = (DATA / "failures" / "cublas-missing" / "configure-cuda13-without-cublas.txt")
    build = _lines(sorted((DATA / "clean").glob("*.txt")))
    logs = {
        "build": (build, _lines([failure]), False),
        "dense": (_lines(examples + train), [], False),
        "unique": (build, _lines([failure]), True),
    }
    print(f"diagnose on a {size_mb:g} MB log ({len(examples)} failure examples, {len(train)} train logs as line source)")
    with tempfile.TemporaryDirectory() as folder:
        for name, (lines, tail, numbered) in logs.items():
            log = Path(folder) / f"{name}.log"
            write_log(log, lines, size, tail, seed=1, numbered=numbered)
            start, cpu = time.perf_counter(), time.process_time()
            findings = diagnose_file(log, detect_failure=True)
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            ids = ", ".join(f.id for f in findings[:3]) + (" ..." if len(findings) > 3 else "")
            print(f"  {name:6s} {log.stat().st_size / 1e6:6.1f} MB  {seconds:6.2f} s ({cpu:5.2f} s CPU)  {len(findings)} findings: {ids}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="logs: build (healthy build lines, one failure at the end), dense (failure "
                                            "and train-log lines), unique (build with every line made distinct)")
    parser.add_argument("size_mb", nargs="?", type=float, default=50.0, metavar="SIZE_MB",
                        help="size of each log in MB (default: 50)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args().size_mb)
