"""`configure` on the machines issue 4 names, each built from recorded tool outputs (tests/machines.py)."""

from __future__ import annotations

import dataclasses

from machines import machine

from playbook.facts import Tool, Vulkan, VulkanDevice, VulkanHeaders
from playbook.params import PARAMS_DIR, load_params
from playbook.steps.configure import configure


def text(plan) -> str:
    return "\n".join(map(str, plan.warnings))


def test_windows_4070_cuda124_vs1710():
    plan = configure(machine("windows-4070-cuda12.4-vs17.10"), load_params())
    assert plan.platform == "windows" and plan.backend == "cuda"
    assert "-DCMAKE_CUDA_ARCHITECTURES=89" in plan.cmake_args
    assert plan.env["CUDACXX"] == "C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4/bin/nvcc.exe"
    assert plan.generator == "Ninja" and plan.env["CMAKE_GENERATOR"] == "Ninja"
    assert plan.env["TEMP"] == plan.env["TMP"] == "C:\\t"  # the user's temp path is long and has a space
    # CUDA 12.4.0's nvcc rejects MSVC 19.40; the machine also has the 14.39 toolset, which it accepts
    assert "MSVC 19.40 (Visual Studio 17.10) is newer than CUDA 12.4.99's nvcc accepts (up to 19.39)" in text(plan)
    assert "install CUDA 12.4.131 or newer" in text(plan) and "-vcvars_ver=14.39.33519" in text(plan)
    assert plan.dll_directories == ["C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v12.4\\bin"]
    shells = plan.shell_commands
    assert set(shells) == {"powershell", "cmd"}
    assert shells["cmd"][0].startswith('call "C:\\Program Files\\Microsoft Visual Studio\\2022\\Community\\VC')
    assert "set \"CUDACXX=C:/Program Files/NVIDIA GPU Computing Toolkit/CUDA/v12.4/bin/nvcc.exe\"" in shells["cmd"]
    assert "$env:CMAKE_ARGS = '-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=89 -DLLAVA_BUILD=OFF'" in shells["powershell"]
    assert {line.split("=")[0] for line in shells["cmd"][1:]} >= {'set "CMAKE_ARGS', 'set "FORCE_CMAKE', 'set "TEMP'}


def test_windows_5090_cuda121_needs_a_newer_toolkit():
    plan = configure(machine("windows-5090-cuda12.1"), load_params())
    assert plan.backend == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=120" in plan.cmake_args
    warnings = text(plan)
    assert "sm_120 needs CUDA 12.8 or newer; this toolkit is 12.1.66: install CUDA 12.8 or newer" in warnings
    assert "MSVC 19.44 (Visual Studio 17.14) is newer than CUDA 12.1.66's nvcc accepts" in warnings
    assert "standard library needs CUDA 12.4 or newer (error STL1002)" in warnings
    assert "TEMP" not in plan.env  # C:\t is short already


def test_ubuntu_gcc14_cuda124_uses_the_installed_gcc13():
    facts = machine("ubuntu-2404-gcc14-cuda12.4")
    plan = configure(facts, load_params())
    assert plan.platform == "linux" and plan.env["CUDAHOSTCXX"] == "/usr/bin/g++-13"
    assert not any("newer than CUDA" in w for w in map(str, plan.warnings))
    assert set(plan.shell_commands) == {"bash"}
    assert "export CUDAHOSTCXX=/usr/bin/g++-13" in plan.shell_commands["bash"]
    # without gcc 13 installed: a warning with the fix
    facts.compilers = [t for t in facts.compilers if t.name != "g++-13"]
    plan = configure(facts, load_params())
    assert "CUDAHOSTCXX" not in plan.env
    assert "gcc 14.2.0 is newer than CUDA 12.4.99's nvcc accepts (up to gcc 13)" in text(plan)
    assert "apt install g++-13" in text(plan) and "install CUDA 12.8 or newer" in text(plan)


def test_wsl2_3090():
    facts = machine("wsl2-3090")
    plan = configure(facts, load_params())
    assert plan.platform == "wsl" and plan.backend == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=86" in plan.cmake_args
    assert plan.warnings == []
    assert facts.libcuda_paths == ["/usr/lib/wsl/lib/libcuda.so.1"]
    broken = dataclasses.replace(facts, stub_on_ld_library_path=["/usr/local/cuda-12.4/lib64/stubs"],
                                 libcuda_paths=["/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"])
    warnings = text(configure(broken, load_params()))
    assert "LD_LIBRARY_PATH holds CUDA's stub folder /usr/local/cuda-12.4/lib64/stubs" in warnings
    assert "finds libcuda.so.1 at /usr/lib/x86_64-linux-gnu/libcuda.so.1 before /usr/lib/wsl/lib" in warnings
    no_driver = dataclasses.replace(facts, wsl_driver_libs=[])
    assert "WSL without /usr/lib/wsl/lib/libcuda.so" in text(configure(no_driver, load_params()))


