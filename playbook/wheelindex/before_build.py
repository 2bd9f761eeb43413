"""The build step with ``wheel_index.sources``: a verified, published wheel installed instead of building.

The build notebook calls :func:`build_or_install`. Without ``wheel_index.sources``, or at a later attempt (after a
failed build or verify: a repaired plan is built), it is the build step as it always was. At attempt 1 it looks in
the indexes with ``playbook install``'s own code (:func:`playbook.wheelindex.install.search`: the same choice among
the wheels that fit, the same download with its sha256 checked, the same check with verify's units here) for a wheel
of the plan's backend and the source's version. One that passes is copied into the attempt's wheel folder and the
build records that it installed it instead of building; verify then measures it as it measures a built wheel. When
nothing fits or every check fails, the build runs as before and its message says why in one line. Every verdict,
with its reason, is kept in the run folder (:meth:`~playbook.runfolder.layout.Layout.wheel_choice`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

from playbook.facts import Facts
from playbook.params import Params
from playbook.runfolder.folder import RunFolder
from playbook.steps.build import BuildResult, ProgressCallback, PublishedWheel, build_step, installed_instead
from playbook.steps.configure import BuildPlan
from playbook.steps.source import SourceInfo
from playbook.wheelindex.install import accepted_tags, search, sources_of
from playbook.wheelindex.select import Verdict, needs_from_facts


@dataclass
class WheelChoice:
    """What attempt 1's build found in the indexes before building (``wheel-choice-attempt-1.json``)."""

    sources: list[str]
    skipped_sources: list[str] = field(default_factory=list)
    """One line per index that did not answer."""
    backends: list[str] = field(default_factory=list)
    """The backends whose wheels were looked for (the plan's, when it has a device here)."""
    verdicts: list[Verdict] = field(default_factory=list)
    """Every published wheel, chosen or not, with the reason; the one taken last, as ``taken: ...``."""
    taken: str = ""
    """The variant installed instead of building; "" when it built."""
    built_because: str = ""
    """When it built: why, in one line."""
    duration_s: float = 0.0


def not_from_an_index(params: Params) -> str:
    """Why this run's wheel must be built from its source even with indexes configured; "" when an index may serve
    it. A published wheel's record does not promise these, and verify's source-tree units need the tree."""
    asked = [name for name, on in (("build.multimodal", params.build.multimodal), ("build.rpc", params.build.rpc),
                                   ("build.prebuilt_lib", bool(params.build.prebuilt_lib)),
                                   ("verify.llama_bench", params.verify.llama_bench),
                                   ("verify.tune_build_flags", params.verify.tune_build_flags)) if on]
    if not asked:
        return ""
    return f"{', '.join(asked)} asks for what a published wheel's record does not promise: building from the source"


def build_or_install(run: RunFolder, attempt: int, on_progress: ProgressCallback | None = None) -> BuildResult:
    """The build notebook's work (see the module's docstring)."""
    params = run.params()
    if attempt != 1 or not params.wheel_index.sources:
        return build_step(run, attempt, on_progress)
    started = time.monotonic()
    layout = run.layout
    choice = WheelChoice(sources_of(params))
    refused = not_from_an_index(params)
    if refused:
        choice.built_because = refused
        run.write(choice, layout.wheel_choice(attempt))
        print(f"wheel index: {refused}")
        return build_step(run, attempt, on_progress, index_note=refused)
    plan = run.read(BuildPlan, layout.plan(attempt))
    facts = run.read(Facts, layout.detect_facts)
    version = params.source.version if params.source.kind == "sdist" else ""
    needs = needs_from_facts(facts, accepted_tags(sys.executable), plan.backend, version)
    searched = search(facts, params, choice.sources, needs, lambda line: print(f"wheel index: {line}"))
    choice.skipped_sources, choice.backends, choice.verdicts = searched.skipped_sources, needs.backends, searched.verdicts
    choice.duration_s = round(time.monotonic() - started, 2)
    if searched.found is None:
        choice.built_because = searched.why_none()
        run.write(choice, layout.wheel_choice(attempt))
        print(f"wheel index: {choice.built_because}; building")
        return build_step(run, attempt, on_progress, index_note=choice.built_because)
    taken = searched.found
    choice.taken = taken.candidate.record.variant
    run.write(choice, layout.wheel_choice(attempt))
    record = taken.candidate.record
    # verify writes its synthetic model with the index's tokenizer vocabulary (the folder holds models/<vocab>), as
    # the check did; without one, with the source's.
    source = (SourceInfo(params.source.kind, str(taken.vocabulary.parent.parent), record.version, record.source_sha256,
                         f"the published wheel {record.variant}: its record's source; the tokenizer vocabulary from "
                         "its index")
              if taken.vocabulary is not None else _resolved_source(params))
    assert taken.check is not None  # search checks every wheel it takes
    published = PublishedWheel(taken.candidate.source, taken.index_url, record.variant, taken.check.summary,
                               taken.check.duration_s, taken.check.folder, layout.in_run(layout.wheel_choice(attempt)))
    print(f"wheel index: installed {record.wheel} ({record.variant}) from {taken.candidate.source} instead of building")
    return installed_instead(run, attempt, taken.wheel, source, published, time.monotonic() - started)


def _resolved_source(params: Params) -> SourceInfo:
    from playbook.steps.source import resolve_params_source

    return resolve_params_source(params)
