"""The walkthrough: the five steps behind buttons, for a person in JupyterLab.

Every step still runs as its own notebook through papermill (:func:`playbook.chain.execute_step`),
so a walkthrough leaves the same run folder as ``playbook run``; a step run again keeps its earlier
files under ``history/``. The widgets only read what the steps wrote: ``detect.json`` becomes a
table, the plan becomes choices with its values as defaults, the build log's ``[n/N]`` and the
sweep's per-point logs become progress bars, the plot is the PNG verify wrote.
"""

from __future__ import annotations

import dataclasses
import html
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playbook.backends import registry
from playbook.chain import StepCall, execute_step, next_step
from playbook.errors import PlaybookError
from playbook.facts import Facts
from playbook.params import Params, load_params, with_changes
from playbook.resources import default_output_root, params_dir, resolve_params_file
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.history import keep_file
from playbook.runfolder.layout import PARAMS, Step
from playbook.serialization import read_json
from playbook.steps.build import BuildResult, last_progress_of
from playbook.steps.configure import BuildPlan
from playbook.steps.repair import Diagnosis
from playbook.verify.step import VerifyResult
from playbook.verify.sweep import layer_counts
from playbook.verify.synthetic_gguf import ModelSpec

BACKENDS = registry.parameter_values()
SHAPES = ["tiny", "1b", "7b"]
QUANTS = ["F32", "F16", "Q8_0", "Q4_0"]
POLL_S = 0.5


@dataclass
class Choices:
    """What a person may change before building, with the plan's values as defaults."""

    backend: str
    backend_settings: dict[str, str]  # the planned backend's own section, by dotted key ("cuda.architectures")
    source_version: str
    source_sha256: str
    source_path: str
    jobs: int
    model_path: str
    model_shape: str
    model_quant: str
    n_gpu_layers: str  # "0, 8, 17"; empty: chosen from the model's layer count

    @classmethod
    def from_plan(cls, params: Params, plan: BuildPlan) -> Choices:
        return cls(
            backend=plan.backend if plan.backend in BACKENDS else params.backend,
            backend_settings=backend_settings_shown(params, plan.backend),
            source_version=params.source.version,
            source_sha256=params.source.sha256,
            source_path=params.source.path,
            jobs=plan.jobs,
            model_path=params.model.path,
            model_shape=params.model.shape,
            model_quant=params.model.quant,
            n_gpu_layers=", ".join(map(str, planned_layer_counts(params, plan))),
        )

    def changes_from(self, before: Choices) -> dict[str, Any]:
        """The parameters to change (dotted keys) for the fields that differ from ``before``."""
        changes: dict[str, Any] = {}
        changes.update({key: value for key, value in self.backend_settings.items()
                        if value != before.backend_settings.get(key)})
        for name, key in CHOICE_KEYS.items():
            value = getattr(self, name)
            if value == getattr(before, name):
                continue
            if name == "n_gpu_layers":
                value = parse_layer_counts(value)
            if name == "source_path":
                changes["source.kind"] = "path" if value else "sdist"
            changes[key] = value
        return changes


CHOICE_KEYS = {
    "backend": "backend",
    "source_version": "source.version",
    "source_sha256": "source.sha256",
    "source_path": "source.path",
    "jobs": "build.jobs",
    "model_path": "model.path",
    "model_shape": "model.shape",
    "model_quant": "model.quant",
    "n_gpu_layers": "verify.n_gpu_layers",
}


def backend_settings_shown(params: Params, backend: str) -> dict[str, str]:
    """The planned backend's own parameters as the form shows them, by dotted key; none for a backend without."""
    if backend not in registry.names():
        return {}
    settings = params.settings(backend)
    return {f"{backend}.{key}": str(value) for key, value in vars(settings).items()}


def parse_layer_counts(text: str) -> list[int]:
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    if not all(p.isdigit() for p in parts):
        raise PlaybookError(f"layer counts {text!r}: give whole numbers separated by commas, e.g. 0, 8, 17")
    return [int(p) for p in parts]


def planned_layer_counts(params: Params, plan: BuildPlan) -> list[int]:
    """The layer counts verify will sweep: given ones, else spread over the synthetic model's layers."""
    if params.verify.n_gpu_layers or params.model.path:
        return list(params.verify.n_gpu_layers)
    n_layer = ModelSpec(params.model.shape, params.model.quant).model_shape.n_layer
    return layer_counts(n_layer, [], registry.unit(plan.backend).offloads, params.verify.sweep_points)


def apply_choices(run: RunFolder, changes: dict[str, Any]) -> Params:
    """Check the changed parameters, keep the run's earlier ones under history/, save the new ones.
    A bad value raises before anything in the run folder changes."""
    params = with_changes(run.params(), changes)
    keep_file(run.path, PARAMS, "params")
    run.save_params(params)
    record = run.record()
    record.params_source += " + choices: " + " ".join(f"{k}={v}" for k, v in changes.items())
    run.save_record(record)
    return params


