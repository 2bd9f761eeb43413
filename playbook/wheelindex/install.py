"""``playbook install``: a verified wheel for this machine from the indexes, checked here, installed; a build
when nothing fits or the check fails.

1. What the machine needs: detect's facts and the target interpreter's wheel tags (:mod:`.select`).
2. The candidates: the local wheel cache (an index in the cache folder that every wheel checked or built here
   joins), then each team index, then upstream ones: an index without the playbook's catalogue is read as a plain
   PEP 503 index (:mod:`.upstream`; ``upstream`` names llama-cpp-python's own folders for this machine); an index
   that does not answer is skipped with one line.
3. The best fitting wheel is downloaded to a temporary name, its sha256 checked against the index entry and
   its record, and renamed: a wrong or interrupted download is refused and the next candidate tried.
4. The check: verify's own units on it (import in a child process, the model, a short offload sweep with
   throughput), in a check folder of the cache.
5. pip installs the complete, checked file into ``--into VENV`` or the running environment.
Nothing fits, or every fitting wheel failed: the chain builds one (``--publish`` then publishes it).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playbook.backends import registry
from playbook.errors import ExitCode, PlaybookError
from playbook.facts import Facts
from playbook.process import run_captured
from playbook.serialization import write_json
from playbook.wheelindex import index as wheel_index
from playbook.wheelindex.metadata import PROJECT, WheelRecord
from playbook.wheelindex.select import Candidate, MachineNeeds, Verdict, choose

LOCAL_INDEX = "wheel-index"  # in the cache folder: the wheels checked or built on this machine
CHECKS = "wheel-checks"  # in the cache folder: one folder per checked wheel (verify's logs, the check's record)
Log = Callable[[str], None]


class InstallFailed(PlaybookError):
    """No wheel could be installed: none fitted and building was off, or pip failed."""

    exit_code = ExitCode.RUN_FAILED


@dataclass
class CheckResult:
    ok: bool
    summary: str
    folder: str
    duration_s: float
    findings: list[str] = field(default_factory=list)


@dataclass
class InstallRecord:
    """What ``playbook install`` decided and did: written as install.json in the check folder."""

    needs: MachineNeeds
    sources: list[str]
    skipped_sources: list[str]
    verdicts: list[Verdict]
    chosen: WheelRecord | None = None
    chosen_from: str = ""
    index_url: str = ""
    """The chosen wheel's PEP 503 index (what a project's lines name)."""
    check: CheckResult | None = None
    installed_into: str = ""
    built_run: str = ""
    """The run folder of the fallback build, when there was one."""
    published_to: str = ""
    duration_s: float = 0.0


def python_of(venv: Path | None) -> str:
    if venv is None:
        return sys.executable
    for candidate in (venv / "bin" / "python", venv / "Scripts" / "python.exe"):
        if candidate.is_file():
            return str(candidate)
    raise PlaybookError(f"--into {venv}: no bin/python in it; create the environment first (python -m venv {venv})")


def accepted_tags(python: str) -> list[str]:
    """The wheel tags ``python`` accepts, best first (its version; this machine's platforms)."""
    from packaging import tags

    asked = run_captured([python, "-c", "import sys; print(sys.implementation.name, *sys.version_info[:2])"],
                         timeout_s=60)
    if asked.returncode != 0:
        raise PlaybookError(f"{python} did not start: {asked.stderr.strip()[-300:]}")
    implementation, major, minor = asked.stdout.split()
    version = (int(major), int(minor))
    platforms = list(tags.platform_tags())
    found = (list(tags.cpython_tags(version, platforms=platforms)) if implementation == "cpython"
             else list(tags.generic_tags(platforms=platforms)))
    found += list(tags.compatible_tags(version, platforms=platforms))
    return [str(tag) for tag in found]


def gather(sources: list[str], log: Log) -> tuple[list[Candidate], list[str]]:
    """Every record the sources list (an index without the playbook's catalogue: every wheel its PEP 503 project
    page lists, :func:`.upstream.candidates`), and one line per source that was skipped."""
    from playbook.wheelindex import upstream

    candidates, skipped = [], []
    for source in sources:
        try:
            store = wheel_index.open_store(source)
            catalogue = wheel_index.read_catalogue(store)
            found = ([Candidate(source, record) for record in catalogue.records] if catalogue.records
                     else upstream.candidates(store, source))
        except PlaybookError as error:
            line = f"index {source} skipped: {error}"
            log(line)
            skipped.append(line)
            continue
        candidates += found
    return candidates, skipped


def check_wheel(wheel: Path, record: WheelRecord, facts, params, cache_dir: Path, vocabulary_dir: Path | None,  # type: ignore[no-untyped-def]
                python: str, log: Log) -> CheckResult:
    """verify's units on the wheel, here: the import in a child process, the model, a short offload sweep."""
    from playbook.runfolder.layout import Layout
    from playbook.verify.measurement import Registry
    from playbook.verify.step import VerifyTarget, run_verify
    from playbook.verify.units.cxx_runtime import CXX_RUNTIME
    from playbook.verify.units.import_probe import IMPORT_PROBE
    from playbook.verify.units.model_file import MODEL_FILE
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

    started = time.monotonic()
    folder = cache_dir / CHECKS / record.sha256[:16]
    units = Registry()
    for unit in (IMPORT_PROBE, CXX_RUNTIME, MODEL_FILE, OFFLOAD_SWEEP):
        units.register(unit)
    short = dataclasses.replace(params.verify, sweep_points=2, repetitions=1, prompt_tokens=64, gen_tokens=16,
                                n_gpu_layers=[], llama_bench=False, tune=False, required_symbols=[])
    params = dataclasses.replace(params, verify=short)
    backend_unit = registry.unit(record.backend)
    target = VerifyTarget(expect_gpu=backend_unit.offloads, gpu_present=bool(backend_unit.device(facts)), backend=record.backend,
                          cmake_args=list(record.cmake_args), multimodal=False)
    from playbook.verify.measurement import VerifyRequest

    source = vocabulary_dir if vocabulary_dir is not None else Path(params.source.path or cache_dir / "no-source")
    request = VerifyRequest(Layout(folder), wheel, params, target, source, cache_dir, 1, python=python)
    result = run_verify(request, log, units)
    write_json(result, Layout(folder).verify_result(1))
    return CheckResult(result.ok, result.summary, str(folder), round(time.monotonic() - started, 2),
                       [f.id for f in result.findings])


def pip_install(wheel: Path, python: str, log: Log) -> None:
    """The wheel into the target environment from the complete, checked file; its dependencies from the
    environment's usual index."""
    log(f"installing {wheel.name} into {Path(python).parent.parent}")
    for args in (["--force-reinstall", "--no-deps", str(wheel)], [str(wheel)]):
        done = run_captured([python, "-m", "pip", "install", "--disable-pip-version-check", *args], timeout_s=1800)
        if done.returncode != 0:
            raise InstallFailed(f"pip could not install {wheel.name} into {python}: "
                                + "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:]))


def local_index(cache_dir: Path) -> Path:
    return cache_dir / LOCAL_INDEX


@dataclass
class InstallRequest:
    facts: Facts
    params: object
    sources: list[str]
    into: Path | None = None
    build: bool = True
    publish_to: str = ""
    output_root: Path | None = None
    check: bool = True


def sources_of(params, extra: list[str] = ()) -> list[str]:  # type: ignore[no-untyped-def, assignment]
    """The indexes to look in, in order: this machine's own (``wheel_index.local``), ``wheel_index.sources``, then
    ``extra`` (``playbook install --from``); the word ``upstream`` stays until :func:`search` knows the machine."""
    cache_dir: Path = params.cache_dir
    local = [str(local_index(cache_dir))] if params.wheel_index.local else []
    if local:
        local_index(cache_dir).mkdir(parents=True, exist_ok=True)
    return list(dict.fromkeys([*local, *params.wheel_index.sources, *extra]))


@dataclass
class Found:
    """A published wheel that fits this machine, downloaded whole with its sha256 checked, and passed its check."""

    candidate: Candidate
    wheel: Path
    vocabulary: Path | None
    check: CheckResult | None
    index_url: str
    """The wheel's own PEP 503 index (its variant's)."""


@dataclass
class Search:
    """What a look through the indexes decided: every wheel's verdict with its reason, the indexes skipped, and the
    wheel taken (None: nothing fits, or every fitting wheel was refused or failed its check)."""

    needs: MachineNeeds
    sources: list[str]
    skipped_sources: list[str]
    verdicts: list[Verdict]
    found: Found | None = None

    def why_none(self) -> str:
        """One line: why no wheel was taken."""
        if self.found is not None:
            return ""
        tried = [v for v in self.verdicts if not v.accepted and v.reason.startswith(("refused", "failed"))]
        if tried:
            return f"no published wheel passed: {tried[-1].variant} {tried[-1].reason}"
        fitting = [v for v in self.verdicts if v.accepted]
        if not self.verdicts:
            where = f"{len(self.sources) - len(self.skipped_sources)} of {len(self.sources)} indexes answered"
            return f"no published wheel in the indexes ({where})"
        if not fitting:
            return f"none of {len(self.verdicts)} published wheels fits this machine: {self.verdicts[0].reason}"
        return "no published wheel was taken"


def search(facts: Facts, params, sources: list[str], needs: MachineNeeds, log: Log,  # type: ignore[no-untyped-def]
           check: bool = True) -> Search:
    """The best wheel in ``sources`` that fits ``needs``, downloaded and (``check``) checked with verify's units here;
    the next one when a download is refused or a check fails. Every verdict is logged and kept with its reason."""
    from playbook.wheelindex import upstream

    sources = upstream.expand(sources, needs, params.wheel_index.upstream_url)
    candidates, skipped = gather(sources, log)
    selection = choose(candidates, needs)
    outcome = Search(needs, sources, skipped, list(selection.verdicts))
    log_verdicts(selection.verdicts, log)
    for candidate in selection.ranked:
        try:
            taken = fetch_and_check(candidate, facts, params, check, log)
        except wheel_index.IndexError_ as error:
            outcome.verdicts.append(candidate.verdict(False, f"refused and skipped: {error}"))
            log(f"refused {candidate.label}: {error}")
            continue
        if taken.check is not None and not taken.check.ok:
            outcome.verdicts.append(candidate.verdict(
                False, f"failed its check here: {taken.check.summary} (see {taken.check.folder})"))
            continue
        outcome.verdicts.append(candidate.verdict(True, "taken: " + (
            f"passed its check here in {taken.check.duration_s:.1f} s" if taken.check else "not checked (check off)")))
        outcome.found = taken
        return outcome
    return outcome


REJECTIONS_LOGGED = 8  # per index: a plain index lists every version for every Python; install.json keeps them all


def log_verdicts(verdicts: list[Verdict], log: Log) -> None:
    """Every choice, and each index's first rejections with a count of the rest (all are kept in the record)."""
    rejected: dict[str, int] = {}
    for verdict in verdicts:
        if not verdict.accepted:
            rejected[verdict.source] = rejected.get(verdict.source, 0) + 1
            if rejected[verdict.source] > REJECTIONS_LOGGED:
                continue
        log(("chose " if verdict.accepted else "rejected ") + f"{verdict.variant} from {verdict.source}: {verdict.reason}")
    for source, count in rejected.items():
        if count > REJECTIONS_LOGGED:
            log(f"rejected {count - REJECTIONS_LOGGED} more from {source} (every reason is in the install record)")


def fetch_and_check(candidate: Candidate, facts: Facts, params, check: bool, log: Log) -> Found:  # type: ignore[no-untyped-def]
    """The wheel downloaded whole (sha256 against its index entry; IndexError_ when refused) and checked here. A
    wheel of a plain index gets the sha256 it was downloaded with in its record when its link gave none."""
    from playbook.wheelindex import upstream

    cache_dir: Path = params.cache_dir
    vocabulary_dir = cache_dir / "downloads" / "vocab"
    if candidate.url:
        downloads = cache_dir / "downloads" / "wheels" / (candidate.record.sha256[:16] or "unlisted")
        wheel, digest = upstream.fetch(candidate, downloads)
        said = ("sha256 matches its index entry" if candidate.record.sha256
                else f"its index gives no sha256 (got {digest}): only the check vouches for it")
        candidate = dataclasses.replace(candidate, record=dataclasses.replace(
            candidate.record, sha256=digest, size_bytes=wheel.stat().st_size))
        log(f"downloaded {wheel.name} from {candidate.url}, {said}")
        vocabulary, index_url = None, candidate.source
    else:
        store = wheel_index.open_store(candidate.source)
        downloads = cache_dir / "downloads" / "wheels" / candidate.record.sha256[:16]
        wheel = wheel_index.fetch_wheel(store, candidate.record, downloads)
        log(f"downloaded {wheel.name} ({candidate.record.variant}), sha256 matches its index entry")
        vocabulary = wheel_index.fetch_vocabulary(store, vocabulary_dir)
        index_url = store.url(wheel_index.variant_index(candidate.record))
    result = None
    if check:
        # verify's children run with the playbook's interpreter, which has the wheel's dependencies; the target
        # environment may not have them until pip installs the wheel.
        result = check_wheel(wheel, candidate.record, facts, params, cache_dir,
                             vocabulary_dir if vocabulary else None, sys.executable, log)
        log(f"check {'passed' if result.ok else 'failed'} in {result.duration_s:.1f} s: {result.summary}")
    return Found(candidate, wheel, vocabulary, result, index_url)


def install(request: InstallRequest, log: Log = print) -> InstallRecord:
    from playbook.wheelindex.select import needs_from_facts

    started = time.monotonic()
    params = request.params
    cache_dir: Path = params.cache_dir  # type: ignore[attr-defined]
    python = python_of(request.into)
    needs = needs_from_facts(request.facts, accepted_tags(python), params.backend,  # type: ignore[attr-defined]
                             params.source.version if params.source.kind == "sdist" else "")  # type: ignore[attr-defined]
    local_index(cache_dir).mkdir(parents=True, exist_ok=True)
    searched = search(request.facts, params, sources_of(params, request.sources), needs, log, request.check)
    record = InstallRecord(needs, searched.sources, searched.skipped_sources, searched.verdicts)
    if searched.found is not None:
        _install_found(searched.found, python, record, cache_dir, log)
        record.duration_s = round(time.monotonic() - started, 2)
        _write_record(record, cache_dir)
        return record
    if not request.build:
        record.duration_s = round(time.monotonic() - started, 2)
        _write_record(record, cache_dir)
        raise InstallFailed("no published wheel fits this machine and passed its check, and building is off "
                            f"(--no-build); the reasons are above and in {cache_dir / CHECKS}")
    log("no published wheel fits and passed its check: building one")
    _build_instead(request, record, python, log)
    record.duration_s = round(time.monotonic() - started, 2)
    _write_record(record, cache_dir)
    return record


def _install_found(found: Found, python: str, record: InstallRecord, cache_dir: Path, log: Log) -> None:
    pip_install(found.wheel, python, log)
    local = wheel_index.FolderStore(local_index(cache_dir))
    if found.candidate.source != local.location:
        wheel_index.publish(local, found.candidate.record, found.wheel, found.vocabulary)
    record.chosen, record.chosen_from, record.check = found.candidate.record, found.candidate.source, found.check
    record.index_url = found.index_url
    record.installed_into = str(Path(python).parent.parent)


def _build_instead(request: InstallRequest, record: InstallRecord, python: str, log: Log) -> None:
    from playbook.chain import run_chain
    from playbook.resources import default_output_root
    from playbook.runfolder.folder import Outcome
    from playbook.wheelindex.metadata import record_from_run, vocabulary_of_run

    # The chain's build looks in no index: this search found nothing to take.
    params = dataclasses.replace(request.params, wheel_index=dataclasses.replace(  # type: ignore[type-var]
        request.params.wheel_index, sources=[], local=False))  # type: ignore[attr-defined]
    run = run_chain(params, "playbook install (nothing published fits)",  # type: ignore[arg-type]
                    request.output_root or default_output_root())
    record.built_run = str(run.path)
    if run.record().outcome is not Outcome.OK:
        raise InstallFailed(f"the build that nothing published could replace failed: see {run.path}")
    built, wheel = record_from_run(run.path)
    vocabulary = vocabulary_of_run(run.path)
    cache_dir: Path = request.params.cache_dir  # type: ignore[attr-defined]
    local = wheel_index.FolderStore(local_index(cache_dir))
    record.index_url = wheel_index.publish(local, built, wheel, vocabulary)
    if request.publish_to:
        record.index_url = wheel_index.publish(wheel_index.open_store(request.publish_to), built, wheel, vocabulary)
        record.published_to = request.publish_to
        log(f"published {wheel.name} to {record.index_url}")
    pip_install(wheel, python, log)
    record.chosen, record.chosen_from = built, str(run.path)
    record.installed_into = str(Path(python).parent.parent)


def _write_record(record: InstallRecord, cache_dir: Path) -> Path:
    folder = cache_dir / CHECKS
    folder.mkdir(parents=True, exist_ok=True)
    return write_json(record, folder / f"install-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json")


def requirement(record: WheelRecord) -> str:
    return f"{PROJECT}=={record.version}"
