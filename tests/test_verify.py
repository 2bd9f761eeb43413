from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from playbook.agreement import compare_logits
from playbook.children import run_child
from playbook.throughput import SweepPoint, layer_counts, plot_throughput, write_sweep_csv


def child_script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "fake_child.py"
    script.write_text(textwrap.dedent(body))
    return script


def test_crash_becomes_a_process_crash_finding(tmp_path):
    script = child_script(tmp_path, """
        import ctypes, sys
        print("llama_model_load_from_file_impl: loading model", file=sys.stderr, flush=True)
        ctypes.string_at(0)
    """)
    outcome = run_child([], tmp_path, tmp_path / "crash.log", 30, script=script)
    assert outcome.status == "crash" and outcome.signal_name == "SIGSEGV"
    assert "playbook: child died by signal SIGSEGV" in (tmp_path / "crash.log").read_text()
    assert "process-crash" in [f["id"] for f in outcome.findings]


def test_hang_is_killed_by_the_watchdog(tmp_path):
    script = child_script(tmp_path, "import time\ntime.sleep(60)\n")
    outcome = run_child([], tmp_path, tmp_path / "hang.log", 2, script=script)
    assert outcome.status == "hang" and outcome.duration_s < 30
    assert "gpu-hang" in [f["id"] for f in outcome.findings]


def test_result_and_offload_are_read_from_the_child(tmp_path):
    script = child_script(tmp_path, """
        import json, sys
        print("load_tensors: offloaded 17/17 layers to GPU", file=sys.stderr)
        print("PLAYBOOK_RESULT " + json.dumps({"answer": 42}))
    """)
    outcome = run_child([], tmp_path, tmp_path / "ok.log", 30, script=script)
    assert outcome.status == "ok" and outcome.result == {"answer": 42}
    assert (outcome.offloaded_layers, outcome.offloadable_layers) == (17, 17)
    assert outcome.gpu_memory_mib is None  # no device buffers in this log
    assert outcome.findings == []


def test_import_error_is_diagnosed(tmp_path):
    script = child_script(tmp_path, """
        raise OSError("libcudart.so.12: cannot open shared object file: No such file or directory")
    """)
    outcome = run_child([], tmp_path, tmp_path / "err.log", 30, script=script)
    assert outcome.status == "error"
    assert "shared-library-not-found" in [f["id"] for f in outcome.findings]


def test_child_imports_the_wheel_from_its_own_folder(tmp_path):
    site = tmp_path / "site"
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("WHERE = __file__\n")
    script = child_script(tmp_path, """
        import json, os, llama_cpp
        print("PLAYBOOK_RESULT " + json.dumps({"where": llama_cpp.WHERE, "cwd": os.getcwd()}))
    """)
    outcome = run_child([], site, tmp_path / "where.log", 30, script=script)
    assert outcome.result["where"].startswith(str(site))
    assert outcome.result["cwd"] != str(Path.cwd())


@pytest.mark.parametrize(
    "n_layer, requested, offload, expected",
    [(16, [], True, [0, 4, 8, 13, 17]), (16, [], False, [0]), (16, [17, 0, 17], True, [0, 17]), (4, [], True, [0, 1, 2, 4, 5])],
)
def test_layer_counts(n_layer, requested, offload, expected):
    assert layer_counts(n_layer, requested, offload) == expected


def test_logit_comparison(tmp_path):
    rng = np.random.default_rng(0)
    cpu = rng.normal(size=(64, 100)).astype(np.float32)
    cpu.tofile(tmp_path / "cpu.f32")
    (cpu + rng.normal(scale=1e-3, size=cpu.shape).astype(np.float32)).tofile(tmp_path / "close.f32")
    rng.normal(size=cpu.shape).astype(np.float32).tofile(tmp_path / "wrong.f32")
    close = compare_logits(tmp_path / "cpu.f32", tmp_path / "close.f32", 100, "Q8_0")
    assert close.ok and close.relative_error < 1e-2 and close.top1_agreement > 0.95
    wrong = compare_logits(tmp_path / "cpu.f32", tmp_path / "wrong.f32", 100, "Q8_0")
    assert not wrong.ok and wrong.relative_error > 1


def test_csv_and_plot(tmp_path):
    points = [SweepPoint(0, "ok", 0, 100.0, 2.0, 10.0, 0.5, 0.1), SweepPoint(17, "ok", 17, 900.0, 5.0, 300.0, 3.0, 0.2),
              SweepPoint(8, "crash")]
    csv = write_sweep_csv(points, tmp_path / "throughput.csv")
    assert csv.read_text().splitlines()[0].startswith("n_gpu_layers,status,offloaded_layers,pp_tokens_per_s")
    paths = plot_throughput(points, "test", tmp_path / "throughput")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)


def test_a_library_missing_from_the_loader_path_is_named(tmp_path):
    """A real dynamic-loader failure: a library whose dependency is not on the loader path (no rpath)."""
    import shutil
    import subprocess

    from playbook.children import CHILD_SCRIPT

    if not shutil.which("cc"):
        pytest.skip("needs a C compiler")
    site = tmp_path / "site"
    lib = site / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "dep.c").write_text("int dep_answer(void) { return 42; }\n")
    (tmp_path / "main.c").write_text("int dep_answer(void);\nint llama_answer(void) { return dep_answer(); }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libcudart.so.12"), str(tmp_path / "dep.c")],
                   check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libllama.so"), str(tmp_path / "main.c"),
                    "-L", str(lib), "-l:libcudart.so.12"], check=True)
    (site / "llama_cpp" / "__init__.py").write_text(
        "import ctypes, pathlib\n"
        "_lib = ctypes.CDLL(str(pathlib.Path(__file__).parent / 'lib' / 'libllama.so'))\n"
    )
    outcome = run_child(["probe"], site, tmp_path / "probe.log", 60, script=CHILD_SCRIPT)
    assert outcome.status == "error"
    assert "libcudart.so.12: cannot open shared object file" in (tmp_path / "probe.log").read_text()
    assert outcome.findings[0]["id"] == "shared-library-not-found"


def test_gpu_memory_is_read_from_llama_cpp_log():
    from pathlib import Path as _Path

    log = (_Path(__file__).resolve().parent.parent / "outputs" / "reference" / "20261122T012240Z-vm" / "verify-logs"
           / "attempt-1" / "bench-ngl-17.log").read_text()
    from playbook.children import gpu_memory_mib

    assert gpu_memory_mib(log) == round(1052.66 + 24.00 + 66.50, 2)  # model, KV and compute on CUDA0
    assert gpu_memory_mib("load_tensors:   CPU_Mapped model buffer size =    66.41 MiB") is None
