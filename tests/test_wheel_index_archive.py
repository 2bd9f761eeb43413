"""The second-machine benchmark's archive (benchmarks/wheel_index.py): both cases in one run, the ratio printed
is the ratio of the two times, and the goal line says what the times say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ARCHIVE = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "wheel-index-cpu-vm.txt"
GOAL_S = 60.0


def read_cases(text: str) -> dict[str, tuple[float, str]]:
    """case letter -> (wall seconds, ok column) from the table the benchmark prints."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^\((?P<case>[ab])\) .*?\s(?P<wall>\d+\.\d)\s+(?P<ratio>\d+\.\d{3})\s+(?P<ok>yes|no)$", line)
        if match:
            found[match["case"]] = (float(match["wall"]), match["ok"])
    return found


def test_the_archive_holds_both_cases_and_its_goal_line_follows_from_them():
    if not ARCHIVE.is_file():
        pytest.skip(f"{ARCHIVE.name} is not archived yet: run nice python benchmarks/wheel_index.py on the 2-core VM")
    text = ARCHIVE.read_text(encoding="utf-8")
    cases = read_cases(text)
    assert set(cases) == {"a", "b"}, text
    (build_s, _), (install_s, ok) = cases["a"], cases["b"]
    ratio = re.search(r"\(b\) / \(a\) = (\d+\.\d{3})", text)
    assert ratio and abs(float(ratio[1]) - install_s / build_s) < 0.002
    met = ok == "yes" and install_s <= GOAL_S
    assert f"goal (b) <= {GOAL_S:.0f} s: {'met' if met else 'NOT met'}" in text


def test_the_reader_takes_the_table_the_benchmark_prints():
    sample = ("case wall s ratio ok\n(a) playbook, cold build (detect, configure, build, verify)    912.0   1.000  yes\n"
              "(b) second machine: new venv, empty caches, index only         41.0   0.045  yes\n")
    assert read_cases(sample) == {"a": (912.0, "yes"), "b": (41.0, "yes")}