def test_driver_535_with_only_cuda_13():
    facts = machine("driver535-cuda13")
    assert facts.driver.cuda_version == ""  # the query CSV has no CUDA version: it comes from the driver branch
    plan = configure(facts, load_params())
    assert plan.backend == "cuda" and "-DCMAKE_CUDA_ARCHITECTURES=89" in plan.cmake_args
    warnings = text(plan)
    assert "driver 535.183.01 supports CUDA up to 12.2, older than the toolkit 13.0.88" in warnings
    assert "update the driver to 580.65.06 or newer, or build with a CUDA 12.x toolkit up to 12.2" in warnings


def test_m2_mac_builds_metal():
    plan = configure(machine("m2-mac"), load_params())
    assert plan.platform == "macos" and plan.backend == "metal"
    assert "-DGGML_METAL=on" in plan.cmake_args and not any("GGML_CUDA" in a for a in plan.cmake_args)
    assert plan.warnings == [] and plan.blockers == []


def test_x86_python_under_rosetta_is_refused_with_the_fix():
    facts = machine("m2-mac")
    facts.os.rosetta = True
    plan = configure(facts, load_params())
    assert plan.backend == "cpu" and plan.blockers
    assert [b.code for b in plan.blockers] == ["rosetta-python"]
    assert "x86_64 running under Rosetta" in str(plan.blockers[0]) and "arch -arm64" in str(plan.blockers[0])


def test_no_gpu_is_cpu_only_and_says_so():
    plan = configure(machine("no-gpu"), load_params())
    assert plan.backend == "cpu" and "-DGGML_CUDA=off" in plan.cmake_args
    assert any("CPU-only build (no NVIDIA GPU visible)" in w for w in map(str, plan.warnings))
    portable = configure(machine("no-gpu"), load_params(PARAMS_DIR / "cpu-portable.yaml"))
    assert "-DGGML_NATIVE=OFF" in portable.cmake_args


def test_this_machine(this_machine):
    """Real detection here: nvcc 13.0 without cuBLAS and no GPU -> a CPU build that says so."""
    plan = configure(this_machine, load_params())
    assert plan.backend == "cpu" and plan.platform == "linux"
    assert any("CPU-only build (no NVIDIA GPU visible)" in w for w in map(str, plan.warnings))
    assert this_machine.vswhere.found is False and this_machine.visual_studio == []
    assert plan.blockers == []


