from __future__ import annotations

import dataclasses

import pytest
from conftest import H100, RTX_4070, make_facts, toolkit

from playbook.facts import Gpu, NvidiaDriver
from playbook.knowledge.compatibility import toolkit_supports_arch
from playbook.knowledge.failures import Finding
from playbook.params import load_params
from playbook.steps.configure import configure, parallel_jobs
from playbook.steps.repair import apply_remedies

DRIVER_580 = NvidiaDriver(True, "580.159.04", "13.0", "nvml")


def finding(failure_id: str) -> Finding:
    return Finding(failure_id, failure_id, "evidence", 1, "", "", True)


def test_gpu_machine_builds_cuda_for_its_architecture(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580)
    plan = configure(facts, load_params())
    assert plan.backend == "cuda"
    assert plan.cmake_args[:2] == ["-DGGML_CUDA=on", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    assert plan.env["CUDACXX"] == "/usr/local/cuda/bin/nvcc"
    assert plan.warnings == []
    assert {d.what for d in plan.decisions} >= {"backend", "CUDA architectures", "parallel jobs", "source"}
    assert all(d.reason for d in plan.decisions)


def test_no_gpu_builds_cpu_and_says_so(this_machine):
    facts = make_facts(this_machine, gpus=[], driver=NvidiaDriver(False))
    plan = configure(facts, load_params())
    assert plan.backend == "cpu"
    assert "-DGGML_CUDA=off" in plan.cmake_args
    assert plan.warning_codes() == ["cpu-only"]
    assert any("CPU-only build (no NVIDIA GPU visible)" in w for w in map(str, plan.warnings))


def test_toolkit_without_cublas_and_cccl_is_warned(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("12.1.66", cublas=False, cccl=False)],
                       driver=DRIVER_580)
    warnings = " ".join(map(str, configure(facts, load_params()).warnings))
    assert "lacks CCCL headers" in warnings and "has no cuBLAS" in warnings
    assert {"cccl-headers-missing", "cublas-missing"} <= set(configure(facts, load_params()).warning_codes())


def test_a_toolkit_passed_over_for_a_missing_component_is_named_in_the_plan(this_machine):
    """A machine with a system CUDA without cuBLAS and another toolkit that has everything (issue 34: the plan said
    "no system CUDA" beside an installed /usr/local/cuda): the plan says which one it passed over and why."""
    facts = make_facts(this_machine, gpus=[H100], driver=DRIVER_580,
                       toolkits=[toolkit("13.0.88", cublas=False), toolkit("12.8.93", root="/opt/cuda-12.8")])
    plan = configure(facts, load_params())
    reason = next(d for d in plan.decisions if d.what == "CUDACXX").reason
    assert plan.cuda_toolkit == "/opt/cuda-12.8"
    assert "passed over: CUDA 13.0.88 at /usr/local/cuda, which has no cuBLAS" in reason
    # the toolkit asked for by name passes nothing over; neither does one that is the only toolkit
    named = configure(facts, load_params(None, ["cuda.toolkit=/opt/cuda-12.8"]))
    assert "passed over" not in next(d for d in named.decisions if d.what == "CUDACXX").reason
    alone = configure(make_facts(this_machine, gpus=[H100], driver=DRIVER_580, toolkits=[toolkit("12.8.93")]),
                      load_params())
    assert "passed over" not in next(d for d in alone.decisions if d.what == "CUDACXX").reason


def test_architecture_dropped_by_toolkit_is_warned(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580)
    plan = configure(facts, load_params(None, ["cuda.architectures=61"]))
    assert "cuda-arch-unsupported" in plan.warning_codes()
    assert any("CUDA 13.0 dropped sm_61" in w for w in map(str, plan.warnings))
    assert any("will not contain sm_90" in w for w in map(str, plan.warnings))


def test_driver_older_than_toolkit_is_warned(this_machine):
    old = NvidiaDriver(True, "535.183.01", "12.2", "nvml")
    facts = make_facts(this_machine, gpus=[RTX_4070], toolkits=[toolkit("13.0.88")], driver=old)
    plan = configure(facts, load_params())
    assert "driver-older-than-toolkit" in plan.warning_codes()
    assert any("update the driver to 580.65.06 or newer" in w for w in map(str, plan.warnings))


