"""What the notebooks show: tables of facts, plans and findings, and build progress."""

from __future__ import annotations

import base64
import dataclasses
import html
import sys
import time
from pathlib import Path

import pandas as pd

from playbook.facts import Facts
from playbook.knowledge.failures import Finding
from playbook.steps.build import BuildResult, ccache_summary
from playbook.steps.configure import BuildPlan
from playbook.steps.detect import describe_devices, offload_devices
from playbook.verify.step import VerifyResult
from playbook.verify.sweep import SweepPoint, plot_description
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP


def backends_table() -> pd.DataFrame:
    """Every backend the registry holds, as its unit declares it: where it has run, its ready parameter set, its
    place in ``backend: auto``'s order, its parameter section, its compatibility tables, and how many entries of
    the failure knowledge base are its own."""
    from playbook.backends import registry
    from playbook.knowledge.failures import load_knowledge_base

    per_family = load_knowledge_base().families()
    rows = []
    for unit in registry.units():
        keys = [f.name for f in dataclasses.fields(unit.settings_type)]
        rows.append({
            "backend": unit.name,
            "status": unit.status,
            "profile": f"params/{unit.profile}.yaml" if unit.profile else "",
            "auto": str(unit.auto_rank) if unit.auto_rank is not None else "asked for only",
            "settings": ", ".join(f"{unit.name}.{key}" for key in keys),
            "knowledge": ", ".join(f"knowledge/{name}" for name in unit.knowledge),
            "failures": f"{per_family.get(unit.failure_family, 0)} ({unit.failure_family})" if unit.failure_family
            else "",
        })
    return pd.DataFrame(rows)


def machine_table(facts: Facts) -> pd.DataFrame:
    compilers = ", ".join(f"{t.name} {t.version}" for t in facts.compilers if t.found) or "none found"
    rows = [
        ("OS", f"{facts.os.pretty_name} ({facts.os.system} {facts.os.release}, {facts.os.machine})"
               + (", WSL" if facts.os.is_wsl else "")),
        ("CPU", f"{facts.cpu.model}, {facts.cpu.logical_cores} logical cores, {' '.join(facts.cpu.flags)}"),
        ("memory", f"{facts.memory.total_mib} MiB, {facts.memory.available_mib} MiB available"),
        ("Python", (f"{facts.python.version} {facts.python.implementation} {facts.python.bits}-bit "
                   f"({facts.python.executable}), pip {facts.python.pip_version or 'missing'}")),
        ("compilers", compilers),
        ("CMake", facts.cmake.version if facts.cmake.found else "not found"),
        ("ninja", facts.ninja.version if facts.ninja.found else "not found"),
        ("NVIDIA driver", f"{facts.driver.version} (CUDA {facts.driver.cuda_version}, via {facts.driver.source})"
                          if facts.driver.found else f"not found ({facts.driver.error[:120]})"),
        ("llama_cpp installed", f"{facts.llama_cpp.version}, GPU offload {facts.llama_cpp.supports_gpu_offload}"
                                if facts.llama_cpp.found else "no"),
    ]
    return pd.DataFrame(rows, columns=["what", "found"]).set_index("what")


def toolkits_table(facts: Facts) -> pd.DataFrame:
    rows = [
        {"root": t.root, "found by": t.found_by, "nvcc": t.version, "cuBLAS": t.has_cublas,
         **{f"CCCL {name}": ok for name, ok in t.cccl_headers.items()}}
        for t in facts.cuda_toolkits
    ]
    return pd.DataFrame(rows) if rows else pd.DataFrame({"CUDA toolkits": ["none found"]})


def devices_table(facts: Facts) -> pd.DataFrame:
    """The devices every offloading backend's probe found, by backend; when there is none, which backends looked
    ("no usable GPU for cuda, hip, vulkan, sycl")."""
    rows = [{"backend": d.backend, "device": d.name, "kind": d.kind, "detail": d.detail} for d in offload_devices(facts)]
    return pd.DataFrame(rows) if rows else pd.DataFrame({"devices": [describe_devices(facts)]})


gpus_table = devices_table  # the name the detect notebook and the walkthrough call it by


def environment_table(facts: Facts) -> pd.DataFrame:
    return pd.DataFrame(sorted(facts.environment.items()), columns=["variable", "value (secrets redacted)"])


def plan_table(plan: BuildPlan) -> pd.DataFrame:
    return pd.DataFrame([(d.what, d.value, d.reason) for d in plan.decisions], columns=["decision", "value", "reason"])


