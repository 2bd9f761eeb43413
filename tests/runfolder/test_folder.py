import datetime as dt
import hashlib
import json

from playbook.params import load_params
from playbook.runfolder.folder import RunFolder, StepRecord, new_run_id


def test_run_id_is_utc_time_and_host():
    when = dt.datetime(2026, 11, 22, 1, 2, 3, tzinfo=dt.timezone.utc)
    assert new_run_id(when, "gpu box_1") == "20261122T010203Z-gpu-box-1"


def test_run_folder_never_reuses_a_folder(tmp_path):
    params = load_params()
    first = RunFolder.create(tmp_path, params, "params/default.yaml")
    second = RunFolder.create(tmp_path, params, "params/default.yaml")
    assert first.path != second.path and first.path.is_dir() and second.path.is_dir()
    assert second.params() == params


def test_manifest_hashes_every_file(tmp_path):
    run = RunFolder.create(tmp_path, load_params(), "params/default.yaml")
    (run.path / "build-attempt-1.log").write_text("log")
    (run.path / "wheelhouse").mkdir()
    (run.path / "wheelhouse" / "x.whl").write_bytes(b"wheel")
    record = run.record()
    record.steps.append(StepRecord("detect", "01-detect.ipynb", "ok", "2026-11-22T00:00:00+00:00", 1.5))
    run.save_record(record)
    manifest = json.loads(run.write_manifest().read_text())
    assert manifest["run_id"] == run.run_id
    assert manifest["parameters"]["source"]["version"] == "0.3.36"
    assert manifest["steps"][0]["step"] == "detect" and manifest["steps"][0]["duration_s"] == 1.5
    assert set(manifest["files"]) == {"params.json", "run.json", "build-attempt-1.log", "wheelhouse/x.whl"}
    assert manifest["files"]["build-attempt-1.log"] == {"sha256": hashlib.sha256(b"log").hexdigest(), "size_bytes": 3}


def test_a_relative_run_folder_is_held_absolute(tmp_path, monkeypatch):
    """`playbook resume outputs/mine`: the step notebooks run inside the folder, so a relative path
    handed to them would point at outputs/mine/outputs/mine."""
    monkeypatch.chdir(tmp_path)
    run = RunFolder("outputs/mine")
    assert run.path.is_absolute() and run.path == tmp_path / "outputs" / "mine"
