import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WITH_LLAMA_BENCH = ROOT / "outputs" / "reference" / "20261122T012240Z-vm"


def test_throughput_table_of_a_reference_run():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput_table.py"), str(WITH_LLAMA_BENCH)],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    *_, pp_ratio, tg_ratio, overhead, gpu_mib, share = rows["17"]
    assert abs(float(pp_ratio) - 1) < 0.05 and abs(float(tg_ratio) - 1) < 0.05  # within 5% of llama-bench
    assert abs(float(overhead)) < 0.05  # ms per generated token
    assert float(gpu_mib) == 1143.2 and 0 < float(share) < 100
    assert float(rows["0"][8]) < float(gpu_mib)  # with 0 layers only compute buffers sit on the GPU


def test_build_speed_counts_the_ninja_steps_of_a_plain_pip_log():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import build_speed
    finally:
        sys.path.pop(0)
    log = "  [1/140] g++ -c a.cpp\n  [2/140] g++ -c b.cpp\nnot progress [3/9]\n  [140/140] Linking CXX shared library\n"
    assert build_speed.ninja_steps(log) == "140 ninja steps"
    assert build_speed.ninja_steps("no ninja here") == ""


def test_throughput_table_of_the_7b_reference_run():
    run = ROOT / "outputs" / "reference" / "20261122T031414Z-vm"
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput_table.py"), str(run)],
                         capture_output=True, text=True, check=True).stdout
    assert "synthetic-llama-7b-Q4_0" in out and "tg limit 1270 t/s" in out
    rows = {line.split()[0]: [float(x) for x in line.split()[1:9]] for line in out.splitlines()[2:] if line.strip()}
    assert sorted(map(int, rows)) == [0, 7, 13, 20, 26, 33]
    full = rows["33"]
    assert 0.9 < full[4] < 1.1 and 0.9 < full[5] < 1.1  # pp and tg within 10% of llama-bench
    assert full[1] > 10 * rows["0"][1]  # generation with every layer on the GPU is >10x none


def diagnose_speed_rows(text: str) -> dict[str, tuple[float, float, float, str]]:
    """diagnose_speed.py's lines: log kind -> (MB, wall seconds, CPU seconds, first finding)."""
    import re

    rows = {}
    for match in re.finditer(r"^\s+(\w+)\s+([\d.]+) MB\s+([\d.]+) s \(\s*([\d.]+) s CPU\)\s+\d+ findings: ([\w-]+)",
                             text, re.MULTILINE):
        rows[match.group(1)] = (float(match.group(2)), float(match.group(3)), float(match.group(4)), match.group(5))
    return rows


def test_the_diagnose_speed_figures_quoted_come_from_the_archived_output():
    """benchmarks/README.md quotes results/diagnose-speed-cpu-vm.txt's own numbers, for logs of 50 MB."""
    rows = diagnose_speed_rows((ROOT / "benchmarks" / "results" / "diagnose-speed-cpu-vm.txt").read_text())
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    assert set(rows) == {"build", "dense", "unique"}
    for kind, (size, wall, cpu, first) in rows.items():
        assert size >= 50.0, kind
        assert f"{wall:.2f} s" in readme and f"{cpu:.2f} s CPU" in readme, kind
    assert rows["build"][3] == rows["unique"][3] == "cublas-missing"  # the failure at the end is found


@pytest.mark.long
def test_diagnose_speed_takes_help_and_a_size():
    """Issue 34: `diagnose_speed.py --help` crashed (ValueError: could not convert string to float)."""
    script = str(ROOT / "benchmarks" / "diagnose_speed.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "SIZE_MB" in shown.stdout and "default: 50" in shown.stdout
    refused = subprocess.run([sys.executable, script, "big"], capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "invalid float value: 'big'" in refused.stderr
    small = subprocess.run([sys.executable, script, "0.02"], capture_output=True, text=True, timeout=120, check=True)
    rows = diagnose_speed_rows(small.stdout)
    assert set(rows) == {"build", "dense", "unique"} and rows["build"][3] == "cublas-missing", small.stdout
