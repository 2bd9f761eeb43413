"""``playbook report``: a run folder as HTML, for people who will not open JupyterLab.

``index.html`` summarizes the run (machine, plan, outcome, attempts, findings, throughput plot,
the result of ``playbook check``) and links to each executed notebook, converted with nbconvert (where nbconvert
is not installed, as with the offline bundle, which carries only what a headless run needs: each cell's code, text
and images as plain HTML).
Every file is written through papermill's I/O handlers, so the output may be a local folder or
any URL papermill writes to (``s3://…``, ``gs://…``, ``abfs://…``). The plot is embedded, so the
report is text files only. It is derived from the archive: ``report/`` is not in the manifest.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import nbformat
from papermill.iorw import papermill_io

from playbook.facts import Facts
from playbook.interfaces.tables import plot_alt
from playbook.knowledge.failures import Finding
from playbook.runfolder.folder import RunFolder, RunRecord
from playbook.runfolder.integrity import check_run
from playbook.runfolder.layout import ATTESTATION, MANIFEST, REPORT_INDEX, WHEELHOUSE
from playbook.serialization import read_json
from playbook.steps.build import BuildResult
from playbook.steps.configure import BuildPlan
from playbook.steps.repair import Diagnosis
from playbook.verify.rpc_server import RpcOffload
from playbook.verify.step import VerifyResult
from playbook.verify.sweep import SweepPoint
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.units.rpc_offload import RPC_OFFLOAD
from playbook.verify.units.throughput import THROUGHPUT


@dataclass
class Attempt:
    attempt: int
    build: BuildResult
    verify: VerifyResult | None = None
    diagnosis: Diagnosis | None = None

    @property
    def points(self) -> list[SweepPoint]:
        """Its verify's sweep points (none when verify or its sweep did not run)."""
        sweep = self.verify.measured(OFFLOAD_SWEEP) if self.verify else None
        return sweep.points if sweep else []

    @property
    def plot_files(self) -> list[str]:
        """Its verify's throughput plot (PNG, SVG); none when nothing was measured."""
        throughput = self.verify.measured(THROUGHPUT) if self.verify else None
        return throughput.plot_files if throughput else []

    @property
    def rpc(self) -> RpcOffload | None:
        """Its verify's offload through rpc-server (build.rpc)."""
        return self.verify.measured(RPC_OFFLOAD) if self.verify else None


@dataclass
class ReportFinding:
    attempt: int
    finding: Finding

    def __getattr__(self, name: str) -> Any:  # the template reads f.id, f.title ... of the finding
        return getattr(self.finding, name)


@dataclass
class RunSummary:
    """What ``index.html`` shows, read from the run folder's facts files through their types."""

    run_id: str
    record: RunRecord
    params: dict[str, Any]
    detect: Facts | None
    plan: BuildPlan | None
    attempts: list[Attempt]
    notebooks: list[str]
    plot_png: str = ""  # the final verify's plot, a file name in the run folder
    plot_alt: str = ""  # what the plot shows, in words
    check_lines: list[str] = field(default_factory=list)
    check_ok: bool = False
    tune_text: str = ""  # the newest tune-attempt-N.md (verify.tune)
    rpc_png: str = ""  # build.rpc: local against RPC throughput by layers, a file name in the run folder
    rpc_attempt: Attempt | None = None  # the newest attempt whose verify went through rpc-server

    @property
    def rpc(self) -> Any:
        return self.rpc_attempt.rpc if self.rpc_attempt else None

    @property
    def toolkit(self) -> Any:
        if self.plan is None or self.detect is None:
            return None
        return next((t for t in self.detect.cuda_toolkits if t.root == self.plan.cuda_toolkit), None)

    @property
    def findings(self) -> list[ReportFinding]:
        found = []
        for a in self.attempts:
            findings = (a.diagnosis.findings if a.diagnosis else []) or (a.verify.findings if a.verify else [])
            found += [ReportFinding(a.attempt, f) for f in findings]
        return found


