"""The plan of the last run that passed the GPU gate, made again here from that run's own detect.json and
params.json: what configure decides for that machine must not drift unseen. A change that alters it is a change to
the CUDA route, and the gate must pass again on a GPU machine (then its new run is the one read here)."""

from __future__ import annotations

import json
from pathlib import Path

from playbook.facts import Facts
from playbook.params import params_from_dict
from playbook.serialization import read_json
from playbook.steps.configure import configure
from playbook.steps.configure.plan import BuildPlan

REFERENCE = Path(__file__).resolve().parents[2] / "outputs" / "reference"


def last_gate_run() -> Path:
    return REFERENCE / json.loads((REFERENCE / "gpu-acceptance.json").read_text())["run_id"]


def test_the_gate_machine_is_planned_as_when_the_gate_passed():
    run = last_gate_run()
    facts = read_json(Facts, run / "detect.json")
    archived = read_json(BuildPlan, run / "plan-attempt-1.json")
    again = configure(facts, params_from_dict(json.loads((run / "params.json").read_text())))
    assert (again.backend, again.cmake_args, again.env, again.runtime_env) == \
        (archived.backend, archived.cmake_args, archived.env, archived.runtime_env)
    assert [(d.what, d.value) for d in again.decisions] == [(d.what, d.value) for d in archived.decisions]
    assert (again.cuda_toolkit, again.cuda_architectures) == (archived.cuda_toolkit, archived.cuda_architectures)
    assert again.warnings == archived.warnings and again.blockers == archived.blockers
