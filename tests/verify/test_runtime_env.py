"""The plan's runtime side reaches verify's children: DLL folders (Windows) and LLAMA_CPP_LIB_PATH
(prebuilt-lib). The fast tests use a stand-in ``llama_cpp``; the slow one loads a real wheel's library
from a separate folder."""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from playbook.child_scripts.dll_directories import DLL_DIRECTORIES_VARIABLE
from playbook.params import PARAMS_DIR, load_params
from playbook.runfolder.layout import Layout
from playbook.verify.launcher import CHILD_SCRIPT, child_env, install_wheel, plan_child_env, run_child
from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
from playbook.verify.units.import_probe import IMPORT_PROBE, prebuilt_lib_findings

# A stand-in binding: what ``os.add_dll_directory`` was called with by the time it was imported.
FAKE_LLAMA_CPP = """
    import json, os
    __version__ = "0.0.0-fake"
    _calls_at_import = list(getattr(os, "_playbook_dll_calls", []))
    def llama_supports_gpu_offload():
        return False
    def llama_print_system_info():
        return json.dumps({"calls_at_import": _calls_at_import}).encode()
"""
# Linux has no os.add_dll_directory: a recorder in its place, installed at interpreter start-up.
RECORDER = """
    import os
    os._playbook_dll_calls = []
    class _Handle:
        def __init__(self, path):
            self.path = path
        def close(self):
            pass
    def add_dll_directory(path):
        os._playbook_dll_calls.append(path)
        return _Handle(path)
    os.add_dll_directory = add_dll_directory
"""


def fake_site(tmp_path: Path, recorder: bool) -> Path:
    site = tmp_path / "site"
    (site / "llama_cpp").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text(textwrap.dedent(FAKE_LLAMA_CPP))
    if recorder:
        (site / "sitecustomize.py").write_text(textwrap.dedent(RECORDER))
    return site


