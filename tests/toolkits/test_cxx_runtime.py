"""Copies of the C++ runtime, read from real shared libraries that this machine's g++ links both ways: as it
does by default (libstdc++.so.6 needed), and with the runtime copied in, as a relocated GCC whose libstdc++.so
link dangles does (a GPU machine's /opt/gcc, 2026-11-25; scripts/gpu-cxx-runtime-check.sh). Then the remedy
that finds a compiler linking the runtime shared, and verify's unit that names a copy beside the shared
runtime the process maps."""

from __future__ import annotations

import dataclasses
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from playbook.facts import Tool
from playbook.knowledge.failures import finding_for, most_specific_first
from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.serialization import read_json
from playbook.steps.configure import BuildPlan, configure
from playbook.steps.repair import apply_remedies
from playbook.toolkits.cxx_runtime import compilers_with_shared_runtime, links_runtime_shared, runtime_copies
from playbook.verify.launcher import ChildOutcome
from playbook.verify.measurement import InstalledWheel, Measured, VerifyContext, VerifyRequest, VerifyTarget
from playbook.verify.result import VerifyResult
from playbook.verify.settings import BenchSettings
from playbook.verify.units.cxx_runtime import CXX_RUNTIME
from playbook.verify.units.import_probe import IMPORT_PROBE, ImportProbe
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.units.rpc_offload import RPC_OFFLOAD

pytestmark = pytest.mark.skipif(not (shutil.which("g++") and shutil.which("readelf")), reason="needs g++ and readelf")

