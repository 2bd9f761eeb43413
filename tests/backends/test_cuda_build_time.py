"""The plan says beforehand how long a CUDA build takes here, scaled from one archived build whose
figures cuda.yaml's build_time holds: they are read back here from that run's own files."""

from __future__ import annotations

import json
import re
from pathlib import Path

from machines import machine

from playbook.knowledge.compatibility import measured_cuda_build
from playbook.params import PARAMS_DIR, load_params
from playbook.steps.configure import configure

ROOT = Path(__file__).resolve().parents[2]


def test_the_measured_build_is_the_archived_run():
    measured = measured_cuda_build()
    run = ROOT / measured.source.split(" ")[0]
    build = json.loads((run / "build-attempt-2.json").read_text())
    plan = json.loads((run / "plan-attempt-2.json").read_text())
    log = (run / "build-attempt-2.log").read_text()
    assert build["ok"] and measured.wall_s == build["duration_s"]
    assert measured.steps == build["progress"]["total"] == build["progress"]["done"]
    assert measured.jobs == plan["jobs"] and measured.architectures == len(plan["cuda_architectures"].split(";"))
    nvcc_steps = re.findall(rf"^\s*\[\d+/{measured.steps}\] .*/nvcc .* -c ", log, re.MULTILINE)
    assert measured.cuda_objects == len(nvcc_steps)


def _expected_minutes(architectures: int, jobs: int) -> int:
    build = json.loads((ROOT / "outputs/reference/20261123T170441Z-vm/build-attempt-2.json").read_text())
    per_object = build["duration_s"] * 2 / (144 * 2)  # the run's jobs and architectures, checked above
    return round(144 * architectures * per_object / jobs / 60)


def test_a_forced_cuda_build_on_a_machine_without_a_gpu_says_how_long_it_takes():
    params = load_params(PARAMS_DIR / "cuda-pypi.yaml", ["build.jobs=2"])  # 86;89;120
    plan = configure(machine("no-gpu"), params)
    [decision] = [d for d in plan.decisions if d.what == "expected build time"]
    assert decision.value == f"about {_expected_minutes(3, 2)} min"
    assert "144 CUDA objects × 3 architecture(s)" in decision.reason and "over 2 job(s)" in decision.reason
    [long] = [w for w in plan.warnings if w.code == "cuda-build-long"]
    assert f"about {_expected_minutes(3, 2)} min here" in long.message


def test_a_short_cuda_build_is_a_decision_not_a_warning():
    plan = configure(machine("gpu-machine-h200"), load_params(PARAMS_DIR / "cuda-native.yaml", ["build.jobs=16"]))
    [decision] = [d for d in plan.decisions if d.what == "expected build time"]
    assert decision.value == f"about {_expected_minutes(1, 16)} min" and "cuda-build-long" not in plan.warning_codes()


def test_the_readme_quotes_the_measured_build():
    measured = measured_cuda_build()
    readme = " ".join((ROOT / "docs" / "cuda-from-pypi.md").read_text().split())
    assert (f"{measured.cuda_objects} CUDA objects for two architectures on {measured.jobs} jobs in "
            f"{measured.wall_s:.0f} s") in readme and measured.architectures == 2
