"""The walkthrough's logic and widgets, driven without a browser (tests/test_browser.py drives it in one)."""

import json
import shutil
import time
from pathlib import Path

import nbformat
import papermill
import pytest

from playbook.chain import StepCall, next_step
from playbook.errors import ParameterError, PlaybookError
from playbook.interfaces.walkthrough import Choices, Walkthrough, apply_choices, latest_progress, parse_layer_counts
from playbook.params import load_params
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.layout import Step
from playbook.steps.configure import configure

ROOT = Path(__file__).resolve().parents[2]
TWO_ATTEMPTS = ROOT / "outputs" / "reference" / "20261122T011010Z-vm"


def choices(this_machine, *overrides):
    params = load_params(None, list(overrides))
    return params, Choices.from_plan(params, configure(this_machine, params))


def test_choices_default_to_the_plan(this_machine):
    _params, shown = choices(this_machine, "backend=cpu", "build.jobs=3")
    assert (shown.backend, shown.jobs, shown.source_version) == ("cpu", 3, "0.3.36")
    assert shown.n_gpu_layers == "0"  # no GPU offload: verify measures 0 layers only


def test_only_changed_choices_become_parameters(this_machine, tmp_path):
    _, shown = choices(this_machine, "backend=cpu")
    same = Choices(**vars(shown))
    assert same.changes_from(shown) == {}
    changed = Choices(**{**vars(shown), "jobs": 1, "n_gpu_layers": "0, 4 ,8", "source_path": str(tmp_path)})
    assert changed.changes_from(shown) == {"build.jobs": 1, "verify.n_gpu_layers": [0, 4, 8],
                                           "source.kind": "path", "source.path": str(tmp_path)}
    with pytest.raises(PlaybookError, match="whole numbers separated by commas"):
        parse_layer_counts("0, all")


def new_run(tmp_path) -> RunFolder:
    return RunFolder.create(tmp_path / "outputs", load_params(), "params/default.yaml")


def test_a_bad_choice_changes_nothing(tmp_path):
    run = new_run(tmp_path)
    before = run.layout.params.read_text()
    with pytest.raises(ParameterError, match="model.path"):
        apply_choices(run, {"model.path": str(tmp_path / "missing.gguf")})
    assert run.layout.params.read_text() == before and not (run.path / "history").exists()


def test_a_good_choice_keeps_the_earlier_parameters(tmp_path):
    run = new_run(tmp_path)
    before = run.layout.params.read_text()
    apply_choices(run, {"build.jobs": 1, "model.quant": "F16"})
    assert run.params().build.jobs == 1 and run.params().model.quant == "F16"
    assert (run.path / "history" / "001-params" / "params.json").read_text() == before
    assert run.record().params_source.endswith("+ choices: build.jobs=1 model.quant=F16")


def test_latest_progress_reads_ninja_lines(tmp_path):
    log = tmp_path / "build-attempt-1.log"
    assert latest_progress(log) == (0, 0)
    log.write_text("-- Configuring done\n  [1/140] g++ a.cpp\n  [57/140] g++ b.cpp\nwarning: [9/9] is not ninja\n")
    assert latest_progress(log) == (57, 140)


def test_next_step_follows_the_chain(tmp_path):
    run = RunFolder(shutil.copytree(TWO_ATTEMPTS, tmp_path / "run", ignore=shutil.ignore_patterns("report")))
    assert next_step(run) is None  # verified on attempt 2
    layout = run.layout
    layout.verify_result(2).unlink()
    assert next_step(run) == StepCall(Step.VERIFY, 2)
    for path in (layout.build_result(2), layout.plan(2)):
        path.unlink()
    assert next_step(run) is None  # attempt 1 is diagnosed, and its repaired plan is gone
    layout.diagnosis(1).unlink()
    assert next_step(run) == StepCall(Step.REPAIR, 1)  # verify of attempt 1 failed (no kernel image)
    layout.plan(1).unlink()
    assert next_step(run) == StepCall(Step.CONFIGURE)
    layout.detect_facts.unlink()
    assert next_step(run) == StepCall(Step.DETECT)


@pytest.mark.long
def test_buttons_run_detect_and_configure_then_a_choice_plans_again(tmp_path):
    """The real steps (papermill kernels), pressed through the widgets as a person would."""
    walk = Walkthrough(params_file="params/cpu.yaml", output_root=str(tmp_path / "outputs"))
    box = walk.show()
    assert walk.next_button.description == "run next step: detect" and walk.run is None
    walk.next_button.click()
    walk.wait(300)
    assert "logical cores" in walk.sections["detect"].value, walk.status.value
    assert walk.next_button.description == "run next step: configure"
    walk.next_button.click()
    walk.wait(300)
    assert "CMAKE_ARGS=-DGGML_CUDA=off" in walk.sections["configure"].value, walk.status.value
    assert walk.next_button.description == "run next step: build (attempt 1)"
    assert walk.fields["backend"].value == "cpu" and walk.fields["jobs"].value == walk.choices.jobs

    walk.fields["jobs"].value = 1
    apply_button = walk.form.children[-1]
    apply_button.click()
    walk.wait(300)
    run = walk.run
    assert run.params().build.jobs == 1
    assert "1 parallel jobs" in walk.sections["configure"].value, walk.status.value
    history = sorted(p.name for p in (run.path / "history").iterdir())
    assert history == ["001-params", "002-configure"]
    assert (run.path / "history" / "002-configure" / "02-configure.ipynb").is_file()
    steps = run.record().steps
    assert [s.step for s in steps] == [Step.DETECT, Step.CONFIGURE, Step.CONFIGURE]
    assert steps[-1].earlier_kept == "history/002-configure"
    manifest = json.loads(run.layout.manifest.read_text())["files"]
    assert "history/002-configure/plan-attempt-1.json" in manifest
    assert box is not None


