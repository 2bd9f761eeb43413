"""The llama.cpp builds of a pytest session: each build log under pytest's temporary folder, with the seconds pip
took and what ccache counted. Run it after the slow tier (or CI) and before pytest removes the folder:

    python benchmarks/slow_tier_builds.py /tmp/pytest-of-$USER/pytest-N

Only builds that compiled more than MIN_COMPILES files are listed (the fault tests build a one-file project), and
not the archived runs' logs that tests copy from outputs/reference/.
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[1] / "outputs" / "reference"

CCACHE = re.compile(r"^playbook: ccache: (\d+) hits, (\d+) misses", re.MULTILINE)
EXITED = re.compile(r"^playbook: pip exited with (\d+) after ([\d.]+) s", re.MULTILINE)
MIN_COMPILES = 50


def builds(basetemp: Path) -> list[tuple[str, float, int, int]]:
    """(test folder, seconds, ccache hits, misses) of each llama.cpp build log, in the order they ended."""
    archived = {hashlib.sha256(p.read_bytes()).hexdigest() for p in REFERENCE.glob("**/build-attempt-*.log")}
    found = []
    for log in sorted(basetemp.glob("*/**/build-attempt-*.log"), key=lambda p: p.stat().st_mtime):
        if (basetemp / log.relative_to(basetemp).parts[0]).is_symlink():  # pytest's "...current" links
            continue
        if hashlib.sha256(log.read_bytes()).hexdigest() in archived:
            continue
        text = log.read_text(errors="replace")
        counted, exited = CCACHE.findall(text), EXITED.findall(text)
        if not counted or not exited or int(exited[-1][0]) != 0:
            continue
        hits, misses = map(int, counted[-1])
        if hits + misses > MIN_COMPILES:
            found.append((log.relative_to(basetemp).parts[0], float(exited[-1][1]), hits, misses))
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("basetemp", type=Path, help="pytest's temporary folder of the session")
    args = parser.parse_args(argv)
    for folder, seconds, hits, misses in builds(args.basetemp):
        print(f"  {folder:36s} {seconds:7.1f} s  {hits:4d} hits {misses:4d} misses")


if __name__ == "__main__":
    main()