def test_plan_child_env_carries_runtime_env_and_dll_directories(tmp_path):
    env = plan_child_env({"LLAMA_CPP_LIB_PATH": "/opt/llama"}, [r"C:\CUDA\v12.4\bin", r"D:\other"])
    assert env == {"LLAMA_CPP_LIB_PATH": "/opt/llama",
                   DLL_DIRECTORIES_VARIABLE: os.pathsep.join([r"C:\CUDA\v12.4\bin", r"D:\other"])}
    assert plan_child_env({}, []) == {}
    full = child_env(tmp_path, env)
    assert full["LLAMA_CPP_LIB_PATH"] == "/opt/llama" and full[DLL_DIRECTORIES_VARIABLE] == env[DLL_DIRECTORIES_VARIABLE]
    assert full["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)


def test_child_adds_dll_directories_before_importing_llama_cpp(tmp_path):
    """child.py, run as verify runs it, with os.add_dll_directory replaced by a recorder."""
    site = fake_site(tmp_path, recorder=True)
    cuda_bin, other = tmp_path / "cuda" / "bin", tmp_path / "other"
    cuda_bin.mkdir(parents=True)
    other.mkdir()
    missing = tmp_path / "not-there"
    env = plan_child_env({}, [str(cuda_bin), str(missing), str(other)])
    outcome = run_child(["probe"], site, tmp_path / "probe.log", 60, script=CHILD_SCRIPT, extra_env=env)
    assert outcome.status == "ok", outcome.error_tail
    result = outcome.result
    assert result["dll_directories"] == {"added": [str(cuda_bin), str(other)], "missing": [str(missing)]}
    # the folders were added before llama_cpp was imported, in the plan's order
    assert json.loads(result["system_info"])["calls_at_import"] == [str(cuda_bin), str(other)]
    assert result["library"] is None  # the stand-in has no llama_cpp.llama_cpp._lib


def test_child_without_add_dll_directory_skips_it(tmp_path):
    """On Linux and macOS (no os.add_dll_directory) the variable is read and nothing is called."""
    site = fake_site(tmp_path, recorder=False)
    env = plan_child_env({"LLAMA_CPP_LIB_PATH": str(tmp_path)}, [str(tmp_path)])
    outcome = run_child(["probe"], site, tmp_path / "probe.log", 60, script=CHILD_SCRIPT, extra_env=env)
    assert outcome.status == "ok", outcome.error_tail
    assert outcome.result["dll_directories"] == {"added": [], "missing": []}
    assert json.loads(outcome.result["system_info"])["calls_at_import"] == []
    assert outcome.result["lib_path_variable"] == str(tmp_path)


def test_prebuilt_lib_not_used_is_a_finding(tmp_path):
    prebuilt = tmp_path / "prebuilt"
    prebuilt.mkdir()
    (prebuilt / "libllama.so").write_bytes(b"")
    log = tmp_path / "probe.log"
    runtime_env = {"LLAMA_CPP_LIB_PATH": str(prebuilt)}
    assert prebuilt_lib_findings(str(prebuilt / "libllama.so"), runtime_env, log) == []
    assert prebuilt_lib_findings("/site/llama_cpp/lib/libllama.so", {}, log) == []  # no prebuilt library planned
    findings = prebuilt_lib_findings("/site/llama_cpp/lib/libllama.so", runtime_env, log)
    assert [f.id for f in findings] == ["prebuilt-lib-not-used"]
    assert "/site/llama_cpp/lib/libllama.so" in findings[0].evidence and findings[0].fix
    assert "not the prebuilt library" in log.read_text()
    assert [f.id for f in prebuilt_lib_findings(None, runtime_env, log)] == ["prebuilt-lib-not-used"]


@pytest.mark.slow
def test_prebuilt_library_in_another_folder_is_the_one_loaded(tmp_path, cpu_wheel, tiny_f16_model):
    """A real wheel, its llama.cpp libraries copied to a folder of their own, LLAMA_CPP_LIB_PATH there
    (the plan's runtime_env): the binding loads libllama and libggml* from that folder."""
    site = tmp_path / "unpacked"
    installed = install_wheel(cpu_wheel, site)
    assert installed.returncode == 0, installed.stderr
    prebuilt = tmp_path / "prebuilt-llama.cpp"
    prebuilt.mkdir()
    for library in (site / "llama_cpp" / "lib").glob("*.so*"):
        shutil.copy2(library, prebuilt / library.name, follow_symlinks=True)

    outcome = run_child(["probe"], site, tmp_path / "probe.log", 120,
                        extra_env=plan_child_env({"LLAMA_CPP_LIB_PATH": str(prebuilt)}))
    assert outcome.status == "ok", outcome.error_tail
    assert Path(outcome.result["library"]) == prebuilt / "libllama.so"
    mapped = outcome.result["mapped_libraries"]
    assert mapped and all(Path(p).parent == prebuilt for p in mapped), mapped
    assert outcome.result["version"] == "0.3.36"
    # The C++ runtime the libraries were linked against, as the loader found it (libggml is C++)
    runtimes = outcome.result["runtime_libraries"]
    assert any(Path(p).name.startswith("libstdc++.so") and Path(p).is_file() for p in runtimes), runtimes

    # The whole verify with the plan's runtime_env: the library file is recorded, no finding.
    params = load_params(PARAMS_DIR / "cpu.yaml", [f"model.path={tiny_f16_model}", "model.quant=F16",
                                                   "verify.repetitions=1", "verify.prompt_tokens=16",
                                                   "verify.gen_tokens=4", f"build.cache_dir={tmp_path / 'cache'}"])
    target = VerifyTarget(expect_gpu=False, runtime_env={"LLAMA_CPP_LIB_PATH": str(prebuilt)})
    request = VerifyRequest(Layout(tmp_path / "run"), cpu_wheel, params, target, tmp_path, tmp_path / "cache")
    result = run_verify(request, log=lambda _: None)
    assert result.measured(IMPORT_PROBE).library_file == str(prebuilt / "libllama.so")
    assert result.runtime_env == {"LLAMA_CPP_LIB_PATH": str(prebuilt)}
    assert result.ok, result.findings
    assert "prebuilt-lib-not-used" not in [f.id for f in result.findings]

    # Without the variable the wheel's own library loads: against the plan, that is the finding.
    plain = run_child(["probe"], site, tmp_path / "plain.log", 120)
    assert Path(plain.result["library"]).parent == (site / "llama_cpp" / "lib").resolve()
    findings = prebuilt_lib_findings(plain.result["library"], {"LLAMA_CPP_LIB_PATH": str(prebuilt)},
                                     tmp_path / "plain.log")
    assert [f.id for f in findings] == ["prebuilt-lib-not-used"]
