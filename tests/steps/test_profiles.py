"""Every ready profile in params/ loads and plans on the machine it is meant for."""

from __future__ import annotations

import sys

import pytest
from machines import machine

from playbook.params import PARAMS_DIR, load_params
from playbook.steps.configure import configure
from playbook.verify.units.import_probe import check_required_symbols


def profile(name: str, *overrides: str):
    return load_params(PARAMS_DIR / f"{name}.yaml", list(overrides))


def test_cuda_native_on_the_gpu_machine():
    plan = configure(machine("gpu-machine-h200"), profile("cuda-native"))
    assert plan.backend == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=90" in plan.cmake_args and plan.warnings == []


def test_gpu_tune_plans_the_gpu_machine_s_build_and_tunes_the_7b():
    params = profile("gpu-tune")
    plan = configure(machine("gpu-machine-h200"), params)
    assert plan.backend == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=90" in plan.cmake_args
    assert (params.model.shape, params.model.quant) == ("7b", "Q4_0")
    assert params.verify.tune and params.verify.tune_depths == [0, 4096] and params.verify.tune_budget_s == 360
    assert not params.verify.llama_bench  # the 1B reference run is the one measured against llama-bench


def test_gpu_reference_measures_against_llama_bench_in_interleaved_pairs():
    verify = profile("gpu-reference").verify
    assert verify.llama_bench and verify.yardstick_pairs == 5 and verify.poll == 50


def test_cuda_portable_checks_every_architecture():
    plan = configure(machine("wsl2-3090"), profile("cuda-portable"))
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;89;120" in plan.cmake_args and "-DGGML_NATIVE=OFF" in plan.cmake_args
    assert any("sm_120 needs CUDA 12.8 or newer; this toolkit is 12.4.99" in w for w in map(str, plan.warnings))
    assert not any("sm_86" in w or "sm_89" in w for w in map(str, plan.warnings))
    h200 = configure(machine("gpu-machine-h200"), profile("cuda-portable"))
    assert any("will not contain sm_90" in w for w in map(str, h200.warnings))


def test_cuda_pypi_builds_for_three_architectures_without_a_toolkit_or_gpu():
    plan = configure(machine("no-gpu"), profile("cuda-pypi"))
    assert plan.backend == "cuda" and not plan.blockers, plan.blockers
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;89;120" in plan.cmake_args and plan.toolkit_request is not None
    assert plan.toolkit_request.release == "13.0" and plan.env["CUDACXX"].endswith("/bin/nvcc")


def test_cpu_profiles():
    assert configure(machine("gpu-machine-h200"), profile("cpu")).backend == "cpu"
    plan = configure(machine("no-gpu"), profile("cpu-portable"))
    assert plan.backend == "cpu" and "-DGGML_NATIVE=OFF" in plan.cmake_args
    assert any("CPU-only build" in w for w in map(str, plan.warnings))


def test_metal_profile():
    assert configure(machine("m2-mac"), profile("metal")).backend == "metal"
    linux = configure(machine("no-gpu"), profile("metal"))
    assert linux.backend == "cpu" and any("Metal exists only on macOS" in w for w in map(str, linux.warnings))


def test_vulkan_profile():
    plan = configure(machine("radeon-780m-vulkan"), profile("vulkan"))
    assert plan.backend == "vulkan" and "-DGGML_VULKAN=on" in plan.cmake_args and plan.blockers == []
    # no Vulkan at all: the plan refuses to build, naming each missing piece
    plan = configure(machine("no-gpu"), profile("vulkan"))
    assert {b.code for b in plan.blockers} == {"vulkan-headers-missing", "glslc-missing", "spirv-headers-missing"}
    assert {"vulkan-loader-missing", "vulkan-no-device"} <= set(plan.warning_codes())


