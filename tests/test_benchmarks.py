import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WITH_LLAMA_BENCH = ROOT / "outputs" / "reference" / "20261122T012240Z-vm"


def test_throughput_table_of_a_reference_run():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "throughput_table.py"), str(WITH_LLAMA_BENCH)],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    ngl, pp, tg, bench_pp, bench_tg, pp_ratio, tg_ratio, overhead, gpu_mib, share = rows["17"]
    assert float(pp_ratio) > 0.95 and float(tg_ratio) > 0.95  # within 5% of llama-bench at full offload
    assert abs(float(overhead)) < 0.05  # ms per generated token
    assert float(gpu_mib) == 1143.2 and 0 < float(share) < 100
    assert float(rows["0"][8]) < float(gpu_mib)  # with 0 layers only compute buffers sit on the GPU
