"""provenance.json (in-toto Statement, SLSA v1 predicate), `playbook check`, amendment, report, fleet view."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from machines import machine

from playbook.files import sha256_of
from playbook.interfaces.cli import main
from playbook.interfaces.fleet import expand_run_dirs, fleet_row, fleet_table, write_outputs
from playbook.interfaces.report import write_report
from playbook.params import load_params
from playbook.runfolder.attestation import ATTESTATION, PREDICATE_TYPE, STATEMENT_TYPE, write_attestation
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.integrity import ABSENT, CHANGED, MISSING, UNLISTED, amend_manifest, check_run
from playbook.serialization import write_json
from playbook.steps.build import BuildResult, WheelInfo
from playbook.steps.configure import configure
from playbook.steps.source import SourceInfo
from playbook.verify.launcher import ChildOutcome
from playbook.verify.step import VerifyResult
from playbook.verify.units.import_probe import IMPORT_PROBE, ImportProbe

REFERENCE = Path(__file__).resolve().parents[2] / "outputs" / "reference"
REFERENCE_RUNS = sorted(p for p in REFERENCE.glob("2026*") if (p / "run.json").is_file())


def finished_run(tmp_path: Path) -> RunFolder:
    """A run folder as the runner leaves it: facts, a log, a built and verified wheel, notebook, plot."""
    run = RunFolder.create(tmp_path, load_params(), "params/default.yaml")
    wheel = run.path / "wheelhouse" / "attempt-1" / "tiny-0.1-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    wheel.write_bytes(b"PK wheel bytes")
    source = SourceInfo("sdist", "/cache/llama_cpp_python-0.3.36.tar.gz", "0.3.36", "ab" * 32, "PyPI")
    build = BuildResult(attempt=1, ok=True, exit_code=0, duration_s=2.5, log_file="build-attempt-1.log",
                        command=["pip"], env={}, source=source,
                        wheel=WheelInfo(wheel.name, str(wheel), 14, sha256_of(wheel)))
    write_json(build, run.layout.build_result(1))
    facts = machine("no-gpu")  # gcc 13.3.0, no GPU
    write_json(facts, run.layout.detect_facts)
    write_json(configure(facts, run.params()), run.layout.plan(1))
    probe = ChildOutcome("ok", 0, 0.5, "verify-logs/attempt-1/probe.log", result={"version": "0.3.36"})
    verify = VerifyResult(ok=True, wheel=str(wheel), site_dir="", threads=2, summary="fine")
    verify.record(IMPORT_PROBE, ImportProbe(probe))
    write_json(verify, run.layout.verify_result(1))
    (run.path / "build-attempt-1.log").write_text("[1/1] done\n")
    (run.path / "01-detect.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n')
    record = run.record()
    record.outcome, record.finished = "ok", "2026-11-22T00:05:00+00:00"
    run.save_record(record)
    write_attestation(run)
    run.write_manifest()
    return run


def test_attestation_is_an_in_toto_slsa_statement(tmp_path):
    run = finished_run(tmp_path)
    statement = json.loads(run.layout.attestation.read_text())
    assert statement["_type"] == STATEMENT_TYPE and statement["predicateType"] == PREDICATE_TYPE
    [subject] = statement["subject"]
    assert subject["name"] == "tiny-0.1-py3-none-any.whl"
    assert subject["digest"]["sha256"] == sha256_of(run.path / "wheelhouse/attempt-1/tiny-0.1-py3-none-any.whl")
    assert subject["annotations"]["verified"] is True
    build = statement["predicate"]["buildDefinition"]
    assert build["externalParameters"]["parameters"]["source"]["version"] == "0.3.36"
    deps = {d["name"]: d for d in build["resolvedDependencies"]}
    assert deps["llama_cpp_python-0.3.36.tar.gz"]["digest"] == {"sha256": "ab" * 32}
    assert deps["c++"]["annotations"]["version"] == "13.3.0" and "python" in deps
    details = statement["predicate"]["runDetails"]
    assert details["metadata"]["finishedOn"] == "2026-11-22T00:05:00+00:00"
    byproducts = {b["name"] for b in details["byproducts"]}
    assert {"01-detect.ipynb", "build-attempt-1.log", "run.json"} <= byproducts
    assert not byproducts & {ATTESTATION, "manifest.json", "wheelhouse/attempt-1/tiny-0.1-py3-none-any.whl"}


def test_check_passes_then_catches_a_tampered_missing_or_added_file(tmp_path):
    run = finished_run(tmp_path)
    assert check_run(run.path).ok
    (run.path / "build-attempt-1.log").write_text("[1/1] done, quietly edited\n")
    (run.path / "01-detect.ipynb").unlink()
    (run.path / "extra.txt").write_text("added later")
    result = check_run(run.path)
    statuses = {f.path: f.status for f in result.files}
    assert not result.ok
    assert statuses["build-attempt-1.log"] == CHANGED and statuses["01-detect.ipynb"] == MISSING
    assert statuses["extra.txt"] == UNLISTED
    assert main(["check", str(run.path)]) == 1


def test_check_catches_a_manifest_rewritten_to_match_a_tampered_file(tmp_path):
    run = finished_run(tmp_path)
    (run.path / "build-attempt-1.log").write_text("forged\n")
    manifest = json.loads(run.layout.manifest.read_text())
    manifest["files"]["build-attempt-1.log"]["sha256"] = sha256_of(run.path / "build-attempt-1.log")
    run.layout.manifest.write_text(json.dumps(manifest))
    result = check_run(run.path)
    assert not result.ok and any("disagree" in p for p in result.problems)


def test_tampered_wheel_is_caught_against_the_attestation(tmp_path):
    run = finished_run(tmp_path)
    (run.path / "wheelhouse/attempt-1/tiny-0.1-py3-none-any.whl").write_bytes(b"PK evil")
    result = check_run(run.path)
    assert any("wheel" in p and "subject" in p for p in result.problems)


def test_a_wheel_left_out_on_purpose_is_absent_not_changed(tmp_path):
    run = finished_run(tmp_path)
    shutil.rmtree(run.path / "wheelhouse")
    assert not check_run(run.path).ok
    allowed = check_run(run.path, allow_missing=["wheelhouse/*"])
    assert allowed.ok and [f.status for f in allowed.files if f.path.startswith("wheelhouse/")] == [ABSENT]


def test_retroactive_attestation_amends_the_manifest_and_refuses_to_launder(tmp_path):
    run = finished_run(tmp_path)
    run.layout.attestation.unlink()
    manifest = json.loads(run.layout.manifest.read_text())
    del manifest["files"][ATTESTATION]
    run.layout.manifest.write_text(json.dumps(manifest))
    shutil.rmtree(run.path / "wheelhouse")
    assert main(["attest", str(run.path), "--exclude", "wheelhouse/*"]) == 0
    amended = json.loads(run.layout.manifest.read_text())
    assert ATTESTATION in amended["files"] and list(amended["excluded"]) == ["wheelhouse/attempt-1/tiny-0.1-py3-none-any.whl"]
    assert amended["amendments"][0]["previous_sha256"]
    assert json.loads(run.layout.attestation.read_text())["predicate"]["buildDefinition"]["internalParameters"][
        "attestation"]["retroactive"] is True
    assert check_run(run.path).ok
    (run.path / "build-attempt-1.log").write_text("changed\n")
    with pytest.raises(ValueError, match="build-attempt-1.log"):
        amend_manifest(run.path, [], "again")


@pytest.mark.parametrize("run_dir", REFERENCE_RUNS, ids=lambda p: p.name)
def test_reference_runs_check_ok_with_their_wheels_left_out(run_dir):
    result = check_run(run_dir)
    assert result.ok, result.lines()
    assert {f.status for f in result.files if f.path.startswith("wheelhouse/")} == {ABSENT}


def test_report_links_every_executed_notebook(tmp_path):
    run_dir = tmp_path / REFERENCE_RUNS[0].name
    shutil.copytree(REFERENCE_RUNS[0], run_dir, ignore=shutil.ignore_patterns("report"))
    index = Path(write_report(run_dir))
    html = index.read_text()
    for notebook in run_dir.glob("*.ipynb"):
        assert f'href="{notebook.stem}.html"' in html and (index.parent / f"{notebook.stem}.html").is_file()
    assert "NVIDIA H200" in html and "data:image/png;base64," in html and "ok (" in html
    # the plot's alt text says what it shows (reference run 010438: 58.6 -> 940.1 t/s generation)
    assert 'alt="Throughput by layers offloaded to the GPU: token generation from 58.6 tokens/s at 0 layers' in html
    assert check_run(run_dir).ok  # report/ is derived, not part of the archive


@pytest.mark.long
def test_fleet_view_of_the_reference_runs(tmp_path):
    runs = expand_run_dirs([str(REFERENCE / "2026*")])
    assert runs == REFERENCE_RUNS
    first = fleet_row(REFERENCE / "20261122T010438Z-vm")
    assert (first.gpu, first.toolkit, first.outcome, first.full_offload_layers) == ("NVIDIA H200", "13.0.88", "ok", 17)
    assert first.tg_full_offload == 940.1 and first.tg_no_offload == 58.6
    retried = fleet_row(REFERENCE / "20261122T011010Z-vm")
    assert retried.attempts == 2 and retried.wheel_reused and retried.cuda_architectures == "90"
    csv, png = write_outputs(fleet_table(runs), tmp_path)
    assert csv.read_text().count("\n") == len(runs) + 1 and png.stat().st_size > 10_000
