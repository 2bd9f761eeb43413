"""The real chain on this machine: the pinned llama-cpp-python sdist built CPU-only, a tiny synthetic
GGUF, a sweep of one point. Takes minutes: it compiles llama.cpp.

On a machine whose CPU reports AMX but faults on it (this project's development VM), the native
build crashes in verify; the chain must then repair itself with a portable rebuild."""

from __future__ import annotations

import json

import nbformat
import pytest

from playbook.facts import read_facts
from playbook.params import PARAMS_DIR, load_params
from playbook.runner import run_chain
from playbook.steps import Diagnosis
from playbook.verify import VerifyResult


@pytest.mark.slow
def test_cpu_chain_builds_runs_and_archives(tmp_path):
    params = load_params(PARAMS_DIR / "cpu.yaml", ["verify.repetitions=1", "verify.prompt_tokens=32",
                                                   "verify.gen_tokens=8", f"build.cache_dir={tmp_path / 'cache'}"])
    run = run_chain(params, "params/cpu.yaml (test)", tmp_path)
    record = run.record()
    assert record.outcome == "ok", record.message
    steps = [s.step for s in record.steps]
    assert steps[:4] == ["detect", "configure", "build", "verify"]
    attempts = steps.count("build")
    if attempts == 2:  # verify of the native build crashed: repaired with a portable rebuild
        assert steps == ["detect", "configure", "build", "verify", "repair", "build", "verify"]
        diagnosis = read_facts(Diagnosis, run.file("diagnosis-attempt-1.json"))
        assert diagnosis.findings[0]["id"] == "cpu-amx-fault"
        assert "-DGGML_NATIVE=OFF" in run.file("build-attempt-2.log").read_text()
        assert run.file("05-verify-attempt-1.ipynb").is_file()  # the failed verify is kept
    else:
        assert attempts == 1

    first = json.loads(run.file("build-attempt-1.json").read_text())
    assert first["reused_wheel"] == "" and first["progress"]["done"] == first["progress"]["total"] > 100
    build = json.loads(run.file("build.json").read_text())
    assert build["ok"] and build["wheel"]["name"].startswith("llama_cpp_python-0.3.36-")
    assert build["source"]["sha256"] == params.source.sha256
    assert (run.path / "wheelhouse" / f"attempt-{attempts}" / build["wheel"]["name"]).is_file()
    assert "-DGGML_CUDA=off" in run.file("build-attempt-1.log").read_text()

    verify = read_facts(VerifyResult, run.file(f"verify-attempt-{attempts}.json"))
    assert verify.ok and verify.probe.result["version"] == "0.3.36"
    assert verify.probe.result["supports_gpu_offload"] is False
    assert [p.n_gpu_layers for p in verify.points] == [0]
    point = verify.points[0]
    assert point.status == "ok" and point.pp_tokens_per_s > 0 and point.tg_tokens_per_s > 0
    assert verify.agreement is None  # nothing to compare on a CPU-only build
    assert run.file(f"throughput-attempt-{attempts}.png").stat().st_size > 1000

    manifest = json.loads(run.file("manifest.json").read_text())
    for name in ("01-detect.ipynb", "02-configure.ipynb", "03-build-attempt-1.ipynb",
                 f"05-verify-attempt-{attempts}.ipynb", "detect.json", "plan-attempt-1.json", "build.json",
                 "verify.json", f"throughput-attempt-{attempts}.csv", "build-attempt-1.log"):
        assert name in manifest["files"], name
    assert manifest["outcome"] == "ok"
    executed = nbformat.read(run.file(f"05-verify-attempt-{attempts}.ipynb"), as_version=4)
    assert any(o.get("output_type") in ("display_data", "execute_result") and "image/png" in o.get("data", {})
               for c in executed.cells for o in c.get("outputs", []))  # the plot, shown in the notebook