# The import probe's runtime_libraries on this machine's kind of Python (numpy links libstdc++.so.6).
MAPPED = ["/usr/lib/x86_64-linux-gnu/libgcc_s.so.1", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30"]
SOURCE = "#include <sstream>\nstd::string format_{name}(int n) {{ std::ostringstream s; s << n; return s.str(); }}\n"


def copying_compiler(folder: Path) -> Path:
    """A g++ that copies the C++ runtime into everything it links."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "g++-copies-runtime"
    wrapper.write_text('#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


def link_libraries(folder: Path, cxx: str, names: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = folder / f"{name}.cpp"
        source.write_text(SOURCE.format(name=name.replace("-", "_")))
        subprocess.run([cxx, "-shared", "-fPIC", "-o", str(folder / f"lib{name}.so"), str(source)], check=True,
                       timeout=120)


def test_each_library_linked_with_the_runtime_copied_in_is_named_and_shared_ones_are_not(tmp_path):
    link_libraries(tmp_path / "copied", str(copying_compiler(tmp_path / "bin")), ["ggml-base", "llama"])
    link_libraries(tmp_path / "shared", "g++", ["ggml-base", "llama"])
    (tmp_path / "copied" / "libllama.so.0").symlink_to("libllama.so")
    shutil.copy2(tmp_path / "copied" / "libllama.so", tmp_path / "copied" / "libllama.so.0.5.0")  # as pip installs

    copied = runtime_copies(tmp_path / "copied")
    assert copied.libraries == ["libggml-base.so", "libllama.so"] and copied.clash and not copied.error
    assert copied.checked == ["libggml-base.so", "libllama.so"]  # neither the symlink nor the copy twice
    shared = runtime_copies(tmp_path / "shared", MAPPED)
    assert shared.libraries == [] and not shared.clash and shared.checked == ["libggml-base.so", "libllama.so"]
    assert shared.shared_runtime == MAPPED[1]  # one runtime: the shared one


def test_one_library_with_its_own_copy_clashes_only_with_a_shared_runtime_in_the_process(tmp_path):
    link_libraries(tmp_path / "lib", str(copying_compiler(tmp_path / "bin")), ["ggml"])
    link_libraries(tmp_path / "lib", "g++", ["llama"])
    assert runtime_copies(tmp_path / "lib").libraries == ["libggml.so"]
    assert not runtime_copies(tmp_path / "lib").clash  # nothing else in the process has a runtime
    assert runtime_copies(tmp_path / "lib", MAPPED).clash  # numpy's libstdc++.so.6 beside it


def test_a_compiler_that_links_the_runtime_shared_is_found_past_the_one_that_copies_it(tmp_path):
    copying = str(copying_compiler(tmp_path / "bin"))
    assert not links_runtime_shared(copying) and links_runtime_shared("g++")

    chosen = compilers_with_shared_runtime([copying, "g++"], avoid=copying)
    assert chosen is not None and chosen.cxx == shutil.which("g++")
    assert Path(chosen.c).name == "gcc" and Path(chosen.c).parent == Path(chosen.cxx).parent
    assert compilers_with_shared_runtime([copying]) is None
    assert compilers_with_shared_runtime(["g++"], avoid=shutil.which("g++") or "") is None


def test_the_remedy_names_that_compiler_in_the_next_plan(this_machine, tmp_path, monkeypatch):
    copying = str(copying_compiler(tmp_path / "bin"))
    monkeypatch.setenv("CXX", copying)
    gxx = shutil.which("g++") or ""
    facts = dataclasses.replace(this_machine, compilers=[Tool(copying, True, copying), Tool("g++", True, gxx)])
    plan = configure(facts, load_params(None, ["backend=cpu", "build.ccache=off"]))
    finding = finding_for("cxx-runtime-copies", "playbook: 2 libraries carry their own copy of the C++ runtime")

    repaired = apply_remedies(plan, [finding], facts, cache_dir=tmp_path)
    assert repaired is not None and repaired.remedies_applied == ["cxx-runtime-copies"]
    assert f"-DCMAKE_CXX_COMPILER={gxx}" in repaired.cmake_args
    assert f"-DCMAKE_C_COMPILER={Path(gxx).with_name('gcc')}" in repaired.cmake_args
    assert not any(a.startswith("-DCMAKE_CUDA_HOST_COMPILER=") for a in repaired.cmake_args)  # a CPU plan

    only_copying = dataclasses.replace(facts, compilers=[Tool(copying, True, copying)])
    assert apply_remedies(plan, [finding], only_copying, cache_dir=tmp_path) is None  # no compiler to move to


def test_verify_names_the_copy_and_the_crash_it_causes_is_not_reported_apart(tmp_path):
    lib = tmp_path / "site" / "llama_cpp" / "lib"
    link_libraries(lib, str(copying_compiler(tmp_path / "bin")), ["ggml-rpc"])
    link_libraries(lib, "g++", ["ggml-base", "llama"])
    request = VerifyRequest(Layout(tmp_path / "run"), tmp_path / "x.whl", load_params(),
                            VerifyTarget(expect_gpu=False, backend="cpu"), tmp_path, tmp_path)
    ctx = VerifyContext(request, InstalledWheel(tmp_path / "site", {}, 0), BenchSettings(threads=1), log=lambda _: None)
    probe = ImportProbe(ChildOutcome("ok", 0, 1.0, "probe.log", result={"runtime_libraries": MAPPED}))
    ctx.results[IMPORT_PROBE.name] = Measured(probe)

    assert CXX_RUNTIME.skip_reason(ctx) == ""
    measured = CXX_RUNTIME.measure(ctx)
    assert not measured.passed and [f.id for f in measured.findings] == ["cxx-runtime-copies"]
    assert "a model load may crash" in measured.stop  # no child loads a model from this wheel
    assert measured.findings[0].evidence.startswith("playbook: libggml-rpc.so carries its own copy")
    assert MAPPED[1] in measured.findings[0].evidence
    crash = finding_for("process-crash", "Fatal Python error: Segmentation fault")
    assert [f.id for f in most_specific_first([crash, *measured.findings])] == ["cxx-runtime-copies"]


# ---------------------------------------------------------------- the GPU machine's measurements, as archived

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "results" / "cxx-runtime-check-gpu-machine.txt"
RPC_GPU = ROOT / "outputs" / "reference" / "20261125T214733Z-vm"


def test_the_archived_check_shows_the_copied_runtime_crashing_and_the_shared_one_loading():
    text = CHECK.read_text()
    cpu_only = text[text.index("# Run 2:"):]
    default, system = cpu_only.split("built by the system compiler")
    assert "libggml.so: needs libggml-cpu.so.0 libggml-base.so.0 libgcc_s.so.1 libc.so.6" in default  # no libstdc++
    assert "std::locale::classic(): 1" in default and "std::locale::classic(): 1" not in system
    for order in ("llama_cpp", "numpy"):
        assert f"== default compiler, {order} imported first: load exit 139" in default
        assert f"== system compiler, {order} imported first: load exit 0" in system
    assert "libstdc++.so.6.0.33" in default  # the shared runtime numpy's process mapped beside the copy


def test_the_gpu_rpc_run_was_named_repaired_and_then_ran():
    first = read_json(VerifyResult, RPC_GPU / "verify-attempt-1.json")
    second = read_json(VerifyResult, RPC_GPU / "verify-attempt-2.json")
    assert [f.id for f in first.findings] == ["cxx-runtime-copies"] and first.measured(CXX_RUNTIME).libraries == ["libggml-rpc.so"]
    assert first.measured(OFFLOAD_SWEEP) is None and first.measured(RPC_OFFLOAD) is None  # stopped before any child loaded the model
    plan = read_json(BuildPlan, RPC_GPU / "plan-attempt-2.json")
    assert plan.remedies_applied == ["cxx-runtime-copies"] and "-DCMAKE_CXX_COMPILER=/usr/bin/c++" in plan.cmake_args
    assert second.ok and second.measured(CXX_RUNTIME).libraries == [] and second.measured(RPC_OFFLOAD).agreement.ok
    assert all(p.status == "ok" for p in second.measured(RPC_OFFLOAD).points)
