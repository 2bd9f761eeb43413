"""Guide 002's fork (JamePeng's llama-cpp-python, which adds Qwen3VLChatHandler) built for real: a tree assembled
from git mirrors by scripts/assemble-fork-tree.py, built CPU-only with params/fork.yaml, archived with
scripts/archive-run.py. Rebuilding it takes the fork's and llama.cpp's git folders and about 45 minutes on the
project's 2-core VM, so these tests read the archived run instead, and check that the README quotes it."""

from __future__ import annotations

import re
from pathlib import Path

from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Layout, Step
from playbook.serialization import read_json
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan
from playbook.verify.step import VerifyResult
from playbook.verify.units.import_probe import IMPORT_PROBE, MTMD_SYMBOL
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "outputs" / "reference" / "20261125T144314Z-vm"
FORK_COMMIT = "c7693b48df57ec5f9a970dded2e599b956727421"  # JamePeng/llama-cpp-python: "Update Submodule vendor/llama.cpp"
LLAMA_CPP_PIN = "b21e4de74567f5eef213765c9476a843c2e43f0d"  # the gitlink vendor/llama.cpp of that commit
QWEN3VL = "llama_cpp.llama_chat_format.Qwen3VLChatHandler"


def test_the_archived_fork_build_has_the_forks_pins_its_symbol_and_a_passing_verify():
    layout, record = Layout(RUN), RunFolder(RUN).record()
    assert record.outcome is Outcome.OK
    build = read_json(BuildResult, layout.build_result(1))
    assert build.ok and (build.source.kind, build.source.version) == ("tree", "0.3.48")
    assert build.source.commits == {".": FORK_COMMIT, "vendor/llama.cpp": LLAMA_CPP_PIN}
    assert build.wheel is not None and build.wheel.name.startswith("llama_cpp_python-0.3.48-")
    assert build.progress.done == build.progress.total > 300 and not build.reused_wheel

    plan = read_json(BuildPlan, layout.plan(1))
    assert plan.backend == "cpu" and "-DGGML_NATIVE=OFF" in plan.cmake_args
    assert plan.multimodal and QWEN3VL in plan.required_symbols
    assert not any("MTMD_BUILD" in a or "LLAVA_BUILD" in a for a in plan.cmake_args)  # the fork's default: built

    verify = read_json(VerifyResult, layout.verify_result(1))
    assert verify.ok and verify.findings == [] and verify.measured(IMPORT_PROBE).outcome.result["version"] == "0.3.48"
    points = verify.measured(OFFLOAD_SWEEP).points
    assert [p.status for p in points] == ["ok"] and points[0].tg_tokens_per_s > 0
    symbols = layout.unit_files(1, "symbols").log().read_text()
    assert QWEN3VL in symbols.splitlines()[0] and MTMD_SYMBOL in symbols.splitlines()[0]
    assert "lib/libmtmd.so" in symbols and 'PLAYBOOK_RESULT {"missing": {}}' in symbols


def test_the_first_verify_failed_on_the_probe_and_is_kept_in_history():
    record = RunFolder(RUN).record()
    verifies = [s for s in record.steps if s.step is Step.VERIFY]
    assert [s.outcome for s in verifies] == [Outcome.FAILED, Outcome.OK]
    earlier = RUN / verifies[-1].earlier_kept
    bench = (earlier / "verify-logs" / "attempt-1" / "bench-ngl-0.log").read_text()
    assert "this llama_cpp has no LLAMA_LOAD_MODE_AUTO" in bench


def test_the_readme_quotes_the_archived_fork_build():
    readme = (ROOT / "docs" / "reference-runs.md").read_text()
    (paragraph,) = [p for p in readme.split("\n\n") if f"outputs/reference/{RUN.name}" in p]
    build = read_json(BuildResult, Layout(RUN).build_result(1))
    text = " ".join(paragraph.split())
    assert f"took {build.duration_s:.0f} s ({build.progress.total} ninja steps)" in text
    assert f"llama-cpp-python {build.source.version} (commit `{FORK_COMMIT[:7]}`)" in text
    assert f"at the commit it pins (`{LLAMA_CPP_PIN[:7]}`)" in text
    assert QWEN3VL in text
    command = re.search(r"`(params/fork\.yaml[^`]*)`", text)
    assert command is not None
    params_source = RunFolder(RUN).record().params_source  # what the run was given, source.path among it
    assert params_source.startswith("params/fork.yaml ")
    assert all(f"--set {setting.strip()}" in params_source for setting in command.group(1).split("--set ")[1:])