def test_hip_profile():
    plan = configure(machine("rx7900xtx-rocm6.2"), profile("hip"))
    assert plan.backend == "hip" and plan.blockers == [], plan.blockers
    assert "-DGGML_HIP=on" in plan.cmake_args and plan.gpu_targets == "gfx1100"
    assert plan.env["HIPCXX"] == "/opt/rocm-6.2.4/llvm/bin/clang"
    plan = configure(machine("rx7900xtx-rocm6.2"), profile("hip", "hip.targets=gfx1100;gfx1030"))
    assert "-DAMDGPU_TARGETS=gfx1100;gfx1030" in plan.cmake_args
    # no ROCm at all: refused before building, naming what to install
    assert "rocm-missing" in {b.code for b in configure(machine("no-gpu"), profile("hip")).blockers}


def test_sycl_profile():
    """Planned only: a machine with oneAPI sourced plans Intel's compilers; one without is refused, named."""
    plan = configure(machine("arc-a770-oneapi2025"), profile("sycl"))
    assert plan.backend == "sycl" and plan.blockers == [], plan.blockers
    assert plan.cmake_args[:3] == ["-DGGML_SYCL=on", "-DCMAKE_C_COMPILER=icx", "-DCMAKE_CXX_COMPILER=icpx"]
    assert plan.runtime_env == {"ZES_ENABLE_SYSMAN": "1"} and "sycl-planned-only" in plan.warning_codes()
    f16 = configure(machine("arc-a770-oneapi2025"), profile("sycl", "build.cmake_args=[-DGGML_SYCL_F16=ON]"))
    assert "-DGGML_SYCL_F16=ON" in f16.cmake_args
    assert [b.code for b in configure(machine("no-gpu"), profile("sycl")).blockers] == ["oneapi-missing"]


def test_openblas_profile():
    plan = configure(machine("debian12-openblas"), profile("openblas"))
    assert plan.backend == "openblas" and plan.blockers == [], plan.blockers
    assert plan.cmake_args[:2] == ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"]
    assert "cpu-only" in plan.warning_codes()
    missing = configure(machine("no-gpu"), profile("openblas"))
    assert [b.code for b in missing.blockers] == ["openblas-missing", "pkg-config-missing"]
    assert "apt: `sudo apt install libopenblas-dev pkg-config`" in missing.blockers[0].message


def test_rpc_profile():
    plan = configure(machine("no-gpu"), profile("rpc"))
    assert plan.backend == "cpu" and "-DGGML_RPC=ON" in plan.cmake_args and plan.rpc is not None
    assert plan.rpc.server_target == "ggml-rpc-server" and plan.rpc.server_source_dir == "vendor/llama.cpp"
    # RPC composes with the backend: on the GPU machine the same option rides on CUDA, server included
    cuda = configure(machine("gpu-machine-h200"), profile("rpc", "backend=cuda"))
    assert cuda.backend == "cuda" and "-DGGML_RPC=ON" in cuda.cmake_args
    assert "-DGGML_CUDA=on" in cuda.rpc.server_cmake_args and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda.rpc.server_cmake_args


def test_fork_profile_lists_required_symbols(tmp_path):
    plan = configure(machine("gpu-machine-h200"), profile("fork", f"source.path={tmp_path}"))
    assert plan.source_path == str(tmp_path) and plan.source_kind == "path"
    assert plan.required_symbols == ["llama_cpp.llama_chat_format.Qwen3VLChatHandler"]


def test_required_symbols_are_checked_in_the_installed_package(tmp_path):
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "llama_chat_format.py").write_text("class Llava15ChatHandler:\n    pass\n")
    findings = check_required_symbols(tmp_path, ["llama_cpp.llama_chat_format.Llava15ChatHandler",
                                                 "llama_cpp.llama_chat_format.Qwen3VLChatHandler",
                                                 "llama_cpp_fork.something"], sys.executable, tmp_path / "symbols.log")
    assert [f.id for f in findings] == ["missing-symbol", "missing-symbol"]
    assert "llama_cpp.llama_chat_format.Qwen3VLChatHandler not found" in findings[0].evidence
    assert findings[1].evidence.startswith("llama_cpp_fork.something not found")
    assert check_required_symbols(tmp_path, [], sys.executable) == []