def read_summary(run_dir: Path) -> RunSummary:
    run = RunFolder(Path(run_dir))
    layout = run.layout
    attempts = []
    for number in layout.attempts("build"):
        attempts.append(Attempt(
            number, read_json(BuildResult, layout.build_result(number)),
            read_json(VerifyResult, layout.verify_result(number)) if layout.verify_result(number).is_file() else None,
            read_json(Diagnosis, layout.diagnosis(number)) if layout.diagnosis(number).is_file() else None))
    plans = layout.attempts("plan")
    verified = [a for a in attempts if a.plot_files]
    plot = verified[-1].plot_files[0] if verified else ""
    check = check_run(run.path, allow_missing=[f"{WHEELHOUSE}/*"])
    through_rpc = [a for a in attempts if a.rpc and a.rpc.plot_files]
    rpc_png = through_rpc[-1].rpc.plot_files[0] if through_rpc and through_rpc[-1].rpc else ""
    return RunSummary(
        run_id=run.run_id,
        record=run.record(),
        params=json.loads(layout.params.read_text()) if layout.params.is_file() else {},
        detect=read_json(Facts, layout.detect_facts) if layout.detect_facts.is_file() else None,
        plan=read_json(BuildPlan, layout.plan(plans[-1])) if plans else None,
        attempts=attempts,
        notebooks=[p.name for p in layout.notebooks()],
        plot_png=plot if plot and (run.path / plot).is_file() else "",
        plot_alt=plot_alt(verified[-1].verify) if verified and verified[-1].verify else "",
        check_lines=check.lines(),
        check_ok=check.ok,
        rpc_png=rpc_png if rpc_png and (run.path / rpc_png).is_file() else "",
        rpc_attempt=through_rpc[-1] if through_rpc else None,
        tune_text=next((report.read_text(encoding="utf-8") for n in reversed(layout.attempts("tune"))
                        if (report := layout.unit_files(n, "tune").beside(".md")).is_file()), ""),
    )


def write_report(run_dir: Path, output: str = "") -> str:
    """Write ``index.html`` and one HTML page per executed notebook; returns index.html's location."""
    run_dir = Path(run_dir)
    output = (output or str(RunFolder(run_dir).layout.report)).rstrip("/")
    if "://" not in output:
        Path(output).mkdir(parents=True, exist_ok=True)
    summary = read_summary(run_dir)
    to_html = _notebook_converter()
    for name in summary.notebooks:
        body = to_html(nbformat.read(run_dir / name, as_version=4))
        page = _ENV.get_template("notebook").render(title=f"{summary.run_id} · {name}", body=body, name=name)
        _write(page, f"{output}/{Path(name).stem}.html")
    index = f"{output}/{REPORT_INDEX}"
    _write(_ENV.get_template("index").render(s=summary, plot=_embedded(run_dir, summary.plot_png),
                                             rpc_plot=_embedded(run_dir, summary.rpc_png), Path=Path), index)
    return index


def _embedded(run_dir: Path, png: str) -> str:
    """A plot of the run folder as base64, for a data: URL ("" for no plot)."""
    return base64.b64encode((run_dir / png).read_bytes()).decode() if png else ""


def _notebook_converter() -> Callable[[nbformat.NotebookNode], str]:
    try:
        from nbconvert import HTMLExporter
    except ImportError:
        return plain_notebook_html
    exporter = HTMLExporter(template_name="basic")
    return lambda notebook: exporter.from_notebook_node(notebook)[0]


def plain_notebook_html(notebook: nbformat.NotebookNode) -> str:
    """A notebook as plain HTML without nbconvert: each code cell's source, then its text, HTML and images."""
    parts = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            parts.append(f"<pre class=\"markdown\">{html.escape(cell.source)}</pre>")
            continue
        if cell.cell_type != "code":
            continue
        parts.append(f"<pre class=\"jp-InputArea-editor\">{html.escape(cell.source)}</pre>")
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(f"<pre>{html.escape(output.text)}</pre>")
            elif output.output_type == "error":
                parts.append(f"<pre class=\"error\">{html.escape(output.ename + ': ' + output.evalue)}</pre>")
            elif "text/html" in output.get("data", {}):
                parts.append(output.data["text/html"])  # the notebook's own tables and images with their alt text
            elif "image/png" in output.get("data", {}):
                described = output.data.get("text/plain", "")
                alt = html.escape("a figure" if described.startswith("<") else described, quote=True)  # "<...Image object>"
                parts.append(f'<img src="data:image/png;base64,{output.data["image/png"]}" alt="{alt}">')
            elif "text/plain" in output.get("data", {}):
                parts.append(f"<pre>{html.escape(output.data['text/plain'])}</pre>")
    return "\n".join(parts)


