"""Which backend the wheel is built for, and why not each other one.

A unit that the parameters make the backend whatever ``backend`` says (a prebuilt library) comes first. On a
platform with a backend of its own (Metal on macOS: ``native_to``), that unit chooses for ``backend: auto`` and
for a backend that does not exist there. A backend asked for by name is planned even when this machine lacks it
(its checks then block the build, naming what is missing). ``backend: auto`` asks each unit of
:func:`playbook.backends.registry.automatic`, in order: the first usable one is chosen, each one before it is
rejected with its reason, each one after it with "<chosen> preferred"; units never chosen automatically say why
too. None usable: the fallback (CPU), with the first one's reason. Every unit answers with values
(:class:`~playbook.backends.plan.Choice`, :class:`~playbook.backends.plan.BackendPlan`); this module names none.
"""

from __future__ import annotations

from collections.abc import Callable

from playbook.backends import registry
from playbook.backends.base import BackendUnit
from playbook.backends.plan import BackendInputs, BackendPlan, Choice, Decision, PlanWarning

InputsFor = Callable[[BackendUnit], BackendInputs]


def choose(inputs_for: InputsFor, wanted: str, platform: str) -> tuple[str, BackendPlan]:
    """The backend to build and the decisions, warnings and blockers of choosing it."""
    chosen, plan = _choose(inputs_for, wanted, platform)
    ignored = [s for unit in registry.with_settings() if unit.name != chosen
               for s in unit.settings_given(inputs_for(unit).settings)]
    if ignored:
        plan = merged(plan, BackendPlan(warnings=(PlanWarning(
            "settings-ignored", f"{', '.join(ignored)} set, but the wheel is built for {chosen}: ignored (set "
            "backend to build for what they configure)"),)))
    return chosen, plan


def _choose(inputs_for: InputsFor, wanted: str, platform: str) -> tuple[str, BackendPlan]:
    for unit in registry.units():
        if reason := unit.takes_precedence(inputs_for(unit)):
            return unit.name, BackendPlan(decisions=(Decision("backend", unit.name, reason),))
    native = registry.native_to(platform)
    if native is not None and (wanted == registry.AUTO or platform not in registry.unit(wanted).platforms):
        plan = BackendPlan()
        if wanted != registry.AUTO:
            plan = BackendPlan(warnings=(PlanWarning(
                f"{wanted}-not-on-{platform}", f"backend {wanted} asked for on {platform}: it does not exist there; "
                f"use backend {native.name}"),))
        return _follow(inputs_for, native.choose_natively(inputs_for(native)), native.name, plan)
    checks = merged(*(unit.whichever_built(inputs_for(unit)) for unit in registry.units()))
    if wanted == registry.AUTO:
        chosen, plan = _auto(inputs_for)
        return chosen, merged(checks, plan)
    asked = registry.unit(wanted)
    return _follow(inputs_for, asked.requested(inputs_for(asked)), asked.name, checks)


def _follow(inputs_for: InputsFor, choice: Choice, asked: str, before: BackendPlan) -> tuple[str, BackendPlan]:
    """A unit's answer, followed while it names another backend than the one asked (one that cannot exist here
    falls back to another, which is then asked in turn)."""
    plan = merged(before, choice.plan)
    while choice.backend != asked:
        unit = registry.unit(choice.backend)
        if choice.fell_back_because and unit is registry.fallback():
            return unit.name, merged(plan, registry.fallback().fallen_back(inputs_for(unit), choice.fell_back_because))
        asked, choice = unit.name, unit.requested(inputs_for(unit))
        plan = merged(plan, choice.plan)
    return choice.backend, plan


def _auto(inputs_for: InputsFor) -> tuple[str, BackendPlan]:
    candidates = [(unit, unit.assess(inputs_for(unit))) for unit in registry.automatic()]
    chosen = next((unit for unit, assessment in candidates if assessment.usable), None)
    decisions = []
    for unit, assessment in candidates:
        if not assessment.usable:
            decisions.append(Decision("backend rejected", unit.name, assessment.blocked_because))
        elif unit is not chosen and chosen is not None:
            decisions.append(Decision("backend rejected", unit.name, f"usable, but {chosen.name} is preferred"))
    for unit in registry.units():
        if unit.auto_rank is None and unit is not registry.fallback() and unit.builds_llama_cpp:
            decisions.append(Decision("backend rejected", unit.name, unit.not_automatic(inputs_for(unit))))
    if chosen is not None:
        decisions.append(Decision("backend", chosen.name, dict(candidates)[chosen].usable_because))
        return chosen.name, BackendPlan(decisions=tuple(decisions))
    fallback = registry.fallback()
    plan = merged(BackendPlan(decisions=tuple(decisions)),
                  fallback.fallen_back(inputs_for(fallback), candidates[0][1].blocked_because),
                  *(unit.fallback_hint(inputs_for(unit)) for unit, _ in candidates))
    return fallback.name, plan


def merged(*plans: BackendPlan) -> BackendPlan:
    """The decisions, warnings and blockers of ``plans``, in order (a warning given twice kept once)."""
    warnings: list[PlanWarning] = []
    for plan in plans:
        warnings += [w for w in plan.warnings if w not in warnings]
    return BackendPlan(decisions=tuple(d for p in plans for d in p.decisions), warnings=tuple(warnings),
                       blockers=tuple(b for p in plans for b in p.blockers))