def latest_progress(log_file: Path, tail_bytes: int = 64 * 1024) -> tuple[int, int]:
    """ninja's last ``[n/N]`` in a build log; (0, 0) before CMake's build starts."""
    progress = last_progress_of(log_file, tail_bytes)
    return progress.done, progress.total


def sweep_points_done(run: RunFolder, attempt: int) -> int:
    from playbook.verify.units.offload_sweep import point_logs

    return len(point_logs(run.layout, attempt))


def new_run(params_file: str, output_root: Path) -> RunFolder:
    """A run folder for the parameter set a person picked (``params/cpu.yaml``, relative to the playbook)."""
    return RunFolder.create(output_root, load_params(resolve_params_file(params_file)), params_file)


def table_html(frame: Any) -> str:
    """A DataFrame as HTML; a row number is no information, so only a named index is shown."""
    return frame.to_html(classes="playbook-table", border=0, escape=True, index=frame.index.name is not None)


class Walkthrough:
    """The widgets. ``show()`` returns the box to display; every button runs in a background thread."""

    def __init__(self, run_dir: str = "", params_file: str = "", output_root: str = "",
                 execute: Callable[..., Any] = execute_step):
        import ipywidgets as w

        self.w = w
        self.execute = execute
        self.output_root = Path(output_root) if output_root else default_output_root()
        self.run: RunFolder | None = RunFolder(run_dir) if run_dir else None
        self.worker: threading.Thread | None = None
        self.choices: Choices | None = None
        self.fields: dict[str, Any] = {}  # the choice widgets, by Choices field name

        profiles = sorted(f"params/{p.name}" for p in params_dir().glob("*.yaml"))
        wanted = params_file or "params/default.yaml"
        self.params_file = w.Dropdown(options=sorted(set(profiles) | {wanted}), value=wanted,
                                      description="parameters", style={"description_width": "initial"})
        self.run_label = w.HTML()
        self.status = w.HTML()
        self.next_button = w.Button(button_style="primary", layout=w.Layout(width="auto"))
        self.next_button.on_click(lambda _: self.start_next())
        self.detect_again = w.Button(description="detect again", layout=w.Layout(width="auto"))
        self.detect_again.on_click(lambda _: self.start(StepCall(Step.DETECT)))
        self.sections = {name: w.HTML() for name in ("detect", "configure", "build", "repair", "verify")}
        self.form = w.VBox(layout=w.Layout(align_items="flex-start"))
        self.build_bar = w.IntProgress(min=0, max=1, description="compiling")
        self.build_label = w.Label()
        self.sweep_bar = w.IntProgress(min=0, max=1, description="sweeping")
        self.sweep_label = w.Label()
        self.plot = w.Image(format="png", layout=w.Layout(max_width="900px"))
        self.plot.layout.display = "none"
        self.refresh()

    # ------------------------------------------------------------------ layout

    def show(self) -> Any:
        w = self.w

        def section(title: str, *children: Any) -> Any:
            return w.VBox([w.HTML(f"<h3>{html.escape(title)}</h3>"), *children])

        return w.VBox([
            w.HBox([self.params_file, self.next_button, self.detect_again]),
            self.run_label,
            self.status,
            section("1 · What detect found", self.sections["detect"]),
            section("2 · The plan, and your choices", self.form, self.sections["configure"]),
            section("3 · Build", w.HBox([self.build_bar, self.build_label]), self.sections["build"]),
            section("4 · Repair", self.sections["repair"]),
            section("5 · Verify", w.HBox([self.sweep_bar, self.sweep_label]), self.sections["verify"], self.plot),
        ])

    # ------------------------------------------------------------------ running steps

    def start_next(self) -> None:
        call = next_step(self.run) if self.run else StepCall(Step.DETECT)
        if call is not None:
            self.start(call)

    def start(self, call: StepCall) -> None:
        if self.busy:
            return
        self.worker = threading.Thread(target=self._run_step, args=(call,), daemon=True)
        self.worker.start()

    @property
    def busy(self) -> bool:
        return self.worker is not None and self.worker.is_alive()

    def wait(self, timeout: float | None = None) -> None:
        if self.worker is not None:
            self.worker.join(timeout)

    def _run_step(self, call: StepCall) -> None:
        self._set_buttons(enabled=False)
        self.status.value = f"<b>running {html.escape(call.label)}…</b>"
        started = time.monotonic()
        step, attempt = call.step.value, call.attempt
        try:
            if self.run is None:
                self.run = new_run(self.params_file.value, self.output_root)
            watcher = threading.Event()
            poller = threading.Thread(target=self._poll_progress, args=(step, attempt, watcher), daemon=True)
            poller.start()
            try:
                self.execute(self.run, call)
            finally:
                watcher.set()
                poller.join()
            self.status.value = f"{step} done in {time.monotonic() - started:.0f} s. {self._next_hint()}"
        # Any error is shown to the person; the step's notebook in the run folder has the trace.
        except Exception as error:  # noqa: BLE001
            self.status.value = (f"<span style='color:#b00'><b>{html.escape(step)} failed:</b> "
                                 f"{html.escape(str(error))}</span>")
        finally:
            self._set_buttons(enabled=True)
            self.refresh()  # after the buttons: an ended chain disables "run next step" again

    def _poll_progress(self, step: str, attempt: int, stop: threading.Event) -> None:
        run = self.run  # set before a step starts; the poller reads the run that step runs in
        if run is None:
            return
        expected = len(self.choices.n_gpu_layers.split(",")) if self.choices and self.choices.n_gpu_layers else 1
        started = time.monotonic()
        while not stop.wait(POLL_S):
            if step == "build":
                done, total = latest_progress(run.layout.build_log(attempt))
                self.build_bar.max, self.build_bar.value = max(total, 1), done
                self.build_label.value = (f"[{done}/{total}] {time.monotonic() - started:.0f} s" if total
                                          else f"configuring… {time.monotonic() - started:.0f} s")
            elif step == "verify":
                done = sweep_points_done(run, attempt)
                self.sweep_bar.max, self.sweep_bar.value = max(expected, done, 1), done
                self.sweep_label.value = f"{done} of {max(expected, done)} layer counts measured"

    def _set_buttons(self, enabled: bool) -> None:
        for button in (self.next_button, self.detect_again):
            button.disabled = not enabled
        for child in self.form.children:
            if hasattr(child, "disabled"):
                child.disabled = not enabled

    def _next_hint(self) -> str:
        call = next_step(self.run) if self.run else StepCall(Step.DETECT)
        return f"Next: {call.label}." if call else "The chain has ended."

    # ------------------------------------------------------------------ showing what the steps wrote

    def refresh(self) -> None:
        run = self.run
        upcoming = next_step(run) if run else StepCall(Step.DETECT)
        self.next_button.description = f"run next step: {upcoming.label}" if upcoming else "chain ended"
        self.next_button.disabled = upcoming is None
        self.params_file.disabled = run is not None
        self.detect_again.layout.display = "none" if run is None or not run.layout.detect_facts.is_file() else None
        self.run_label.value = (f"run folder: <code>{html.escape(str(run.path))}</code>" if run
                                else "No run yet: pick a parameter set, then run detect.")
        if run is None:
            return
        self._show_detect(run)
        self._show_plan(run)
        self._show_build(run)
        self._show_repair(run)
        self._show_verify(run)

    def _show_detect(self, run: RunFolder) -> None:
        from playbook.interfaces import tables as display

        if not run.layout.detect_facts.is_file():
            self.sections["detect"].value = ""
            return
        facts = read_json(Facts, run.layout.detect_facts)
        self.sections["detect"].value = "".join([
            table_html(display.machine_table(facts)), table_html(display.gpus_table(facts)),
            table_html(display.toolkits_table(facts)),
        ])

    def _show_plan(self, run: RunFolder) -> None:
        from playbook.interfaces import tables as display

        if not run.layout.plan(1).is_file():
            self.sections["configure"].value, self.form.children = "", ()
            return
        plan = read_json(BuildPlan, run.layout.plan(run.layout.latest_attempt("plan")))
        # The person chooses over the first plan; a repaired plan (attempt 2 on) is the playbook's.
        self.choices = Choices.from_plan(run.params(), read_json(BuildPlan, run.layout.plan(1)))
        self.sections["configure"].value = (
            f"<pre>{html.escape(display.plan_summary(plan))}</pre>" + table_html(display.plan_table(plan)))
        self.form.children = self._choice_widgets(self.choices)

    def _choice_widgets(self, choices: Choices) -> tuple[Any, ...]:
        w = self.w
        style = {"description_width": "12em"}
        wide = w.Layout(width="40em")
        fields = {
            "backend": w.Dropdown(options=BACKENDS, value=choices.backend, description="backend", style=style),
            "source_version": w.Text(choices.source_version, description="source version", style=style),
            "source_sha256": w.Text(choices.source_sha256, description="sdist sha256", style=style, layout=wide),
            "source_path": w.Text(choices.source_path, description="or source path", style=style, layout=wide,
                                  placeholder="a checkout, an unpacked sdist or a bundle"),
            "jobs": w.BoundedIntText(choices.jobs, min=1, max=512, description="parallel jobs", style=style),
            "model_path": w.Text(choices.model_path, description="your GGUF", style=style, layout=wide,
                                 placeholder="empty: a synthetic model of this shape"),
            "model_shape": w.Dropdown(options=SHAPES, value=choices.model_shape, description="model shape", style=style),
            "model_quant": w.Dropdown(options=QUANTS, value=choices.model_quant, description="model type", style=style),
            "n_gpu_layers": w.Text(choices.n_gpu_layers, description="layers to sweep", style=style, layout=wide),
        }
        settings = {key: w.Text(value, description=key, style=style, layout=wide)
                    for key, value in choices.backend_settings.items()}
        apply = w.Button(description="apply choices and plan again", button_style="warning",
                         layout=w.Layout(width="auto"))
        apply.on_click(lambda _: self.apply({**{name: field.value for name, field in fields.items()},
                                             "backend_settings": {k: f.value for k, f in settings.items()}}))
        self.fields = {**fields, **settings}
        return (fields["backend"], *settings.values(), *list(fields.values())[1:], apply)

    def apply(self, values: dict[str, Any]) -> None:
        """Plan again with the person's choices: the parameters change, configure runs again."""
        if self.busy or self.run is None or self.choices is None:
            return
        try:
            changes = dataclasses.replace(self.choices, **values).changes_from(self.choices)
            if not changes:
                self.status.value = "Nothing changed: the plan stays as it is."
                return
            apply_choices(self.run, changes)
        except PlaybookError as error:
            self.status.value = f"<span style='color:#b00'><b>not applied:</b> {html.escape(str(error))}</span>"
            return
        self.start(StepCall(Step.CONFIGURE))

    def _show_build(self, run: RunFolder) -> None:
        from playbook.interfaces import tables as display

        attempt = run.layout.latest_attempt("build")
        if not attempt:
            self.sections["build"].value = ""
            return
        result = read_json(BuildResult, run.layout.build_result(attempt))
        self.build_bar.max, self.build_bar.value = max(result.progress.total, 1), result.progress.done
        self.build_label.value = f"attempt {attempt}: {'built' if result.ok else 'failed'} in {result.duration_s:.0f} s"
        self.sections["build"].value = table_html(display.build_summary(result))

    def _show_repair(self, run: RunFolder) -> None:
        from playbook.interfaces import tables as display

        attempt = run.layout.latest_attempt("diagnosis")
        if not attempt:
            self.sections["repair"].value = "<i>Nothing to repair.</i>" if run.layout.latest_attempt("build") else ""
            return
        diagnosis = read_json(Diagnosis, run.layout.diagnosis(attempt))
        message = diagnosis.message or (f"the fix is automatic: the next attempt builds {diagnosis.next_plan}"
                                        if diagnosis.next_plan else "")
        self.sections["repair"].value = (f"<p>attempt {attempt}: {html.escape(message)}</p>"
                                         + table_html(display.findings_table(diagnosis.findings)))

    def _show_verify(self, run: RunFolder) -> None:
        from playbook.interfaces import tables as display
        from playbook.verify.units.throughput import THROUGHPUT

        attempt = run.layout.latest_attempt("verify")
        if not attempt:
            self.sections["verify"].value, self.plot.layout.display = "", "none"
            return
        result = read_json(VerifyResult, run.layout.verify_result(attempt))
        points = display.sweep_points(result)
        self.sweep_bar.max = self.sweep_bar.value = max(len(points), 1)
        self.sweep_label.value = f"attempt {attempt}: {len(points)} layer counts measured"
        findings = table_html(display.findings_table(result.findings)) if result.findings else ""
        self.sections["verify"].value = (f"<p><b>{html.escape(result.summary)}</b></p>"
                                         + table_html(display.sweep_table(result).dropna(axis=1, how="all").round(2))
                                         + findings)
        throughput = result.measured(THROUGHPUT)
        plot = run.layout / throughput.plot_files[0] if throughput and throughput.plot_files else None
        if plot is not None and plot.is_file():
            self.plot.value, self.plot.layout.display = plot.read_bytes(), None


def run_headless(run_dir: str = "", params_file: str = "", output_root: str = "", stop_after: str = "",
                 log: Callable[[str], None] = print) -> RunFolder:
    """The walkthrough without a person (papermill, ``interactive=False``): every next step in turn,
    up to ``stop_after`` when given."""
    root = Path(output_root) if output_root else default_output_root()
    run = RunFolder(run_dir) if run_dir else new_run(params_file or "params/default.yaml", root)
    while (call := next_step(run)) is not None:
        log(f"▶ {call.label}")
        execute_step(run, call)
        if call.step.value == stop_after:
            break
    log(f"run folder: {run.path}")
    return run