def test_newest_toolkit_the_driver_supports_is_chosen(this_machine):
    old = NvidiaDriver(True, "535.183.01", "12.2", "nvml")
    toolkits = [toolkit("13.0.88", "/usr/local/cuda-13.0"), toolkit("12.1.66", "/usr/local/cuda-12.1")]
    facts = make_facts(this_machine, gpus=[RTX_4070], toolkits=toolkits, driver=old)
    assert configure(facts, load_params()).cuda_toolkit == "/usr/local/cuda-12.1"


@pytest.mark.parametrize(
    "version, arch, ok",
    [("13.0", "61", False), ("12.8", "61", True), ("12.4", "120", False), ("12.8", "120", True),
     ("11.8", "90", True), ("11.7", "89", False), ("13.0", "80-real", True), ("12.9", "121", True)],
)
def test_architecture_table(version, arch, ok):
    assert toolkit_supports_arch(version, arch)[0] is ok


def test_parallel_jobs_are_sized_by_memory():
    assert parallel_jobs(16, 128 * 1024, "cuda")[0] == 16
    assert parallel_jobs(16, 8 * 1024, "cuda")[0] == 2
    assert parallel_jobs(16, 1000, "cuda")[0] == 1
    assert parallel_jobs(2, 24 * 1024, "cpu")[0] == 2