def _write(text: str, location: str) -> None:
    papermill_io.write(text, location, extensions=[".html"])


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 70rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; margin: .5rem 0 1rem; } td, th { border: 1px solid #ccc; padding: .2rem .5rem;
text-align: left; vertical-align: top; } th { background: #f3f3f3; } code, pre { font-size: 13px; }
pre { background: #f7f7f7; padding: .5rem; overflow-x: auto; } .ok { color: #17692b; } .failed, .error { color: #b00020; }
img { max-width: 100%; } .jp-InputPrompt, .jp-OutputPrompt { display: none; }
.jp-InputArea-editor { background: #f7f7f7; border-left: 3px solid #8ab; padding: 0 .5rem; margin: 1rem 0 .3rem; }
"""

_TEMPLATES = {
    "notebook": """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title>
<style>""" + _STYLE + """</style></head><body><p><a href="{{ names.index }}">← run summary</a> · {{ name }}</p>
{{ body | safe }}</body></html>
""",
    "index": """<!doctype html><html><head><meta charset="utf-8"><title>{{ s.run_id }}</title>
<style>""" + _STYLE + """</style></head><body>
<h1>Run {{ s.run_id }}: <span class="{{ s.record.outcome }}">{{ s.record.outcome }}</span></h1>
<p>{{ s.record.message }}</p>
<p>Started {{ s.record.started }}, finished {{ s.record.finished }}. Parameters: <code>{{ s.record.params_source }}</code></p>

<h2>Machine</h2>
{% set d = s.detect %}
<table>
<tr><th>OS</th><td>{{ d.os.pretty_name if d.os else "" }} ({{ d.os.machine if d.os else "" }})</td></tr>
<tr><th>CPU</th><td>{{ d.cpu.model if d.cpu else "" }}, {{ d.cpu.logical_cores if d.cpu else "" }} logical cores</td></tr>
<tr><th>Memory</th><td>{{ ((d.memory.total_mib or 0) / 1024) | round(1) if d.memory else "" }} GiB</td></tr>
<tr><th>GPUs</th><td>{% for g in d.gpus or [] %}{{ g.name }} (compute {{ g.compute_capability }}, {{ ((g.memory_total_mib or 0) / 1024) | round(0) | int }} GiB)<br>{% else %}none{% endfor %}</td></tr>
<tr><th>Driver</th><td>{{ d.driver.version if d.driver and d.driver.found else "none" }}{% if d.driver and d.driver.cuda_version %} (CUDA {{ d.driver.cuda_version }}){% endif %}</td></tr>
<tr><th>CUDA toolkit</th><td>{% if s.toolkit %}{{ s.toolkit.version }} at {{ s.toolkit.root }}{% else %}none used{% endif %}</td></tr>
<tr><th>Python</th><td>{{ d.python.version if d.python else "" }} ({{ d.python.executable if d.python else "" }})</td></tr>
<tr><th>Compilers</th><td>{% for c in d.compilers or [] if c.found %}{{ c.name }} {{ c.version }}{{ ", " if not loop.last }}{% endfor %}</td></tr>
<tr><th>CMake, ninja</th><td>{{ d.cmake.version if d.cmake else "" }}, {{ d.ninja.version if d.ninja else "" }}</td></tr>
</table>

<h2>Plan (attempt {{ s.plan.attempt }})</h2>
<p>Backend <b>{{ s.plan.backend }}</b>; <code>CMAKE_ARGS={{ (s.plan.cmake_args or []) | join(" ") }}</code>; {{ s.plan.jobs }} jobs.
{% if s.plan.remedies_applied %}Remedies applied: {{ s.plan.remedies_applied | join(", ") }}.{% endif %}</p>
<table><tr><th>decision</th><th>value</th><th>because</th></tr>
{% for x in s.plan.decisions or [] %}<tr><td>{{ x.what }}</td><td><code>{{ x.value }}</code></td><td>{{ x.reason }}</td></tr>{% endfor %}
</table>
{% for w in s.plan.warnings or [] %}<p class="failed">warning: {{ w }}</p>{% endfor %}

<h2>Attempts</h2>
<table><tr><th>attempt</th><th>build</th><th>time</th><th>ninja steps</th><th>ccache hits/misses</th><th>wheel</th><th>verify</th></tr>
{% for a in s.attempts %}<tr><td>{{ a.attempt }}</td>
<td class="{{ 'ok' if a.build.ok else 'failed' }}">{{ "ok" if a.build.ok else "failed (exit " ~ a.build.exit_code ~ ")" }}{% if a.build.reused_wheel %}, reused from the wheel cache{% endif %}</td>
<td>{{ a.build.duration_s }} s</td><td>{{ a.build.progress.done if a.build.progress else "" }}/{{ a.build.progress.total if a.build.progress else "" }}</td>
<td>{% if a.build.ccache %}{{ a.build.ccache.hits }}/{{ a.build.ccache.misses }}{% endif %}</td>
<td>{% if a.build.wheel %}{{ a.build.wheel.name }}<br><small>sha256 {{ a.build.wheel.sha256 }}</small>{% endif %}</td>
<td class="{{ 'ok' if a.verify.ok else 'failed' }}">{{ a.verify.summary if a.verify else "not run" }}</td></tr>
{% endfor %}</table>

<h2>Findings</h2>
{% for f in s.findings %}<p><b>[{{ f.id }}]</b> (attempt {{ f.attempt }}) {{ f.title }}<br>
<code>{{ f.evidence }}</code><br>fix{{ " (automatic)" if f.automatic }}: {{ f.fix }}</p>
{% else %}<p>None: no known failure was recognised.</p>{% endfor %}
{% for a in s.attempts if a.diagnosis.message %}<p>repair after attempt {{ a.attempt }}: {{ a.diagnosis.message }}</p>{% endfor %}

<h2>Throughput</h2>
{% if plot %}<img alt="{{ s.plot_alt }}" src="data:image/png;base64,{{ plot }}">{% else %}<p>No plot: no verify sweep ran.</p>{% endif %}
{% for a in s.attempts if a.verify %}{% for p in a.points if p.ratio_note %}<p>attempt {{ a.attempt }}, n_gpu_layers={{ p.n_gpu_layers }} against llama-bench: {{ p.ratio_note }}</p>{% endfor %}{% endfor %}
{% if s.rpc %}<h2>RPC: local against layers sent to rpc-server</h2>
{% for srv in s.rpc.servers %}<p>Server <code>{{ srv.address }}</code>: {{ srv.build.backend }} build
<code>{{ srv.build.binary }}</code> (sha256 {{ srv.build.sha256 }}), <code>{{ srv.build.cmake_args | join(" ") }}</code>;
devices {{ srv.devices | join("; ") }}; {{ srv.exit_status }}.</p>{% endfor %}
<table><tr><th>layers sent</th><th>status</th><th>offloaded</th><th>pp t/s</th><th>tg t/s</th><th>MiB on the server</th></tr>
{% for p in s.rpc.points %}<tr><td>{{ p.n_gpu_layers }}</td><td>{{ p.status }}</td><td>{{ p.offloaded_layers }}</td>
<td>{{ (p.pp_tokens_per_s or 0) | round(1) }}</td><td>{{ (p.tg_tokens_per_s or 0) | round(1) }}</td>
<td>{{ s.rpc.servers[0].held_mib_by_layers.get(p.n_gpu_layers | string, "") if s.rpc.servers else "" }}</td></tr>{% endfor %}</table>
{% if s.rpc.agreement %}<p>Logits, every layer on the server against none: relative error {{ "%.2e" | format(s.rpc.agreement.relative_error) }}, top-1 agreement {{ (100 * s.rpc.agreement.top1_agreement) | round(1) }}%.</p>{% endif %}
{% if s.rpc.error %}<p class="failed">{{ s.rpc.error }}</p>{% endif %}
{% if rpc_plot %}<img alt="Tokens/s by layers: local against layers sent to rpc-server" src="data:image/png;base64,{{ rpc_plot }}">{% endif %}
{% endif %}
{% if s.tune_text %}<h2>Runtime tuning</h2>
<pre>{{ s.tune_text }}</pre>{% endif %}

<h2>Executed notebooks</h2>
<table><tr><th>step</th><th>attempt</th><th>outcome</th><th>time</th><th>notebook</th></tr>
{% for st in s.record.steps or [] %}<tr><td>{{ st.step }}</td><td>{{ st.attempt }}</td><td class="{{ st.outcome }}">{{ st.outcome }}{% if st.message %}: {{ st.message }}{% endif %}</td>
<td>{{ st.duration_s }} s</td><td>{% if st.notebook %}<a href="{{ Path(st.notebook).stem }}.html">{{ st.notebook }}</a>{% else %}none recorded{% endif %}</td></tr>{% endfor %}
</table>

<h2>Integrity</h2>
<p class="{{ 'ok' if s.check_ok else 'failed' }}">playbook check (wheels may be absent):</p>
<pre>{{ s.check_lines | join("\\n") }}</pre>
<p>The run folder's <code>{{ names.attestation }}</code> is an in-toto Statement with a SLSA v1 provenance predicate;
<code>{{ names.manifest }}</code> holds the sha256 of every file.</p>
</body></html>
""",
}

_ENV = jinja2.Environment(loader=jinja2.DictLoader(_TEMPLATES), autoescape=True, undefined=jinja2.ChainableUndefined)
_ENV.globals["names"] = {"index": REPORT_INDEX, "attestation": ATTESTATION, "manifest": MANIFEST}  # layout's names
