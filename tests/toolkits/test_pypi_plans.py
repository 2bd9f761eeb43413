"""Plans and repairs that use CUDA from PyPI: ``cuda.toolkit: pypi:<release>``, the proposal when the
system toolkit is unusable, and the remedies that add a component or move to another release."""

from __future__ import annotations

from pathlib import Path

from conftest import H100, make_facts, toolkit

from playbook.facts import Gpu, NvidiaDriver, Tool
from playbook.knowledge.failures import Finding
from playbook.params import load_params
from playbook.steps.configure import configure
from playbook.steps.repair import apply_remedies
from playbook.toolkits import pypi

DRIVER_580 = NvidiaDriver(True, "580.159.04", "13.0", "nvml")
RTX_5090 = Gpu(0, "NVIDIA GeForce RTX 5090", 32607, "12.0")


def finding(failure_id: str) -> Finding:
    return Finding(failure_id, failure_id, "evidence", 1, "", "", True)


def test_pypi_toolkit_plan_builds_without_a_gpu_for_two_architectures(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[], toolkits=[], driver=NvidiaDriver(False))
    params = load_params(None, ["backend=cuda", "cuda.toolkit=pypi:13.0", "cuda.architectures=86;120",
                                f"build.cache_dir={tmp_path}"])
    plan = configure(facts, params)
    assert not plan.blockers, plan.blockers
    assert plan.toolkit_request == pypi.full_request("pypi:13.0")
    root = pypi.root_for(plan.toolkit_request, tmp_path)
    assert plan.cuda_toolkit == str(root) and plan.env["CUDACXX"] == str(root / "bin" / "nvcc")
    assert plan.runtime_env["LD_LIBRARY_PATH"] == str(root / "lib")
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;120" in plan.cmake_args
    reason = next(d.reason for d in plan.decisions if d.what == "CUDA toolkit")
    assert "nvidia-cuda-nvcc==13.0.88" in reason and "nvidia-cublas==13.1.0.3" in reason


def test_usable_system_toolkit_stays_the_choice(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580)
    plan = configure(facts, load_params())
    assert plan.toolkit_request is None and plan.cuda_toolkit == "/usr/local/cuda"
    assert "pypi-toolkit-proposed" not in plan.warning_codes()


def test_toolkit_without_cublas_is_warned_with_the_remedy_of_its_own_release(this_machine):
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("13.0.88", cublas=False)], driver=NvidiaDriver(False))
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=90"]))
    assert not plan.blockers and "cublas-missing" in plan.warning_codes()
    text = " ".join(map(str, plan.warnings))
    assert "nvidia-cublas==13.1.0.3 (CUDA 13.0)" in text and "libcublas-dev-13-0" in text
    assert "12-4" not in text


def test_no_toolkit_at_all_proposes_the_newest_pypi_release_the_driver_runs(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[], driver=DRIVER_580)
    plan = configure(facts, load_params(None, ["backend=cuda"]))
    assert "cuda-toolkit-missing" in [b.code for b in plan.blockers]
    proposal = next(w for w in plan.warnings if w.code == "pypi-toolkit-proposed")
    assert "pypi:13.0" in proposal.message and "no CUDA toolkit found" in proposal.message


def test_toolkit_too_old_for_the_gpu_proposes_a_pypi_release(this_machine):
    facts = make_facts(this_machine, gpus=[RTX_5090], toolkits=[toolkit("12.4.131")],
                       driver=NvidiaDriver(True, "590.44.01", "13.1", "nvml"))
    plan = configure(facts, load_params())
    assert "cuda-arch-unsupported" in plan.warning_codes()
    proposal = next(w for w in plan.warnings if w.code == "pypi-toolkit-proposed")
    assert "pypi:13.1" in proposal.message and "sm_120" in proposal.message


def test_repair_adds_cublas_of_the_same_release_to_a_copy_of_the_toolkit(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("12.4.131", cublas=False)], driver=NvidiaDriver(False))
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=86"]))
    new = apply_remedies(plan, [finding("cublas-missing")], facts, cache_dir=tmp_path)
    assert new is not None and new.remedies_applied == ["cublas-missing"]
    assert new.toolkit_request == pypi.ToolkitRequest("12.4", ("cublas",), "/usr/local/cuda")
    root = Path(new.cuda_toolkit)
    assert root.parent == tmp_path / "toolkits" and new.env["CUDACXX"] == str(root / "bin" / "nvcc")
    assert pypi.release("12.4").wheels["cublas"].package == "nvidia-cublas-cu12"
    assert plan.env["CUDACXX"] == "/usr/local/cuda/bin/nvcc", "the earlier plan is left as it was"


def test_no_remedy_for_a_release_pypi_does_not_have(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("11.8.89", cublas=False)], driver=NvidiaDriver(False))
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=86"]))
    assert "cublas-missing" in [b.code for b in plan.blockers]
    assert apply_remedies(plan, [finding("cublas-missing")], facts, cache_dir=tmp_path) is None


def test_unsupported_architecture_without_a_gpu_moves_to_a_pypi_release(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("12.4.131")], driver=NvidiaDriver(False))
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=86;120"]))
    assert "cuda-arch-unsupported" in plan.warning_codes()
    new = apply_remedies(plan, [finding("cuda-arch-unsupported")], facts, cache_dir=tmp_path)
    assert new is not None and new.toolkit_request is not None and not new.toolkit_request.base
    assert new.toolkit_request.release == pypi.compiler_releases()[-1]


def test_host_compiler_too_new_moves_to_a_release_that_accepts_it(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("12.4.131")], driver=DRIVER_580)
    facts.compilers = [Tool("g++", True, "/usr/bin/g++", "14.2.0", "g++ (Debian 14.2.0-19) 14.2.0")]
    facts.environment = {}
    plan = configure(facts, load_params())
    assert "host-compiler-unsupported" in plan.warning_codes()
    new = apply_remedies(plan, [finding("host-compiler-unsupported")], facts, cache_dir=tmp_path)
    assert new is not None and new.toolkit_request == pypi.full_request("pypi:13.0")


def test_a_root_the_playbook_assembled_earlier_is_used_with_its_libraries(this_machine, tmp_path):
    root = tmp_path / "toolkits" / "cuda-13.0-0123456789ab"
    root.mkdir(parents=True)
    (root / pypi.MARKER).write_text("{}")
    cached = toolkit("13.0.88", root=str(root))
    facts = make_facts(this_machine, gpus=[], toolkits=[toolkit("13.0.88", cublas=False), cached],
                       driver=NvidiaDriver(False))
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.architectures=90"]))
    assert plan.cuda_toolkit == str(root), "a toolkit with cuBLAS is preferred over one without"
    assert plan.runtime_env["LD_LIBRARY_PATH"] == str(root / "lib") and plan.toolkit_request is None
    assert "cublas-missing" not in plan.warning_codes()


def test_without_driver_or_stub_the_driver_api_is_left_out(this_machine, tmp_path):
    facts = make_facts(this_machine, gpus=[], toolkits=[], driver=NvidiaDriver(False))
    facts.libcuda_paths = []
    plan = configure(facts, load_params(None, ["backend=cuda", "cuda.toolkit=pypi:13.0", "cuda.architectures=86;120",
                                               f"build.cache_dir={tmp_path}"]))
    assert "-DGGML_CUDA_NO_VMM=ON" in plan.cmake_args
    assert any(d.what == "CUDA driver API" and "libcuda-stub-link" in d.reason for d in plan.decisions)
    with_driver = configure(make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580),
                            load_params())
    assert "-DGGML_CUDA_NO_VMM=ON" not in with_driver.cmake_args