@pytest.mark.long
def test_headless_walkthrough_runs_the_steps_in_turn(tmp_path):
    output = tmp_path / "walkthrough.ipynb"
    papermill.execute_notebook(
        str(ROOT / "notebooks" / "00-walkthrough.ipynb"), str(output), kernel_name="python3", cwd=str(ROOT / "notebooks"),
        parameters={"interactive": False, "params_file": "params/cpu.yaml", "stop_after": "configure",
                    "output_root": str(tmp_path / "outputs")}, progress_bar=False)
    (run_dir,) = (tmp_path / "outputs").iterdir()
    assert sorted(p.name for p in run_dir.glob("*.ipynb")) == ["01-detect.ipynb", "02-configure.ipynb"]
    executed = nbformat.read(output, as_version=4)
    assert not any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
                   for c in executed.cells for o in c.get("outputs", []))


def test_a_finished_run_shows_its_build_repair_and_verify(tmp_path):
    run_dir = shutil.copytree(TWO_ATTEMPTS, tmp_path / "run", ignore=shutil.ignore_patterns("report"))
    walk = Walkthrough(run_dir=str(run_dir))
    assert walk.next_button.description == "chain ended" and walk.next_button.disabled
    assert "Ubuntu" in walk.sections["detect"].value or "NVIDIA H200" in walk.sections["detect"].value
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in walk.sections["configure"].value  # the plan now: repaired, attempt 2
    assert walk.fields["cuda.architectures"].value == "80-real"  # the choices: the person's parameters
    assert "built" in walk.sections["build"].value and walk.build_label.value.startswith("attempt 2: built")
    assert "no-kernel-image" in walk.sections["repair"].value
    assert "applied no-kernel-image; attempt 2 of 3 will build" in walk.sections["repair"].value
    assert walk.sweep_bar.value == walk.sweep_bar.max > 1
    assert walk.plot.value[:8] == b"\x89PNG\r\n\x1a\n" and walk.plot.layout.display is None


@pytest.mark.long
def test_progress_bars_follow_the_build_log_and_the_sweep(tmp_path):
    seen = {}

    def fake_execute(run, call):
        step, attempt = call.step, call.attempt
        if step is Step.BUILD:
            log = run.layout.build_log(attempt)
            log.write_text("-- Configuring done\n")
            time.sleep(1.2)
            seen["configuring"] = walk.build_label.value
            log.write_text("-- Configuring done\n  [1/10] cc a.c\n  [5/10] cc e.c\n")
            time.sleep(1.2)
            seen["build"] = (walk.build_bar.value, walk.build_bar.max, walk.build_label.value)
        if step is Step.VERIFY:
            logs = run.layout.verify_logs(attempt)
            logs.mkdir(parents=True)
            (logs / "bench-ngl-0.log").write_text("")
            (logs / "bench-ngl-3.log").write_text("")
            time.sleep(1.2)
            seen["verify"] = (walk.sweep_bar.value, walk.sweep_label.value)

    walk = Walkthrough(params_file="params/cpu.yaml", output_root=str(tmp_path / "outputs"), execute=fake_execute)
    walk.start(StepCall(Step.BUILD, 1))
    walk.wait(30)
    assert seen["configuring"].startswith("configuring")
    assert seen["build"][:2] == (5, 10) and seen["build"][2].startswith("[5/10]")
    walk.start(StepCall(Step.VERIFY, 1))
    walk.wait(30)
    assert seen["verify"] == (2, "2 of 2 layer counts measured")
    assert walk.status.value.startswith("verify done")
    assert walk.next_button.disabled == (walk.next_button.description == "chain ended")


def test_a_failing_step_is_shown_not_raised(tmp_path):
    def failing(run, call):
        raise RuntimeError("the step notebook raised")

    walk = Walkthrough(params_file="params/cpu.yaml", output_root=str(tmp_path / "outputs"), execute=failing)
    walk.next_button.click()
    walk.wait(30)
    assert "detect failed" in walk.status.value and "the step notebook raised" in walk.status.value
    assert not walk.next_button.disabled  # the person can try again


def test_latest_progress_reads_only_the_tail_of_a_long_log(tmp_path):
    log = tmp_path / "build-attempt-1.log"
    log.write_text("  [1/300] nvcc first.cu\n" + "x" * 200_000 + "\n  [299/300] nvcc last.cu\n")
    assert latest_progress(log) == (299, 300)
    assert latest_progress(log, tail_bytes=10) == (0, 0)  # the last line cut: no whole [n/N] line in 10 bytes


def test_an_unknown_parameter_is_named_and_changes_nothing(tmp_path):
    run = new_run(tmp_path)
    with pytest.raises(ParameterError, match="unknown parameter 'build.jobz'"):
        apply_choices(run, {"build.jobz": 1})
    assert not (run.path / "history").exists()
