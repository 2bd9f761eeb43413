from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from playbook.verify.launcher import run_child


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
    assert "process-crash" in [f.id for f in outcome.findings]


def test_hang_is_killed_by_the_watchdog(tmp_path):
    script = child_script(tmp_path, "import time\ntime.sleep(60)\n")
    outcome = run_child([], tmp_path, tmp_path / "hang.log", 2, script=script)
    assert outcome.status == "hang" and outcome.duration_s < 30
    assert "gpu-hang" in [f.id for f in outcome.findings]


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
    assert "shared-library-not-found" in [f.id for f in outcome.findings]


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


def test_a_library_missing_from_the_loader_path_is_named(tmp_path):
    """A real dynamic-loader failure: a library whose dependency is not on the loader path (no rpath)."""
    import shutil
    import subprocess

    from playbook.verify.launcher import CHILD_SCRIPT

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
    assert outcome.findings[0].id == "shared-library-not-found"


def test_gpu_memory_is_read_from_llama_cpp_log():
    from pathlib import Path as _Path

    log = (_Path(__file__).resolve().parents[2] / "outputs" / "reference" / "20261122T012240Z-vm" / "verify-logs"
           / "attempt-1" / "bench-ngl-17.log").read_text()
    from playbook.verify.launcher import gpu_memory_mib

    assert gpu_memory_mib(log) == round(1052.66 + 24.00 + 66.50, 2)  # model, KV and compute on CUDA0
    assert gpu_memory_mib("load_tensors:   CPU_Mapped model buffer size =    66.41 MiB") is None