def test_parameters_override_decisions(this_machine):
    params = load_params(None, ["backend=cpu", "build.jobs=3", "build.cmake_args=['-DGGML_NATIVE=OFF']"])
    plan = configure(make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")]), params)
    assert plan.backend == "cpu" and plan.jobs == 3 and plan.cmake_args[-1] == "-DGGML_NATIVE=OFF"


def test_remedies_change_the_plan(this_machine):
    facts = make_facts(this_machine, gpus=[Gpu(0, "NVIDIA H100", 81559, "9.0")], toolkits=[toolkit("13.0.88")])
    params = load_params(None, ["build.cmake_args=['-DLLAMA_CUBLAS=on']", "cuda.architectures=61"])
    plan = configure(facts, params)
    fixed = apply_remedies(plan, [finding("deprecated-cuda-flag"), finding("cuda-arch-unsupported"),
                                  finding("compiler-out-of-memory")], facts)
    assert fixed is not None and fixed.attempt == 2
    assert "-DLLAMA_CUBLAS=on" not in fixed.cmake_args and "-DGGML_CUDA=on" in fixed.cmake_args
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in fixed.cmake_args
    assert "-DCMAKE_CUDA_ARCHITECTURES=61" not in fixed.cmake_args
    assert fixed.jobs == max(1, plan.jobs // 2)
    assert fixed.remedies_applied == ["deprecated-cuda-flag", "cuda-arch-unsupported", "compiler-out-of-memory"]
    assert plan.attempt == 1 and "-DLLAMA_CUBLAS=on" in plan.cmake_args  # the old plan is untouched


def test_a_cuda_remedy_is_not_applied_to_another_backends_plan(this_machine):
    """Seen on the GPU machine: a Vulkan wheel whose loader found no device was 'repaired' with GGML_CUDA=on."""
    cuda = configure(make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580),
                     load_params(None, ["backend=cuda", "cuda.architectures=90"]))
    cpu_only_cuda = dataclasses.replace(cuda, cmake_args=[a for a in cuda.cmake_args if a != "-DGGML_CUDA=on"])
    assert apply_remedies(cpu_only_cuda, [finding("cpu-only-build")], this_machine).remedies_applied == ["cpu-only-build"]
    vulkan = dataclasses.replace(cuda, backend="vulkan", cmake_args=["-DGGML_VULKAN=on"])
    assert apply_remedies(vulkan, [finding("cpu-only-build")], this_machine) is None


def test_no_remedy_means_no_new_plan(this_machine):
    plan = configure(this_machine, load_params(None, ["backend=cpu"]))
    assert apply_remedies(plan, [finding("nvcc-not-found")], this_machine) is None
    assert apply_remedies(plan, [], this_machine) is None


def test_multimodal_library_is_left_out_unless_asked(this_machine):
    facts = make_facts(this_machine, gpus=[H100], toolkits=[toolkit("13.0.88")], driver=DRIVER_580)
    text_only = configure(facts, load_params())
    assert "-DLLAVA_BUILD=OFF" in text_only.cmake_args and text_only.multimodal is False
    decision = next(d for d in text_only.decisions if d.what == "multimodal library")
    assert "build.multimodal: true" in decision.reason

    asked = configure(facts, load_params(None, ["build.multimodal=true"]))
    assert not any(a.startswith("-DLLAVA_BUILD") for a in asked.cmake_args) and asked.multimodal is True
    needed = configure(facts, load_params(None, ["verify.required_symbols=['llama_cpp.mtmd_cpp.mtmd_free']"]))
    assert needed.multimodal is True
    assert "llama_cpp.mtmd_cpp.mtmd_free" in next(d for d in needed.decisions if d.what == "multimodal library").reason
    by_hand = configure(facts, load_params(None, ["build.cmake_args=['-DLLAVA_BUILD=ON']"]))
    assert by_hand.multimodal is True and by_hand.cmake_args.count("-DLLAVA_BUILD=ON") == 1
    assert "-DLLAVA_BUILD=OFF" not in by_hand.cmake_args
    conflict = configure(facts, load_params(None, ["build.cmake_args=['-DLLAVA_BUILD=OFF']",
                                                   "verify.required_symbols=['llama_cpp.mtmd_cpp.mtmd_free']"]))
    assert conflict.multimodal is False and any("verify will report mtmd-not-built" in w for w in map(str, conflict.warnings))
    assert not any("mtmd-not-built" in w for w in map(str, needed.warnings))


def test_missing_multimodal_library_is_repaired_by_building_it(this_machine):
    plan = configure(this_machine, load_params(None, ["backend=cpu"]))
    fixed = apply_remedies(plan, [finding("mtmd-not-built")], this_machine)
    assert fixed is not None and fixed.multimodal is True
    assert "-DLLAVA_BUILD=ON" in fixed.cmake_args and "-DLLAVA_BUILD=OFF" not in fixed.cmake_args
    assert plan.multimodal is False


def test_a_fork_that_renamed_the_multimodal_switch_gets_its_own_name(this_machine, tmp_path):
    """JamePeng's fork (guide 002) declares option(MTMD_BUILD ...) and ignores LLAVA_BUILD: leaving libmtmd out
    of it takes MTMD_BUILD=OFF, and a plan that said LLAVA_BUILD=OFF would claim a library the wheel still has."""
    fork = tmp_path / "fork"
    (fork / "vendor" / "llama.cpp").mkdir(parents=True)
    (fork / "CMakeLists.txt").write_text('option(LLAMA_BUILD "llama" ON)\noption(MTMD_BUILD "mtmd" ON)\n')
    (fork / "pyproject.toml").write_text("[project]\nname = 'llama_cpp_python'\n")
    (fork / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text("\n")
    text_only = configure(this_machine, load_params(None, ["backend=cpu", "source.kind=path", f"source.path={fork}"]))
    assert "-DMTMD_BUILD=OFF" in text_only.cmake_args and text_only.multimodal is False
    assert not any(a.startswith("-DLLAVA_BUILD") for a in text_only.cmake_args)
    asked = configure(this_machine, load_params(None, ["backend=cpu", "source.kind=path", f"source.path={fork}",
                                                       "build.multimodal=true"]))
    assert not any("MTMD_BUILD" in a or "LLAVA_BUILD" in a for a in asked.cmake_args) and asked.multimodal is True
    by_hand = configure(this_machine, load_params(None, ["backend=cpu", "source.kind=path", f"source.path={fork}",
                                                         "build.multimodal=true", "build.cmake_args=['-DMTMD_BUILD=OFF']"]))
    assert by_hand.multimodal is False


def cpu_without(this_machine, *flags: str):
    """This machine's facts with an x86-64 CPU that reports AVX2, FMA and F16C, and none of ``flags``."""
    import dataclasses as dc

    facts = make_facts(this_machine, gpus=[], driver=NvidiaDriver(False))
    facts.os = dc.replace(facts.os, machine="x86_64")
    facts.cpu = dc.replace(facts.cpu, model="a CPU without AVX-512", flags=sorted({"avx", "avx2", "fma", "f16c"} - set(flags)))
    return facts


def test_an_illegal_instruction_is_repaired_by_a_portable_build_without_the_switches_asked_for(this_machine):
    """Issue 34: a build asked for AVX-512 (or AMX, AVX-VNNI) that the CPU running verify lacks dies by SIGILL;
    the next attempt builds portable, with every such switch removed, and keeps the rest of the plan."""
    facts = cpu_without(this_machine)
    asked = ["-DGGML_NATIVE=OFF", "-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI:BOOL=ON", "-DGGML_AVX512_BF16=1",
             "-DGGML_AMX_TILE=ON", "-DGGML_AMX_INT8=ON", "-DGGML_AVX_VNNI=ON", "-DGGML_AVX2=ON", "-DGGML_OPENMP=OFF"]
    plan = configure(facts, load_params(None, ["backend=cpu", f"build.cmake_args=[{', '.join(asked)}]"]))
    fixed = apply_remedies(plan, [finding("illegal-instruction")], facts)
    assert fixed is not None and fixed.attempt == 2 and fixed.remedies_applied == ["illegal-instruction"]
    assert [a for a in fixed.cmake_args if a.startswith(("-DGGML_AVX", "-DGGML_AMX", "-DGGML_NATIVE", "-DGGML_OPENMP"))] \
        == ["-DGGML_AVX2=ON", "-DGGML_OPENMP=OFF", "-DGGML_NATIVE=OFF"]
    assert [a for a in fixed.cmake_args if a not in asked] == [a for a in plan.cmake_args if a not in asked]
    assert fixed.decisions[-1].what == "repair" and fixed.decisions[-1].value == "illegal-instruction"
    assert "-DGGML_AVX512=ON" in plan.cmake_args  # the failed attempt's plan is untouched


def test_an_illegal_instruction_of_a_native_build_is_repaired_by_a_portable_one(this_machine):
    """A native wheel that crashed where it runs (a VM that reports features it faults on, a wheel copied to an
    older CPU): portable; a second crash of the portable build changes nothing more, so a person gets the fix."""
    facts = cpu_without(this_machine)
    plan = configure(facts, load_params(None, ["backend=cpu"]))
    assert not any(a.startswith("-DGGML_NATIVE") for a in plan.cmake_args)
    fixed = apply_remedies(plan, [finding("illegal-instruction")], facts)
    assert fixed is not None and fixed.cmake_args == [*plan.cmake_args, "-DGGML_NATIVE=OFF"]
    assert apply_remedies(fixed, [finding("illegal-instruction")], facts) is None


def test_a_portable_build_asking_for_cpu_features_this_cpu_lacks_is_warned_about_not_blocked(this_machine):
    facts = cpu_without(this_machine, "avx512f", "amx_tile")
    params = ["backend=cpu", "build.cmake_args=[-DGGML_NATIVE=OFF, -DGGML_AVX512=ON, -DGGML_AMX_TILE=on, -DGGML_FMA=ON]"]
    plan = configure(facts, load_params(None, params))
    [warning] = [w for w in plan.warnings if w.code == "cpu-features-missing"]
    assert "-DGGML_AVX512=ON, -DGGML_AMX_TILE=ON compiles code for avx512f, amx_tile" in warning.message
    assert "a CPU without AVX-512" in warning.message and "illegal-instruction" in warning.message
    assert plan.blockers == []  # a wheel for another machine is legitimate
    with_avx512 = dataclasses.replace(facts, cpu=dataclasses.replace(facts.cpu, flags=[*facts.cpu.flags, "avx512f", "amx_tile"]))
    # the CPU has them; a native build ignores the switches; where detect read no flags nothing is judged
    for quiet, args in [(with_avx512, params[1]),
                        (facts, "build.cmake_args=[-DGGML_AVX512=ON]"),
                        (facts, "build.cmake_args=[-DGGML_NATIVE=OFF, -DGGML_AVX512=OFF, -DGGML_AVX_VNNI=ON]"),
                        (dataclasses.replace(facts, cpu=dataclasses.replace(facts.cpu, flags=[])), params[1])]:
        assert "cpu-features-missing" not in configure(quiet, load_params(None, ["backend=cpu", args])).warning_codes()
