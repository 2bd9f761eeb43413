"""A CUDA wheel verified on a machine without a GPU (a CI or Docker builder): llama_supports_gpu_offload()
is False there for any wheel, the CUDA backend prints its 'no device' line when it initialises, and verify must
neither call the wheel CPU-only nor fail on that line; it lists the machine code instead and says which GPU
checks it skipped.

What runs for real: the wheel's install (pip, into the verify's own folder), the probe child and the symbols
child (playbook/child_scripts), as separate processes reading what they import. What stands in: the binding in
that wheel (a pure-Python llama_cpp that answers as a CUDA build does without a device: a real CUDA wheel cannot
be built or run on this CPU-only machine), the bench child's measurement (it needs a llama.cpp library, which
would have to be compiled), the model file, and cuobjdump's listing."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from playbook.knowledge.failures import finding_for
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.verify import step
from playbook.verify.cuda_elf import CudaElf
from playbook.verify.launcher import ChildOutcome
from playbook.verify.step import VerifyRequest, VerifyTarget
from playbook.verify.units import machine_code, model_file, offload_sweep
from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

BENCH = {"pp": {"tokens_per_s_median": 100.0, "tokens_per_s_stdev": 1.0},
         "tg": {"tokens_per_s_median": 10.0, "tokens_per_s_stdev": 0.1}, "load_s": 0.1}


# What a CUDA build's ggml prints to stderr when it initialises on a machine without an NVIDIA GPU.
NO_DEVICE = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected"
STAND_IN_BINDING = {
    "llama_cpp/__init__.py": "from . import llama_cpp\nfrom .llama_cpp import *  # noqa: F403\n__version__ = '0.3.36'\n",
    "llama_cpp/llama_cpp.py": (
        "import os, sys\n"
        f"sys.stderr.write({NO_DEVICE!r} + '\\n')\n"
        "class _Library:\n    _name = os.path.join(os.path.dirname(__file__), 'lib', 'libllama.so')\n"
        "_lib = _Library()\n"
        "def llama_supports_gpu_offload():\n    return False\n"
        "def llama_print_system_info():\n    return b'CPU : AVX2 = 1 | CUDA : ARCHS = 860,1200 | '\n"
        "def llama_backend_init():\n    pass\n"),
    "llama_cpp/lib/libllama.so": "",
}


def stand_in_wheel(folder: Path) -> Path:
    """A real wheel (pip installs it) whose llama_cpp stands in for a CUDA build's binding, named as the build names
    its wheel."""
    wheel = folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    info = "llama_cpp_python-0.3.36.dist-info"
    files = {**STAND_IN_BINDING,
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"}
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return wheel


@pytest.fixture()
def stand_ins(monkeypatch, tmp_path):
    """The bench child's measurement, the model and its description; the bench arguments are recorded."""
    calls: list[list[str]] = []

    def run_bench(args, site, log, timeout, python=None, expected=(), extra_env=None, **kwargs):
        calls.append(list(args))
        found = [finding_for("driver-too-old", "ggml_cuda_init: failed to initialize CUDA: CUDA driver version is "
                             "insufficient for CUDA runtime version", stage="load")]
        return ChildOutcome("ok", 0, 0.1, str(log), BENCH, findings=[f for f in found if f.id not in expected],
                            offloaded_layers=0)

    monkeypatch.setattr(offload_sweep, "run_child", run_bench)
    monkeypatch.setattr(model_file, "prepare_model", lambda *a, **k: tmp_path / "model.gguf")
    monkeypatch.setattr("playbook.verify.synthetic_gguf.describe_gguf",
                        lambda path: {"n_layer": 2, "file_size_bytes": 1000})
    return calls


def verify(tmp_path, elf: CudaElf, monkeypatch):
    cuda = machine_code.LISTERS["cuobjdump"]
    monkeypatch.setitem(machine_code.LISTERS, "cuobjdump", machine_code.Lister(cuda.tool, lambda *a, **k: elf, cuda.value_type))
    wheel = stand_in_wheel(tmp_path)
    target = VerifyTarget(expect_gpu=True, gpu_present=False, backend="cuda", machine_code="cuobjdump", gpu_targets="86;120", toolkit="/toolkit")
    # The symbols child looks the binding's function up in the installed wheel, for real.
    params = load_params(None, ["verify.required_symbols=[llama_cpp.llama_supports_gpu_offload]"])
    return step.run_verify(VerifyRequest(Layout(tmp_path / "run"), wheel, params, target, tmp_path,
                                         tmp_path / "cache"), log=lambda *_: None)


@pytest.mark.long
def test_a_cuda_wheel_without_a_gpu_is_checked_on_the_cpu_and_by_its_machine_code(stand_ins, tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    elf = CudaElf(library="/site/llama_cpp/lib/libggml-cuda.so", architectures=["sm_86", "sm_120a"],
                  expected=["sm_86", "sm_120"])
    result = verify(tmp_path, elf, monkeypatch)
    assert result.ok, result.findings
    assert result.measured(OFFLOAD_SWEEP).layer_counts == [0] and [c[0] for c in stand_ins] == ["bench"]
    layout = Layout(tmp_path / "run")
    probe_log = layout.unit_files(1, "probe").log().read_text()  # the real child's stderr: the binding's own no-device line
    assert NO_DEVICE in probe_log and "PLAYBOOK_RESULT" in probe_log
    assert 'PLAYBOOK_RESULT {"missing": {}}' in layout.unit_files(1, "symbols").log().read_text()  # the symbols child ran
    assert "no NVIDIA GPU on this machine" in result.measured(IMPORT_PROBE).gpu_skipped and result.measured(GPU_CPU_AGREEMENT) is None
    assert "machine code for sm_86, sm_120a" in result.summary and "GPU checks skipped" in result.summary


@pytest.mark.long
def test_a_wheel_without_ggml_cuda_is_still_called_cpu_only(stand_ins, tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    result = verify(tmp_path, CudaElf(error="no ggml-cuda library under /site", expected=["sm_86"]), monkeypatch)
    assert not result.ok and "cpu-only-build" in [f.id for f in result.findings]
    assert not result.measured(IMPORT_PROBE).gpu_skipped
