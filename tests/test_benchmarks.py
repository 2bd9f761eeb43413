import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WITH_LLAMA_BENCH = ROOT / "outputs" / "reference" / "20261122T012240Z-vm"


def test_throughput_table_of_a_reference_run():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput_table.py"), str(WITH_LLAMA_BENCH)],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    full = rows["17"]
    assert float(full[5]) > 0.95 and float(full[6]) > 0.95  # pp and tg ratio to llama-bench at full offload
    assert full[7].endswith("%")
