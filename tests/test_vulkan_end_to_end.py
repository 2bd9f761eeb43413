"""The real chain with llama.cpp's Vulkan backend, on whatever Vulkan device this machine has: on a CPU-only
machine, Mesa's lavapipe (Debian: mesa-vulkan-drivers), a CPU-type device llama.cpp uses only when
GGML_VK_VISIBLE_DEVICES names it. Builds the pinned sdist with -DGGML_VULKAN=on, offloads layers, compares
logits with the CPU and sweeps layer counts. Skips without Vulkan, except where PLAYBOOK_REQUIRE_VULKAN=1
(.ci/run sets it): there a missing piece fails the test."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from playbook.backends import vulkan as vulkan_plan
from playbook.backends.vulkan import detect_vulkan
from playbook.chain import run_chain
from playbook.params import load_params
from playbook.probing import run_command
from playbook.resources import params_dir
from playbook.runfolder.folder import Outcome
from playbook.runfolder.layout import Step
from playbook.serialization import read_json
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan
from playbook.verify.step import VerifyResult
from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

OUTPUT = Path(__file__).parent / "output" / "vulkan"


def vulkan_missing() -> list[str]:
    vulkan = detect_vulkan(os.environ, os.environ.get("PATH", ""), run_command)
    return (["a Vulkan device (vulkaninfo --summary lists none)"] if not vulkan.devices else []) + vulkan_plan.missing(vulkan)


def require_vulkan(missing: list[str]) -> None:
    if not missing:
        return
    message = (f"Vulkan is not usable here: missing {', '.join(missing)} (Debian: apt install mesa-vulkan-drivers "
               "libvulkan-dev glslc vulkan-tools spirv-headers; newer headers: scripts/vulkan-headers.sh)")
    if os.environ.get("PLAYBOOK_REQUIRE_VULKAN") == "1":
        pytest.fail(message)
    pytest.skip(message)


def test_missing_vulkan_fails_where_it_is_required(monkeypatch):
    monkeypatch.setenv("PLAYBOOK_REQUIRE_VULKAN", "1")
    with pytest.raises(pytest.fail.Exception, match="missing glslc"):
        require_vulkan(["glslc"])
    monkeypatch.delenv("PLAYBOOK_REQUIRE_VULKAN")
    with pytest.raises(pytest.skip.Exception):
        require_vulkan(["glslc"])
    require_vulkan([])


@pytest.mark.slow
def test_vulkan_chain_offloads_agrees_and_sweeps(tmp_path, pinned_source):
    require_vulkan(vulkan_missing())
    # The session's shared cache (conftest's pinned_source): ccache holds the CPU backend's and llama's objects
    # from the other portable builds, so only the Vulkan backend and its shaders compile here.
    cache = pinned_source[1]
    params = load_params(params_dir() / "vulkan.yaml", [
        "verify.repetitions=1", "verify.prompt_tokens=32", "verify.gen_tokens=16", "verify.sweep_points=3",
        "build.native=false",  # this project's VM reports AMX and faults on it (cpu-amx-fault): not Vulkan's concern
        f"build.cache_dir={cache}"])
    run = run_chain(params, "params/vulkan.yaml (test)", tmp_path)
    layout, record = run.layout, run.record()
    _keep(run, record)
    assert record.outcome == Outcome.OK, record.message
    assert [s.step for s in record.steps] == [Step.DETECT, Step.CONFIGURE, Step.BUILD, Step.VERIFY]

    plan = read_json(BuildPlan, layout.plan(1))
    assert plan.backend == "vulkan" and "-DGGML_VULKAN=on" in plan.cmake_args and plan.blockers == []
    build = read_json(BuildResult, layout.build_result(1))
    assert build.ok
    if not build.reused_wheel:  # built here, not taken from the wheel cache (a kept PLAYBOOK_TEST_CACHE)
        # ninja counts one edge more than it prints (465 for 464 lines here): the last [n/N] may fall one short
        assert build.progress.total > 300 and build.progress.done >= build.progress.total - 1
        log = layout.build_log(1).read_text()
        assert "-DGGML_VULKAN=on" in log and "vulkan-shaders-gen" in log

    verify = read_json(VerifyResult, layout.verify_result(1))
    assert verify.ok, verify.summary
    assert verify.measured(IMPORT_PROBE).outcome.result["supports_gpu_offload"] is True
    n_layer = verify.measured(MODEL_FILE).n_layer
    agreement = verify.measured(GPU_CPU_AGREEMENT)
    assert agreement is not None and agreement.ok  # all layers on the Vulkan device against none
    points = verify.measured(OFFLOAD_SWEEP).points
    counts = [p.n_gpu_layers for p in points]
    assert counts[0] == 0 and counts[-1] == n_layer + 1 and len(counts) >= 3
    for point in points:
        assert point.status == "ok" and point.tg_tokens_per_s > 0 and point.pp_tokens_per_s > 0
        assert point.offloaded_layers == point.n_gpu_layers
    devices = plan.runtime_env.get(vulkan_plan.VISIBLE_DEVICES)
    bench = (layout.verify_logs(1) / f"bench-ngl-{counts[-1]}.log").read_text()
    assert "ggml_vulkan" in bench or "Vulkan" in bench
    if devices is not None:  # a CPU-type device only (lavapipe): the plan made it visible to llama.cpp
        assert verify.runtime_env[vulkan_plan.VISIBLE_DEVICES] == devices


def _keep(run, record) -> None:
    """Copy the run's facts and timings where a person can read them after the test's folder is gone."""
    shutil.rmtree(OUTPUT, ignore_errors=True)
    shutil.copytree(run.layout.root, OUTPUT / run.layout.root.name, ignore=shutil.ignore_patterns("wheelhouse"))
    timings = {f"{s.step.value}-{s.attempt}": round(s.duration_s, 1) for s in record.steps}
    (OUTPUT / "timings.json").write_text(json.dumps(timings, indent=2))
