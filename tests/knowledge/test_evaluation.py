"""The diagnosis corpus, scored (playbook/knowledge/evaluation.py): recall per family on real logs, no finding
on clean ones. The tables of both parts are printed at the end of the pytest run; the test part must meet
the goal, and docs/knowledge-base.md shows the same tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from playbook.knowledge.evaluation import (
    FROZEN_LABEL,
    GOAL,
    FrozenPartRefused,
    Goal,
    evaluate,
    frozen_file_hashes,
    main,
    parse_corpus_log,
    readme_block,
    score,
)

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "corpus"


# The goal as issue 22 set it, written here and not read from the code: lowering GOAL in
# playbook/knowledge/evaluation.py must not lower what these tests hold the corpus to (issue 34).
ISSUE_22_GOAL = Goal(overall_recall=0.90, family_recall=0.80, clean_findings=0)


def test_the_code_s_goal_is_not_lower_than_the_issue_s():
    assert GOAL.overall_recall >= ISSUE_22_GOAL.overall_recall
    assert GOAL.family_recall >= ISSUE_22_GOAL.family_recall
    assert GOAL.clean_findings <= ISSUE_22_GOAL.clean_findings


@pytest.fixture(scope="module")
def scores(diagnosis_tables):
    results = {part: evaluate(CORPUS, part) for part in ("train", "test")}
    diagnosis_tables[:] = [results["train"].table(), results["test"].table()]
    return results


# The goal (issue 22): >= 90% overall and >= 80% in every family on test, no finding on clean logs. Every family and the
# clean logs meet it: a change that takes a family below 80%, or finds anything in a clean log, fails here.
@pytest.mark.long
def test_test_part_meets_the_family_and_clean_log_goals(scores):
    test = scores["test"]
    if not test.failure_logs:
        pytest.skip("the corpus has no test logs yet")
    short = [line for line in test.meets(ISSUE_22_GOAL) if "overall recall" not in line]
    assert not short, "the test part misses the goal:\n" + "\n".join(short)
    assert test.clean_findings == 0


# Precision first (issue 33): the similarity stage names a log only where its measured precision is 97%
# (leaving one project out), not 90% (leaving one thread out); the logs it no longer names are unrecognised
# instead of named, some of them wrongly. That took the test part's overall recall below the goal
# (docs/knowledge-base.md's table), and its rules were not tuned back to it: the test part is read for its figures, not written from.
# This marks the shortfall, and fails (strict) once the overall recall meets the goal again: then drop it.
# (The floor of logs named that was ratcheted here after every round is gone for the same reason: a change of
# the test part's figures shows as a difference from docs/knowledge-base.md's table, test_readme_shows_the_evaluation.)
@pytest.mark.xfail(strict=True, reason="precision first: the test part's overall recall is below 90% (issue 33)")
def test_test_part_meets_the_overall_recall_goal(scores):
    assert scores["test"].recall >= ISSUE_22_GOAL.overall_recall


def test_clean_train_logs_give_no_finding(scores):
    assert scores["train"].clean_findings == 0, [f.missed for f in scores["train"].families.values()]


def test_readme_shows_the_evaluation(scores):
    """After changing patterns or the corpus: `python -m playbook.knowledge.evaluation --update-readme`."""
    text = (REPO / "docs" / "knowledge-base.md").read_text(encoding="utf-8")
    assert readme_block(scores["train"], scores["test"]) in text


def _write(root: Path, part: str, family: str, name: str, expected: str, body: str) -> None:
    folder = root / part / family
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(f"# source: https://github.com/o/r/issues/{name[:2]}\n# expected: {expected}\n{body}",
                               encoding="utf-8")


def test_scoring_counts_the_first_finding_and_any_finding_on_clean_logs(tmp_path):
    cuda = "nvcc fatal   : Unsupported gpu architecture 'compute_20'\n"
    _write(tmp_path, "train", "cuda-toolkit", "01.txt", "cuda-arch-unsupported", cuda)
    _write(tmp_path, "train", "cuda-toolkit", "02.txt", "cublas-missing", cuda)  # named, but not what it expects
    _write(tmp_path, "train", "cuda-toolkit", "03.txt", "cublas-missing, cuda-arch-unsupported", cuda)
    _write(tmp_path, "train", "clean", "04.txt", "none", "Successfully installed llama-cpp-python-0.3.16\n")
    _write(tmp_path, "train", "clean", "05.txt", "none", "error: something plainly failed here\n")
    result = evaluate(tmp_path, "train")
    family = result.families["cuda-toolkit"]
    assert (family.logs, family.named, family.wrong, family.missed) == (3, 2, 1, ["02.txt"])
    assert (result.families["clean"].logs, result.clean_findings) == (2, 1)
    assert result.recall == pytest.approx(2 / 3)
    assert (result.wrong, result.precision, result.wrong_rate) == (1, pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert result.meets(Goal(0.5, 0.5, 1)) == []
    assert result.meets(ISSUE_22_GOAL) == ["train: overall recall 67% < 90%", "train: cuda-toolkit recall 67% < 80%",
                                  "train: 1 finding(s) on clean logs"]
    assert "| `cuda-toolkit` | 3 | 2 | 67% | 1 | 33.3% | 66.7% | - |" in result.table()
    assert "| `clean` | 2 | - | - | - | - | - | 1 |" in result.table()


def test_an_unrecognised_log_is_a_miss_but_not_a_wrong_name(tmp_path):
    _write(tmp_path, "train", "build-tooling", "01.txt", "cuda-arch-unsupported",
           "error: something nobody has a rule for\n")
    _write(tmp_path, "train", "build-tooling", "02.txt", "cuda-arch-unsupported", "all went well\n")
    family = evaluate(tmp_path, "train").families["build-tooling"]
    assert (family.named, family.wrong, family.unrecognised, family.recall) == (0, 0, 1, 0.0)
    assert (family.precision, family.wrong_rate) == (1.0, 0.0)  # nothing named, so nothing named wrong


def test_a_corpus_file_without_its_header_is_refused(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("just a log\n", encoding="utf-8")
    with pytest.raises(ValueError, match="# source: URL"):
        parse_corpus_log(path, "train", "cpu")


def test_command_line_prints_the_train_table(tmp_path, capsys):
    _write(tmp_path, "train", "cpu", "01.txt", "illegal-instruction", "Illegal instruction (core dumped)\n")
    assert main([str(tmp_path), "--part", "train"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| `cpu` \| 1 \| 1 \| 100% \| 0 \| 0\.0% \| 100\.0% \| - \|", out) and "goal met" in out


def test_leaving_out_a_whole_project_is_labelled_and_refused_for_the_readme(tmp_path, capsys):
    _write(tmp_path, "train", "cpu", "01.txt", "illegal-instruction", "Illegal instruction (core dumped)\n")
    assert main([str(tmp_path), "--part", "train", "--leave-out", "project"]) == 0
    assert "| family (train, leave-one-project-out) |" in capsys.readouterr().out
    assert evaluate(tmp_path, "train", "project").leave_out == "project"
    assert main([str(tmp_path), "--part", "train", "--leave-out", "project", "--update-readme"]) == 2


def test_score_of_no_logs_is_empty():
    assert score([], "test").failure_logs == 0


# The frozen part (issue 33): tried here on a synthetic one under tmp_path, never on tests/data/corpus/frozen,
# whose table is read once, at the end of an issue.
def _frozen(root: Path) -> Path:
    """A synthetic frozen part under ``root``: a CPU failure, a clean log, a README, and the manifest of them."""
    _write(root, "frozen", "cpu", "01.txt", "illegal-instruction", "Illegal instruction (core dumped)\n")
    _write(root, "frozen", "clean", "02.txt", "none", "Successfully installed llama-cpp-python-0.3.16\n")
    folder = root / "frozen"
    (folder / "README.md").write_text("frozen\n", encoding="utf-8")
    manifest = {"frozen_on": "2026-11-29", "files": frozen_file_hashes(folder)}
    (folder / "MANIFEST.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_frozen_part_prints_only_its_aggregate_table(tmp_path, capsys):
    folder = _frozen(tmp_path)
    assert sorted(json.loads((folder / "MANIFEST.json").read_text())["files"]) == ["clean/02.txt", "cpu/01.txt"]
    assert main([str(tmp_path), "--part", "frozen"]) == 0
    out = capsys.readouterr().out
    assert f"| family ({FROZEN_LABEL}) |" in out
    assert re.search(r"\| `cpu` \| 1 \| 1 \| 100% \| 0 \| 0\.0% \| 100\.0% \| - \|", out)
    assert "| `clean` | 1 | - | - | - | - | - | 0 |" in out
    assert "01.txt" not in out and "02.txt" not in out  # no per-case output


def test_frozen_part_is_never_read_by_default(tmp_path, capsys):
    _frozen(tmp_path)
    _write(tmp_path, "train", "cpu", "03.txt", "illegal-instruction", "Illegal instruction (core dumped)\n")
    main([str(tmp_path)])
    assert FROZEN_LABEL not in capsys.readouterr().out


def test_a_tampered_frozen_file_is_refused(tmp_path, capsys):
    folder = _frozen(tmp_path)
    log = folder / "cpu" / "01.txt"
    log.write_text(log.read_text(encoding="utf-8").replace("illegal-instruction", "cpu-amx-fault"), encoding="utf-8")
    assert main([str(tmp_path), "--part", "frozen"]) == 2
    captured = capsys.readouterr()
    assert "cpu/01.txt: changed since it was frozen" in captured.err and FROZEN_LABEL not in captured.out
    with pytest.raises(FrozenPartRefused, match="cpu/01.txt"):
        evaluate(tmp_path, "frozen")


def test_a_file_added_to_the_frozen_part_is_refused(tmp_path, capsys):
    _frozen(tmp_path)
    _write(tmp_path, "frozen", "runtime", "04.txt", "process-crash", "Segmentation fault (core dumped)\n")
    assert main([str(tmp_path), "--part", "frozen"]) == 2
    assert "runtime/04.txt: added after the part was frozen" in capsys.readouterr().err


def test_a_file_missing_from_the_frozen_part_is_refused(tmp_path):
    folder = _frozen(tmp_path)
    (folder / "clean" / "02.txt").unlink()
    with pytest.raises(FrozenPartRefused, match="clean/02.txt: missing"):
        evaluate(tmp_path, "frozen")


def test_a_frozen_part_without_its_manifest_is_refused(tmp_path):
    (_frozen(tmp_path) / "MANIFEST.json").unlink()
    with pytest.raises(FrozenPartRefused, match="no manifest"):
        evaluate(tmp_path, "frozen")
