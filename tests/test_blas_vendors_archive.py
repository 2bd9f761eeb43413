"""The archived BLAS vendors measurement (benchmarks/results/blas-vendors-cpu-vm.txt, benchmarks/blas_vendors.py)
says what it measured and its table is its rounds' medians: the three wheels of one sdist, each checked by verify
(ggml-blas loaded with MKL's and OpenBLAS's device, none for the CPU wheel), measured at the commit of its
provenance line, every number in the table recomputed from the rounds above it, and docs/backends.md quoting it."""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import archive

sys.path.pop(0)

NAME = "blas-vendors-cpu-vm.txt"
TEXT = (archive.RESULTS / NAME).read_text(encoding="utf-8")
ROUND = re.compile(r"^  (?P<shape>\S+) round (?P<round>\d+) +(?P<wheel>\w+): pp512 +(?P<pp>[\d.]+) t/s", re.MULTILINE)
ROW = re.compile(r"^(?P<model>\S+-Q8_0) +(?P<numbers>[\d. ]+)$", re.MULTILINE)
WHEELS = ("mkl", "openblas", "cpu")


def rounds() -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {}
    for match in ROUND.finditer(TEXT):
        found.setdefault(match["shape"], {}).setdefault(match["wheel"], []).append(float(match["pp"]))
    return found


def table() -> dict[str, list[float]]:
    return {match["model"]: [float(n) for n in match["numbers"].split()] for match in ROW.finditer(TEXT)}


def test_it_measured_the_three_wheels_that_verify_checked_at_its_commit():
    recorded = archive.read(archive.RESULTS / NAME)
    assert recorded is not None
    assert f"# commit: {recorded.commit}\n" in TEXT  # the benchmark ran on the commit it is stamped with
    headers = {w: line for w in WHEELS for line in TEXT.splitlines() if line.startswith(f"# {w}: ")}
    assert "-DGGML_BLAS_VENDOR=Intel10_64lp" in headers["mkl"] and "device 'BLAS: MKL'" in headers["mkl"]
    assert "-DGGML_BLAS_VENDOR=OpenBLAS" in headers["openblas"] and "device 'BLAS: OpenBLAS'" in headers["openblas"]
    assert "GGML_BLAS" not in headers["cpu"] and "no ggml backend library of its own" in headers["cpu"]
    for line in headers.values():
        assert "-DGGML_NATIVE=OFF" in line
        splits = re.search(r"prompt graph in (\d+) splits", line)
        assert splits is None or int(splits[1]) > 1  # another backend than the CPU took operations


def test_the_table_is_the_medians_of_the_rounds():
    measured, rows = rounds(), table()
    assert set(rows) == {f"{shape}-Q8_0" for shape in measured} and {"tiny-Q8_0", "1b-Q8_0"} <= set(rows)
    for shape, by_wheel in measured.items():
        assert set(by_wheel) == set(WHEELS) and len({len(v) for v in by_wheel.values()}) == 1
        medians = {w: statistics.median(by_wheel[w]) for w in WHEELS}
        mkl, openblas, cpu, mkl_cpu, openblas_cpu, mkl_openblas = rows[f"{shape}-Q8_0"]
        # the rounds are printed to 0.1 t/s and the table from the unrounded rates: equal within that rounding
        for number, wheel in zip((mkl, openblas, cpu), WHEELS):
            assert abs(number - medians[wheel]) <= 0.051, (shape, wheel)
        for ratio, (top, bottom) in ((mkl_cpu, ("mkl", "cpu")), (openblas_cpu, ("openblas", "cpu")),
                                     (mkl_openblas, ("mkl", "openblas"))):
            assert abs(ratio - medians[top] / medians[bottom]) <= 0.01 * ratio, (shape, top, bottom)
        assert abs(mkl_cpu - mkl / cpu) <= 0.01 * mkl_cpu and abs(openblas_cpu - openblas / cpu) <= 0.01 * openblas_cpu


def test_the_docs_quote_the_archive():
    doc = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    for model, numbers in table().items():
        mkl, openblas, cpu = numbers[:3]
        assert f"{model}: oneMKL {mkl:.1f}, OpenBLAS {openblas:.1f}, CPU {cpu:.1f} t/s" in doc, model