def plan_summary(plan: BuildPlan) -> str:
    lines = [f"attempt {plan.attempt}: backend {plan.backend}, {plan.jobs} parallel jobs",
             f"CMAKE_ARGS={plan.cmake_args_string}"]
    lines += [f"{name}={value}" for name, value in sorted(plan.env.items())]
    lines += [f"WARNING: {warning}" for warning in plan.warnings]
    return "\n".join(lines)


def findings_table(findings: list[Finding]) -> pd.DataFrame:
    columns = ["id", "title", "evidence", "fix", "automatic"]
    return pd.DataFrame([{c: getattr(f, c) for c in columns} for f in findings], columns=columns)


def build_summary(result: BuildResult) -> pd.DataFrame:
    rows = [
        ("outcome", "built" if result.ok else ("timed out" if result.timed_out else f"failed (exit {result.exit_code})")),
        ("duration", f"{result.duration_s:.0f} s"),
        ("compile steps", f"{result.progress.done}/{result.progress.total}"),
        ("source", f"{result.source.origin}"),
        ("log", result.log_file),
        ("fingerprint", result.fingerprint),
        ("compiler cache", ccache_summary(result.ccache) if result.ccache else "not used"),
    ]
    if result.reused_wheel:
        rows.append(("wheel cache", f"reused {result.reused_wheel}: same source, CMake arguments, toolchain, Python"))
    if result.published:
        rows[0] = ("outcome", "installed from a wheel index instead of building")
        rows.append(("wheel index", (f"{result.published.variant} from {result.published.index_url}; its check here: "
                                    f"{result.published.check} ({result.published.check_s:.0f} s); every verdict in "
                                    f"{result.published.choice_file}")))
    elif result.index_note:
        rows.append(("wheel index", f"built: {result.index_note}"))
    if result.wheel:
        rows += [("wheel", result.wheel.name), ("size", f"{result.wheel.size_bytes / 2**20:.1f} MiB"),
                 ("sha256", result.wheel.sha256)]
    return pd.DataFrame(rows, columns=["what", "value"]).set_index("what")


def sweep_points(result: VerifyResult) -> list[SweepPoint]:
    """The offload sweep's points of a verify; none when the sweep did not run."""
    sweep = result.measured(OFFLOAD_SWEEP)
    return sweep.points if sweep else []


def sweep_table(result: VerifyResult) -> pd.DataFrame:
    return pd.DataFrame([vars(p) for p in sweep_points(result)])


def plot_alt(result: VerifyResult) -> str:
    """The throughput plot in words: its alternative text in the notebook and the report."""
    probe = result.measured(IMPORT_PROBE)
    outcome = probe.outcome.result if probe else None
    offloads = outcome is None or bool(outcome.get("supports_gpu_offload"))
    return plot_description(sweep_points(result), offloads)


def throughput_plot(result: VerifyResult, png: Path):
    """The plot as an image with its alternative text (IPython's Image has none, and nbconvert warns
    "Alternative text is missing" when the notebook becomes the report's page)."""
    from IPython.display import HTML

    data = base64.b64encode(Path(png).read_bytes()).decode()
    return HTML(f'<img alt="{html.escape(plot_alt(result))}" src="data:image/png;base64,{data}">')


class BuildProgress:
    """ninja's ``[n/N]`` as a progress bar for a person, as sparse lines for a headless run."""

    def __init__(self, interactive: bool, every_percent: int = 10):
        self.interactive = interactive
        self.every = every_percent
        self.next_report = 0
        self.started = time.monotonic()
        self.bar = None
        if interactive:
            import ipywidgets
            from IPython.display import display

            self.bar = ipywidgets.IntProgress(min=0, max=1, description="compiling")
            self.label = ipywidgets.Label("waiting for CMake…")
            display(ipywidgets.HBox([self.bar, self.label]))

    def __call__(self, done: int, total: int, line: str) -> None:
        if self.bar is not None:
            self.bar.max, self.bar.value = total, done
            self.label.value = f"[{done}/{total}] {time.monotonic() - self.started:.0f} s"
            return
        percent = 100 * done // max(total, 1)
        if percent >= self.next_report or done == total:
            print(f"[{done}/{total}] {percent}% after {time.monotonic() - self.started:.0f} s", flush=True)
            sys.stdout.flush()
            self.next_report = percent + self.every
