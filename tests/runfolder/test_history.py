import shutil
from pathlib import Path

import pytest

from playbook.runfolder.history import archive_rerun, outputs_from
from playbook.runfolder.layout import Step, owner_of

ROOT = Path(__file__).resolve().parents[2]
TWO_ATTEMPTS = ROOT / "outputs" / "reference" / "20261122T011010Z-vm"  # build, verify, repair, build, verify


@pytest.fixture
def run(tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(TWO_ATTEMPTS, copy, ignore=shutil.ignore_patterns("report"))
    return copy


def names(paths, run):
    return sorted(str(p.relative_to(run)) for p in paths)


@pytest.mark.parametrize("name, position", [
    ("01-detect.ipynb", (0, 1)), ("detect.json", (0, 1)), ("plan-attempt-1.json", (0, 2)), ("plan.json", (0, 2)),
    ("03-build-attempt-2.ipynb", (2, 3)), ("build-attempt-2.log", (2, 3)), ("wheelhouse/attempt-2", (2, 3)),
    ("05-verify-attempt-1.ipynb", (1, 4)), ("throughput-attempt-1.png", (1, 4)), ("verify-logs/attempt-1", (1, 4)),
    ("llama-bench-attempt-1.log", (1, 4)), ("04-repair-attempt-1.ipynb", (1, 5)), ("plan-attempt-2.json", (1, 5)),
    ("run.json", None), ("manifest.json", None), ("params.json", None), ("provenance.json", None),
    ("history/001-detect/detect.json", None),
])
def test_position_in_the_chain(name, position):
    owner = owner_of(Path(name))
    assert (None if owner is None else (owner.position.attempt, owner.position.order)) == position


def test_a_first_execution_archives_nothing(tmp_path):
    (tmp_path / "run.json").write_text("{}")
    (tmp_path / "detect.json").write_text("{}")
    assert archive_rerun(tmp_path, Step.CONFIGURE) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detect.json", "run.json"]


def test_configure_again_keeps_the_old_plan_and_everything_after_it(run):
    before = {p.relative_to(run) for p in run.rglob("*") if p.is_file()}
    kept = archive_rerun(run, Step.CONFIGURE)
    assert kept == run / "history" / "001-configure"
    left = sorted(p.name for p in run.iterdir())
    assert left == ["01-detect.ipynb", "detect.json", "history", "manifest.json", "params.json", "provenance.json",
                    "run.json"]
    moved = {p.relative_to(kept) for p in kept.rglob("*") if p.is_file()}
    assert moved | {Path(n) for n in left if n != "history"} == before  # nothing lost
    assert (kept / "plan-attempt-2.json").is_file() and (kept / "verify-logs" / "attempt-2").is_dir()


def test_verify_again_keeps_only_that_attempt(run):
    assert names(outputs_from(run, Step.VERIFY, 2), run) == [
        "05-verify-attempt-2.ipynb", "throughput-attempt-2.csv", "throughput-attempt-2.png",
        "throughput-attempt-2.svg", "verify-attempt-2.json", "verify-logs/attempt-2"]
    kept = archive_rerun(run, Step.VERIFY, 2)
    assert kept.name == "001-verify-attempt-2"
    assert (run / "verify-attempt-1.json").is_file() and not (run / "verify-attempt-2.json").exists()
    assert (kept / "verify-logs" / "attempt-2").is_dir()


def test_repair_again_moves_the_attempt_it_started(run):
    moved = names(outputs_from(run, Step.REPAIR, 1), run)
    assert "plan-attempt-2.json" in moved and "03-build-attempt-2.ipynb" in moved and "diagnosis.json" in moved
    assert not {"build-attempt-1.json", "verify-attempt-1.json", "plan-attempt-1.json"} & set(moved)


def test_each_rerun_gets_its_own_history_folder(run):
    first = archive_rerun(run, Step.VERIFY, 2)
    (run / "verify-attempt-2.json").write_text("{}")
    second = archive_rerun(run, Step.VERIFY, 2)
    assert (first.name, second.name) == ("001-verify-attempt-2", "002-verify-attempt-2")
    assert (second / "verify-attempt-2.json").read_text() == "{}"
