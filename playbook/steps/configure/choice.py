"""Which backend the wheel is built for, and why not each other one.

A unit that the parameters make the backend whatever ``backend`` says (a prebuilt library) comes first;
on macOS the platform chooses (:mod:`.apple`). A backend asked for by name is planned even when this
machine lacks it (its checks then block the build, naming what is missing). ``backend: auto`` asks each
unit of :func:`playbook.backends.registry.automatic`, in order: the first usable one is chosen, each one
before it is rejected with its reason, each one after it with "<chosen> preferred"; units never chosen
automatically say why too. None usable: CPU, with the first one's reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playbook.backends import registry
from playbook.params import Backend
from playbook.steps.configure import apple

if TYPE_CHECKING:
    from playbook.steps.configure.planner import Planner


def choose(planner: Planner) -> Backend:
    chosen = _choose(planner)
    ignored = [s for unit in registry.units() if unit.name is not chosen for s in unit.settings_given(planner)]
    if ignored:
        planner.warn("settings-ignored", f"{', '.join(ignored)} set, but the wheel is built for {chosen.value}: "
                     "ignored (set backend to build for what they configure)")
    return chosen


def _choose(planner: Planner) -> Backend:
    for unit in registry.units():
        if reason := unit.takes_precedence(planner):
            planner.decide("backend", unit.name.value, reason)
            return unit.name
    wanted = planner.params.backend
    if planner.facts.os.system == "Darwin" and (wanted is Backend.AUTO or not registry.unit(wanted).planned_on_macos):
        return apple.choose_backend(planner)
    for unit in registry.units():
        unit.prepare(planner)
    if wanted is Backend.AUTO:
        return _auto(planner)
    chosen = registry.unit(wanted).requested(planner)
    while chosen is not wanted:  # a backend that cannot exist here fell back to another
        wanted, chosen = chosen, registry.unit(chosen).requested(planner)
    return chosen


def _auto(planner: Planner) -> Backend:
    candidates = [(unit, unit.assess(planner)) for unit in registry.automatic()]
    chosen = next((unit for unit, assessment in candidates if assessment.usable), None)
    for unit, assessment in candidates:
        if not assessment.usable:
            planner.decide("backend rejected", unit.name.value, assessment.blocked_because)
        elif unit is not chosen and chosen is not None:
            planner.decide("backend rejected", unit.name.value, f"usable, but {chosen.name.value} is preferred")
    for unit in registry.units():
        if unit.auto_rank is None and unit.name is not registry.FALLBACK and unit.builds_llama_cpp:
            planner.decide("backend rejected", unit.name.value, unit.not_automatic(planner))
    if chosen is not None:
        planner.decide("backend", chosen.name.value, dict(candidates)[chosen].usable_because)
        return chosen.name
    chosen_name = registry.fallback().fallen_back(planner, candidates[0][1].blocked_because)
    for unit, _ in candidates:
        unit.fallback_hint(planner)
    return chosen_name


def configure_backend(planner: Planner) -> None:
    """The chosen backend's CMake arguments, environment and checks."""
    registry.unit(planner.backend).configure(planner)
