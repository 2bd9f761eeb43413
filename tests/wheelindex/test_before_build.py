"""``playbook run`` with ``wheel_index.sources``: the build step looks in the indexes with ``playbook install``'s own
choice, download and check before it builds. A real index served on localhost, real wheels (small ones pip builds
here; the real CPU wheel in the slow tier), the real chain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cmake_project
from test_wheelindex import index_server, record_of, small_wheel, verified_run  # noqa: F401  (index_server: a fixture)

from playbook.errors import ParameterError
from playbook.localhost import free_port
from playbook.params import load_params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.wheelindex import index as wheel_index
from playbook.wheelindex.before_build import build_or_install, not_from_an_index

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
VOCABULARY = ROOT / "tests" / "data" / "ggml-vocab-llama-spm.gguf"


@pytest.mark.parametrize(("source", "said"), [
    ("ftp://wheels.example/", r"wheel_index.sources\[0\] = 'ftp://wheels.example/': ftp:// is not an index"),
    ("/nonexistent/wheels", (r"wheel_index.sources\[0\] = '/nonexistent/wheels' is not a folder; give a folder, "
                             r"http\(s\)://host/path, s3://bucket/prefix or upstream")),
    ("", r"wheel_index.sources\[0\] is empty"),
    ("https://", r"wheel_index.sources\[0\] = 'https://' names no host"),
])
def test_a_source_that_is_no_index_is_refused_naming_the_key(source, said):
    with pytest.raises(ParameterError, match=said):
        load_params(None, [f"wheel_index.sources=['{source}']"])


def test_the_group_takes_only_its_own_keys_and_types():
    with pytest.raises(ParameterError, match=r"unknown parameter 'wheel_index.source'; accepted keys here: local, "
                                             r"sources"):
        load_params(None, ["wheel_index.source=['x']"])
    with pytest.raises(ParameterError, match=r"parameter wheel_index.sources must be a list"):
        load_params(None, ["wheel_index.sources=http://wheels.example/"])
    assert load_params(None, ["wheel_index.sources=['s3://team/wheels']"]).wheel_index.sources == ["s3://team/wheels"]


def test_run_refuses_a_bad_source_before_a_run_folder_exists(tmp_path):
    done = subprocess.run([PY, "-m", "playbook", "run", "--params", "params/cpu.yaml", "--set",
                           "wheel_index.sources=['ftp://wheels.example/']", "--output", str(tmp_path / "outputs")],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert done.returncode != 0
    assert "wheel_index.sources[0] = 'ftp://wheels.example/': ftp:// is not an index" in done.stderr
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").iterdir())


def run_with_sources(tmp_path: Path, facts, sources: list[str], *overrides: str) -> RunFolder:  # type: ignore[no-untyped-def]
    """A run folder at the build step: detect's facts and configure's plan written, a CPU build of a small source
    tree whose wheel the wheel cache already holds (the build, when it runs, reuses it: nothing compiles)."""
    from playbook.steps.build import toolchain
    from playbook.steps.caches import fingerprint, store_wheel
    from playbook.steps.configure import configure
    from playbook.steps.source import resolve_params_source

    tree = cmake_project(tmp_path)
    cache = tmp_path / "cache"
    params = load_params(None, ["backend=cpu", "source.kind=path", f"source.path={tree}", f"build.cache_dir={cache}",
                                f"wheel_index.sources={json.dumps(sources)}", *overrides])
    run = RunFolder.create_at(tmp_path / "20261201T000000Z-index", params, "test")
    plan = configure(facts, params)
    run.write(facts, run.layout.detect_facts)
    run.write(plan, run.layout.plan(1))
    key = fingerprint(resolve_params_source(params), plan.cmake_args, plan.env, toolchain(facts, plan))
    store_wheel(cache, key, small_wheel(tmp_path, "built-here"), "an-earlier-run")
    return run


def test_nothing_that_passes_builds_as_before_and_says_why_in_one_line(tmp_path, this_machine, index_server):  # noqa: F811
    root, url = index_server
    store = wheel_index.open_store(root)
    lacking = small_wheel(tmp_path, "lacking")
    fits = small_wheel(tmp_path, "fits-but-fails")
    wheel_index.publish(store, record_of(lacking, "cpu", ("avx512_not_on_any_cpu",)), lacking, VOCABULARY)
    wheel_index.publish(store, record_of(fits, "cpu"), fits)
    dead = f"http://127.0.0.1:{free_port()}"
    run = run_with_sources(tmp_path, this_machine, [dead, url])
    run.begin_step(Step.BUILD, 1)
    result = build_or_install(run, 1)

    assert result.ok and result.reused_wheel and result.published is None  # the build ran (its wheel cache answered)
    choice = json.loads(run.layout.wheel_choice(1).read_text())
    assert choice["taken"] == ""
    assert choice["skipped_sources"] == [f"index {dead} skipped: {dead} did not answer: [Errno 111] Connection refused"]
    reasons = [v["reason"] for v in choice["verdicts"]]
    assert any("avx512_not_on_any_cpu, which this CPU" in r for r in reasons)
    assert any(r.startswith("failed its check here: ") for r in reasons)  # the small wheel's llama_cpp has no library
    assert result.index_note == choice["built_because"] and "\n" not in result.index_note
    assert result.index_note.startswith("no published wheel passed: cpu-") and "failed its check here" in \
        result.index_note
    [build] = [s for s in run.record().steps if s.step is Step.BUILD]
    assert build.outcome is Outcome.REUSED and build.message.endswith(f"({result.index_note})")
    assert run.layout.wheel_choice(1).name == "wheel-choice-attempt-1.json"
    from playbook.interfaces.tables import build_summary

    assert build_summary(result).loc["wheel index", "value"] == f"built: {result.index_note}"


def test_an_empty_index_and_a_plan_no_record_promises_build_with_their_reason(tmp_path, this_machine, index_server):  # noqa: F811
    _, url = index_server
    run = run_with_sources(tmp_path, this_machine, [url], "wheel_index.local=false")
    result = build_or_install(run, 1)
    assert result.ok and result.index_note == "no published wheel in the indexes (1 of 1 indexes answered)"
    assert not_from_an_index(load_params(None, ["build.multimodal=true", "verify.llama_bench=true"])) == (
        "build.multimodal, verify.llama_bench asks for what a published wheel's record does not promise: building "
        "from the source")


def test_a_later_attempt_never_looks_in_the_indexes(tmp_path, this_machine, index_server):  # noqa: F811
    """Attempt 2 follows a failed build or verify: the repaired plan is built."""
    _, url = index_server
    run = run_with_sources(tmp_path, this_machine, [url])
    plan = json.loads(run.layout.plan(1).read_text())
    plan["attempt"] = 2
    run.layout.plan(2).write_text(json.dumps(plan))
    result = build_or_install(run, 2)
    assert result.ok and result.index_note == "" and not run.layout.wheel_choice(2).exists()


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
def test_run_installs_a_published_real_wheel_instead_of_building(tmp_path, this_machine, cpu_wheel,
                                                                 index_server):  # noqa: F811
    """The real CPU wheel, published with its record, served on localhost: `playbook run` with the index configured
    checks it with verify's units, installs it instead of building, and verify passes on it."""
    from playbook.wheelindex.metadata import record_from_run

    root, url = index_server
    record, wheel = record_from_run(verified_run(tmp_path / "first", cpu_wheel, this_machine))
    wheel_index.publish(wheel_index.open_store(root), record, wheel, VOCABULARY)
    outputs = tmp_path / "outputs"
    done = subprocess.run([PY, "-m", "playbook", "run", "--params", "params/cpu.yaml",
                           "--set", f"build.cache_dir={tmp_path / 'second-cache'}",
                           "--set", f"wheel_index.sources=['{url}']", "--output", str(outputs)],
                          capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT)
    [run_dir] = [p.parent for p in outputs.glob("*/run.json")]
    run = RunFolder(run_dir)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    build = json.loads(run.layout.build_result(1).read_text())
    assert build["published"]["variant"] == record.variant and build["published"]["index_url"].startswith(url)
    assert build["wheel"]["sha256"] == record.sha256 and build["command"] == []  # nothing was built
    choice = json.loads(run.layout.wheel_choice(1).read_text())
    assert choice["taken"] == record.variant and choice["verdicts"][-1]["reason"].startswith("taken: passed its check")
    steps = {s.step: s for s in run.record().steps}
    assert steps[Step.BUILD].outcome is Outcome.REUSED
    assert steps[Step.BUILD].message.startswith(f"installed the published wheel {record.variant} from {url}")
    assert steps[Step.VERIFY].outcome is Outcome.OK
    assert not (tmp_path / "second-cache" / "build").exists()  # no build folder: nothing compiled
    wheel_line = next(line for line in done.stdout.splitlines() if line.startswith("wheel: "))
    assert f"(installed from the index {url}, checked in " in wheel_line and "built in" not in wheel_line
    from playbook.interfaces.tables import build_summary
    from playbook.steps.build import BuildResult

    shown = build_summary(run.read(BuildResult, run.layout.build_result(1)))
    assert shown.loc["outcome", "value"] == "installed from a wheel index instead of building"
