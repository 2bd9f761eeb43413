"""A CUDA wheel verified on a machine without a GPU (a CI or Docker builder): llama_supports_gpu_offload()
is False there for any wheel, the children print the CUDA backend's 'no device' lines, and verify must
neither call the wheel CPU-only nor fail on those lines; it lists the machine code instead and says
which GPU checks it skipped. The children, the install and cuobjdump are stand-ins here."""

from __future__ import annotations

import subprocess

import pytest

from playbook.knowledge.failures import finding_for
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.verify import step
from playbook.verify.cuda_elf import CudaElf
from playbook.verify.launcher import ChildOutcome
from playbook.verify.step import VerifyRequest, VerifyTarget
from playbook.verify.units import import_probe, machine_code, model_file, offload_sweep

BENCH = {"pp": {"tokens_per_s_median": 100.0, "tokens_per_s_stdev": 1.0},
         "tg": {"tokens_per_s_median": 10.0, "tokens_per_s_stdev": 0.1}, "load_s": 0.1}


@pytest.fixture()
def stand_ins(monkeypatch, tmp_path):
    calls: list[list[str]] = []

    def run_child(args, site, log, timeout, python=None, expected=(), extra_env=None, **kwargs):
        calls.append(list(args))
        if args[0] == "probe":
            return ChildOutcome("ok", 0, 0.1, str(log), {"module": str(site / "llama_cpp" / "__init__.py"),
                                                         "version": "0.3.36", "supports_gpu_offload": False,
                                                         "library": str(site / "llama_cpp" / "lib" / "libllama.so")})
        found = [finding_for("driver-too-old", "ggml_cuda_init: failed to initialize CUDA: CUDA driver version is "
                             "insufficient for CUDA runtime version", stage="load")]
        return ChildOutcome("ok", 0, 0.1, str(log), BENCH, findings=[f for f in found if f.id not in expected],
                            offloaded_layers=0)

    monkeypatch.setattr(step, "install_wheel", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
    monkeypatch.setattr(import_probe, "run_child", run_child)
    monkeypatch.setattr(offload_sweep, "run_child", run_child)
    monkeypatch.setattr(model_file, "prepare_model", lambda *a, **k: tmp_path / "model.gguf")
    monkeypatch.setattr("playbook.verify.synthetic_gguf.describe_gguf",
                        lambda path: {"n_layer": 2, "file_size_bytes": 1000})
    monkeypatch.setattr(import_probe, "check_required_symbols", lambda *a, **k: [])
    return calls


def verify(tmp_path, elf: CudaElf, monkeypatch):
    cuda = machine_code.LISTERS["cuda"]
    monkeypatch.setitem(machine_code.LISTERS, "cuda", machine_code.Lister(cuda.tool, lambda *a, **k: elf, cuda.record))
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")
    target = VerifyTarget(expect_gpu=True, gpu_present=False, backend="cuda", gpu_targets="86;120", toolkit="/toolkit")
    return step.run_verify(VerifyRequest(Layout(tmp_path / "run"), wheel, load_params(), target, tmp_path,
                                         tmp_path / "cache"), log=lambda *_: None)


def test_a_cuda_wheel_without_a_gpu_is_checked_on_the_cpu_and_by_its_machine_code(stand_ins, tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    elf = CudaElf(library="/site/llama_cpp/lib/libggml-cuda.so", architectures=["sm_86", "sm_120a"],
                  expected=["sm_86", "sm_120"])
    result = verify(tmp_path, elf, monkeypatch)
    assert result.ok, result.findings
    assert result.layer_counts == [0] and [c[0] for c in stand_ins] == ["probe", "bench"]
    assert "no NVIDIA GPU on this machine" in result.gpu_skipped and result.agreement is None
    assert "machine code for sm_86, sm_120a" in result.summary and "GPU checks skipped" in result.summary


def test_a_wheel_without_ggml_cuda_is_still_called_cpu_only(stand_ins, tmp_path, monkeypatch):
    (tmp_path / "run").mkdir()
    result = verify(tmp_path, CudaElf(error="no ggml-cuda library under /site", expected=["sm_86"]), monkeypatch)
    assert not result.ok and "cpu-only-build" in [f.id for f in result.findings]
    assert not result.gpu_skipped