def test_multimodal_module_without_its_library_is_the_known_failure(tmp_path):
    """llama_cpp.mtmd_cpp raises at import when libmtmd is absent, as a wheel built with LLAVA_BUILD=OFF does."""
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mtmd_cpp.py").write_text(
        "raise FileNotFoundError(\"Shared library with base name 'mtmd' not found\")\n")
    findings = check_required_symbols(tmp_path, ["llama_cpp.mtmd_cpp.mtmd_init_from_file"], sys.executable,
                                      tmp_path / "symbols.log")
    assert [f.id for f in findings] == ["mtmd-not-built"]
    assert findings[0].automatic is True and "LLAVA_BUILD=ON" in findings[0].fix


def test_prebuilt_lib_profile(tmp_path):
    library = tmp_path / "libllama.so"
    library.write_bytes(b"")
    plan = configure(machine("gpu-machine-h200"), profile("prebuilt-lib", f"build.prebuilt_lib={library}"))
    assert plan.backend == "prebuilt"
    assert plan.cmake_args[:2] == ["-DLLAMA_BUILD=OFF", "-DLLAVA_BUILD=OFF"]
    assert plan.cmake_args.count("-DLLAVA_BUILD=OFF") == 1 and plan.multimodal is False
    assert plan.runtime_env == {"LLAMA_CPP_LIB_PATH": str(tmp_path)}
    assert f"export LLAMA_CPP_LIB_PATH={tmp_path}" in plan.shell_commands["bash"]


def test_server_profile_records_the_extra():
    plan = configure(machine("gpu-machine-h200"), profile("server"))
    assert plan.extras == ["server"] and plan.backend == "cuda"


def test_offline_profile_uses_no_index(tmp_path):
    (tmp_path / "wheels").mkdir()
    plan = configure(machine("no-gpu"), profile("offline", f"source.path={tmp_path}",
                                                f"source.find_links={tmp_path / 'wheels'}"))
    assert plan.find_links == str(tmp_path / "wheels") and plan.build_isolation is False
    assert any(d.what == "package index" and "--no-index" in d.value for d in plan.decisions)


# The machine each profile is meant for, the backend it must plan there, and the parameters it needs
# from the user (a path). A profile added to params/ without a row here fails the test below.
MEANT_FOR = {
    "cpu": ("gpu-machine-h200", "cpu", []),
    "cpu-portable": ("no-gpu", "cpu", []),
    "cuda-native": ("gpu-machine-h200", "cuda", []),
    "cuda-portable": ("gpu-machine-h200", "cuda", []),
    "cuda-pypi": ("no-gpu", "cuda", []),
    "default": ("gpu-machine-h200", "cuda", []),
    "fork": ("gpu-machine-h200", "cuda", ["source.path={tmp}"]),
    "gpu-reference": ("gpu-machine-h200", "cuda", []),
    "gpu-tune": ("gpu-machine-h200", "cuda", []),
    "hip": ("rx7900xtx-rocm6.2", "hip", []),
    "metal": ("m2-mac", "metal", []),
    "mkl": ("no-gpu", "mkl", []),
    "offline": ("no-gpu", "cpu", ["source.path={tmp}", "source.find_links={tmp}"]),
    "openblas": ("debian12-openblas", "openblas", []),
    "prebuilt-lib": ("gpu-machine-h200", "prebuilt", ["build.prebuilt_lib={tmp}/libllama.so"]),
    "rpc": ("no-gpu", "cpu", []),
    "server": ("gpu-machine-h200", "cuda", []),
    "sycl": ("arc-a770-oneapi2025", "sycl", []),
    "vulkan": ("radeon-780m-vulkan", "vulkan", []),
}


@pytest.mark.parametrize("path", sorted(PARAMS_DIR.glob("*.yaml")), ids=lambda path: path.stem)
def test_every_profile_plans_its_backend_on_the_machine_it_is_meant_for(path, tmp_path):
    assert path.stem in MEANT_FOR, f"params/{path.name}: add the machine it is meant for to MEANT_FOR"
    name, backend, overrides = MEANT_FOR[path.stem]
    (tmp_path / "libllama.so").write_bytes(b"")
    plan = configure(machine(name), profile(path.stem, *(o.format(tmp=tmp_path) for o in overrides)))
    assert (plan.backend, plan.blockers) == (backend, []), f"params/{path.name} on {name}"