def test_the_gpu_machine():
    """detect.json recorded on the H200 machine."""
    facts = machine("gpu-machine-h200")
    plan = configure(facts, load_params())
    assert plan.backend == "cuda" and plan.cmake_args[:2] == ["-DGGML_CUDA=on", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    assert plan.env["CUDACXX"] == "/usr/local/cuda-13.0/bin/nvcc"
    assert plan.warnings == [] and "CUDAHOSTCXX" not in plan.env  # gcc 13 is within CUDA 13.0's limit


def decisions(plan) -> dict[str, str]:
    return {f"{d.what}:{d.value}": d.reason for d in plan.decisions}


def test_rx7900xtx_rocm62_builds_hip_for_gfx1100():
    facts = machine("rx7900xtx-rocm6.2")
    assert facts.rocm.version == "6.2" and facts.rocm.gfx_targets == ["gfx1100"]  # the CPU agent is skipped
    plan = configure(facts, load_params())
    assert plan.backend == "hip" and plan.gpu_targets == "gfx1100"
    assert {"-DGGML_HIP=on", "-DAMDGPU_TARGETS=gfx1100", "-DGPU_TARGETS=gfx1100"} <= set(plan.cmake_args)
    assert plan.env["HIPCXX"] == "/opt/rocm-6.2.4/llvm/bin/clang" and plan.env["HIP_PATH"] == "/opt/rocm-6.2.4"
    assert plan.blockers == [] and "cpu-only" not in plan.warning_codes()
    rejected = decisions(plan)
    assert rejected["backend rejected:cuda"] == "no NVIDIA GPU visible"
    assert rejected["backend rejected:vulkan"].startswith("no Vulkan device seen")
    assert "export HIPCXX=/opt/rocm-6.2.4/llvm/bin/clang" in plan.shell_commands["bash"]
    # ROCm 6.0 is older than the pinned llama.cpp accepts; without hipBLAS the build fails too
    old = dataclasses.replace(facts, rocm=dataclasses.replace(facts.rocm, version="6.0", has_hipblas=False))
    plan = configure(old, load_params())
    assert {b.code for b in plan.blockers} == {"rocm-too-old", "hipblas-missing"}


def test_radeon_780m_on_vulkan():
    facts = machine("radeon-780m-vulkan")
    assert [(d.name, d.device_type) for d in facts.vulkan.devices] == [
        ("AMD Radeon 780M (RADV GFX1103_R1)", "integrated"), ("llvmpipe (LLVM 17.0.6, 256 bits)", "cpu")]
    plan = configure(facts, load_params())
    assert plan.backend == "vulkan" and "-DGGML_VULKAN=on" in plan.cmake_args
    assert plan.blockers == [] and plan.warnings == []
    assert plan.runtime_env == {}  # an integrated GPU: llama.cpp uses it without GGML_VK_VISIBLE_DEVICES
    assert not any(a.startswith("-DVulkan_INCLUDE_DIR") for a in plan.cmake_args)  # /usr/include is found anyway
    rejected = decisions(plan)
    assert rejected["backend rejected:hip"] == "no ROCm (hipconfig) found"
    assert "Radeon 780M" in rejected["backend:vulkan"]
    # the same laptop with ROCm installed: HIP is preferred, but warned that no ROCm release lists gfx1103
    with_rocm = dataclasses.replace(facts, rocm=machine("rx7900xtx-rocm6.2").rocm)
    with_rocm.rocm.gpus[0].gfx, with_rocm.rocm.gpus[0].name = "gfx1103", "AMD Radeon 780M"
    plan = configure(with_rocm, load_params())
    assert plan.backend == "hip" and "HSA_OVERRIDE_GFX_VERSION=11.0.0" in text(plan)
    assert decisions(plan)["backend rejected:vulkan"] == "usable, but hip is preferred"
    assert configure(with_rocm, load_params(None, ["backend=vulkan"])).backend == "vulkan"


def test_m3_with_command_line_tools_only_embeds_the_metal_library():
    plan = configure(machine("m3-mac-metal"), load_params())
    assert plan.platform == "macos" and plan.backend == "metal"
    assert "-DGGML_METAL=on" in plan.cmake_args and "-DGGML_METAL_EMBED_LIBRARY=on" in plan.cmake_args
    assert plan.warning_codes() == ["metal-compiler-missing"] and plan.blockers == []
    assert 'unable to find utility "metal"' in decisions(plan)["Metal library:embedded (-DGGML_METAL_EMBED_LIBRARY=on)"]
    assert decisions(plan)["Apple GPU:Apple M3"]
    assert "hip-not-on-macos" in configure(machine("m3-mac-metal"), load_params(None, ["backend=hip"])).warning_codes()


def test_debian12_lavapipe_needs_newer_headers_then_sees_its_cpu_device():
    facts = machine("debian12-lavapipe")
    auto = configure(facts, load_params())
    assert auto.backend == "cpu"  # a CPU-type Vulkan device is no reason to leave the CPU backend
    assert "only Vulkan devices are CPU-type" in decisions(auto)["backend rejected:vulkan"]
    plan = configure(facts, load_params(None, ["backend=vulkan"]))
    assert [b.code for b in plan.blockers] == ["vulkan-headers-too-old"]
    assert "1.3.239" in plan.blockers[0].message and "1.3.272" in plan.blockers[0].message
    # the newer headers unpacked from Debian 13's libvulkan-dev, found through VULKAN_SDK
    facts.vulkan.headers.insert(0, VulkanHeaders("/cache/vulkan-headers-1.4.309/usr/include", "1.4.309", "VULKAN_SDK"))
    plan = configure(facts, load_params(None, ["backend=vulkan"]))
    assert plan.blockers == [] and plan.warning_codes() == ["vulkan-cpu-device-only"]
    assert "-DVulkan_INCLUDE_DIR=/cache/vulkan-headers-1.4.309/usr/include" in plan.cmake_args
    assert plan.runtime_env == {"GGML_VK_VISIBLE_DEVICES": "0"}
    assert "export GGML_VK_VISIBLE_DEVICES=0" in plan.shell_commands["bash"]


def test_h200_with_the_carried_vulkan_sdk_plans_both_backends():
    """The GPU machine as scripts/gpu-vulkan-vs-cuda.sh prepares it: Debian 13's Vulkan packages unpacked into a
    work folder that VULKAN_SDK names, NVIDIA's Vulkan driver seen through the API (no vulkaninfo there)."""
    facts = machine("gpu-machine-h200")
    sdk = "/tmp/gpu-vulkan-vs-cuda/vulkan-root/usr"
    facts.vulkan = Vulkan(
        loader=[f"{sdk}/lib/x86_64-linux-gnu/libvulkan.so.1"], instance_version="1.4.309", source="Vulkan API",
        devices=[VulkanDevice(0, "NVIDIA H200", "discrete", "NVIDIA", "580.159.04", "1.4.312", "0x10de")],
        glslc=Tool("glslc", True, f"{sdk}/bin/glslc", "2025.2"),
        headers=[VulkanHeaders(f"{sdk}/include", "1.4.309", "VULKAN_SDK")],
        spirv_headers=f"{sdk}/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake")
    auto = configure(facts, load_params(PARAMS_DIR / "gpu-reference.yaml"))
    assert auto.backend == "cuda" and decisions(auto)["backend rejected:vulkan"] == "usable, but cuda is preferred"
    plan = configure(facts, load_params(PARAMS_DIR / "gpu-reference.yaml", ["backend=vulkan"]))
    assert plan.backend == "vulkan" and plan.blockers == [] and plan.warnings == [] and plan.runtime_env == {}
    assert plan.cmake_args[:3] == ["-DGGML_VULKAN=on", f"-DVulkan_INCLUDE_DIR={sdk}/include",
                                   f"-DSPIRV-Headers_DIR={sdk}/share/cmake/SPIRV-Headers"]
