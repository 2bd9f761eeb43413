"""``playbook compare``: one row per run folder, from many machines: the fleet view.

Each row says where the run ran (GPU, driver, toolkit, CPU), what it built (backend, CUDA
architectures, attempts, build time, outcome) and what the verified wheel measured (tokens/s
with no layer and with every layer on the GPU). ``notebooks/compare.ipynb`` shows the table
and plot; ``playbook compare`` executes it with papermill next to ``compare.csv`` and
``compare.png``. Facts files are read as plain JSON, so run folders of older playbooks read too.
"""

from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import papermill

from playbook import resources
from playbook.backends import registry
from playbook.errors import PlaybookError
from playbook.kernels import papermill_options
from playbook.runfolder.folder import RunFolder
from playbook.runfolder.layout import RUN
from playbook.serialization import read_json

NOTEBOOK = resources.notebook("compare")
CSV_FILE, PLOT_FILE, EXECUTED = "compare.csv", "compare.png", "compare.ipynb"
OVERLAY_STEM = "overlay"  # overlay.csv, overlay.png, overlay.svg


@dataclass
class FleetRow:
    run_id: str
    host: str
    gpu: str
    compute_capability: str
    driver: str
    toolkit: str
    cpu: str
    cores: int | None
    python: str
    backend: str
    cuda_architectures: str
    model: str
    attempts: int
    outcome: str
    build_s_total: float  # every build attempt of the run
    wheel_build_s: float | None  # the attempt whose wheel verify passed (small when reused from the cache)
    wheel_reused: bool
    full_offload_layers: int | None
    tg_full_offload: float | None  # tokens/s generated with every layer on the GPU
    pp_full_offload: float | None  # prompt tokens/s there
    tg_no_offload: float | None  # tokens/s with no layer on the GPU
    run_dir: str


def expand_run_dirs(patterns: list[str], downloads: Path | None = None) -> list[Path]:
    """Run folders named or matched by glob patterns, in order, each once; a folder without
    ``run.json`` is skipped unless named exactly (then it is an error). An ``s3://`` pattern's runs are
    copied into ``downloads/<run id>/`` first (default: a ``runs`` folder in the working directory)."""
    from playbook.runfolder.remote import check_remote, download_run, is_remote, list_runs

    found: list[Path] = []
    for pattern in patterns:
        check_remote(pattern)
        if is_remote(pattern):
            urls = list_runs(pattern)
            if not urls and not glob.has_magic(pattern):
                raise PlaybookError(f"{pattern} is not a run folder (no {RUN})")
            folder = Path(downloads or "runs")
            matches = [download_run(url, folder / url.rstrip("/").rsplit("/", 1)[-1]) for url in urls]
            found += [m for m in matches if m.resolve() not in {p.resolve() for p in found}]
            continue
        names = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for match in map(Path, names):
            if not RunFolder(match).exists():
                if glob.has_magic(pattern):
                    continue
                raise PlaybookError(f"{match} is not a run folder (no {RUN})")
            if match.resolve() not in {p.resolve() for p in found}:
                found.append(match)
    if not found:
        raise PlaybookError(f"no run folder matches {' '.join(patterns)}")
    return found


def fleet_row(run_dir: Path) -> FleetRow:
    from playbook.facts import Facts
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.verify.step import VerifyResult
    from playbook.verify.units.model_file import MODEL_FILE
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP

    run = RunFolder(Path(run_dir))
    layout = run.layout
    record = run.record()
    params = json.loads(layout.params.read_text()) if layout.params.is_file() else {}
    facts = read_json(Facts, layout.detect_facts) if layout.detect_facts.is_file() else None
    builds = {n: read_json(BuildResult, layout.build_result(n)) for n in layout.attempts("build")}
    verifies = {n: read_json(VerifyResult, layout.verify_result(n)) for n in layout.attempts("verify")}
    plans = layout.attempts("plan")
    plan = read_json(BuildPlan, layout.plan(plans[-1])) if plans else None
    toolkit = next((t for t in (facts.cuda_toolkits if facts else []) if plan and t.root == plan.cuda_toolkit), None)
    gpu = facts.gpus[0] if facts and facts.gpus else None
    passed = [n for n, v in verifies.items() if v.ok]
    final = verifies[passed[-1]] if passed else None
    sweep = final.measured(OFFLOAD_SWEEP) if final else None
    points = sweep.measured if sweep else []
    full = max(points, key=lambda p: p.n_gpu_layers, default=None)
    none = next((p for p in points if p.n_gpu_layers == 0), None)
    wheel_build = builds.get(passed[-1]) if passed else None
    model_file = final.measured(MODEL_FILE) if final else None
    model = model_file.description if model_file else {}
    return FleetRow(
        run_id=run.run_id,
        host=run.run_id.split("Z-", 1)[-1],
        gpu=gpu.name if gpu else "",
        compute_capability=gpu.compute_capability if gpu else "",
        driver=facts.driver.version if facts else "",
        toolkit=toolkit.version if toolkit else "",
        cpu=facts.cpu.model if facts else "",
        cores=facts.cpu.logical_cores if facts else None,
        python=facts.python.version if facts else "",
        backend=str(plan.backend) if plan else "",
        cuda_architectures=plan.cuda_architectures if plan else "",
        model=model.get("name") or "{shape} {quant}".format(**{"shape": "", "quant": "", **params.get("model", {})}),
        attempts=len(builds),
        outcome=record.outcome.value,
        build_s_total=round(sum(b.duration_s for b in builds.values()), 2),
        wheel_build_s=wheel_build.duration_s if wheel_build else None,
        wheel_reused=bool(wheel_build and wheel_build.reused_wheel),
        full_offload_layers=full.n_gpu_layers if full else None,
        tg_full_offload=_round(full.tg_tokens_per_s) if full else None,
        pp_full_offload=_round(full.pp_tokens_per_s) if full else None,
        tg_no_offload=_round(none.tg_tokens_per_s) if none else None,
        run_dir=str(run.path),
    )


def fleet_table(run_dirs: list[str | Path]):
    """The fleet view as a pandas DataFrame, one row per run, in the given order."""
    import pandas as pd

    rows = [asdict(fleet_row(Path(d))) for d in run_dirs]
    return pd.DataFrame(rows, columns=[f.name for f in fields(FleetRow)])


def write_outputs(table, output_dir: str | Path) -> list[Path]:
    """``compare.csv`` and ``compare.png`` (tokens/s at full offload and build time, per run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    csv = output_dir / CSV_FILE
    table.to_csv(csv, index=False)
    labels = [f"{r.run_id}\n{r.gpu or 'no GPU'} · {r.model}" for r in table.itertuples()]
    fig, (speed, build) = plt.subplots(1, 2, figsize=(12, 1.2 + 1.1 * len(table)), sharey=True)
    positions = range(len(table))
    speed.barh(positions, table["tg_full_offload"].fillna(0), color="#3b7dd8", label="all layers on the GPU")
    speed.barh(positions, table["tg_no_offload"].fillna(0), color="#b8c7dd", label="no layer on the GPU")
    speed.set_xlabel("token generation, tokens/s")
    speed.set_yticks(list(positions), labels, fontsize=8)
    speed.legend(fontsize=8, loc="lower right")
    for y, value in zip(positions, table["tg_full_offload"]):
        if value is not None and not math.isnan(value):
            speed.annotate(f"{value:.0f}", (value, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    build.barh(positions, table["build_s_total"], color="#999")
    build.barh(positions, table["wheel_build_s"].fillna(0), color="#d88b3b", label="attempt whose wheel passed verify")
    build.set_xlabel("build time, s (grey: all attempts)")
    build.legend(fontsize=8, loc="lower right")
    speed.invert_yaxis()
    fig.suptitle("llama-cpp-python builds across machines")
    fig.tight_layout()
    png = output_dir / PLOT_FILE
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [csv, png]


def run_compare_notebook(run_dirs: list[Path], output_dir: Path) -> list[Path]:
    """Execute ``notebooks/compare.ipynb`` into ``output_dir`` (it writes the CSV and the plot)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    executed = output_dir / EXECUTED
    papermill.execute_notebook(
        str(NOTEBOOK), str(executed),
        # relative to the output folder (the kernel's cwd), so the executed notebook reads anywhere
        parameters={"run_dirs": [os.path.relpath(Path(d).resolve(), output_dir.resolve()) for d in run_dirs],
                    "output_dir": "."},
        cwd=str(output_dir), **papermill_options(),
    )
    return [executed, output_dir / CSV_FILE, output_dir / PLOT_FILE]


@dataclass
class OverlaySeries:
    """One run's sweep in an overlay: its verified points, and what tells it apart from the others."""

    run_id: str
    backend: str
    gpu: str
    model: str
    model_bytes: int
    tg_limit: float | None  # the memory-bandwidth limit verify computed for this model on this GPU
    points: list  # SweepPoint, status ok only

    @property
    def label(self) -> str:
        return f"{self.backend} · {self.gpu}" if self.gpu else self.backend


def overlay_series(run_dir: Path) -> OverlaySeries:
    """The sweep of a run's last verified attempt (else its last verify), with its backend and GPU."""
    from playbook.facts import Facts
    from playbook.steps.configure import BuildPlan
    from playbook.verify.step import VerifyResult
    from playbook.verify.units.model_file import MODEL_FILE
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
    from playbook.verify.units.throughput import THROUGHPUT

    run = RunFolder(Path(run_dir))
    layout = run.layout
    attempts = layout.attempts("verify")
    if not attempts:
        raise PlaybookError(f"{run_dir} has no verify result to overlay")
    verifies = {n: read_json(VerifyResult, layout.verify_result(n)) for n in attempts}
    attempt = max((n for n, v in verifies.items() if v.ok), default=attempts[-1])
    verify = verifies[attempt]
    plan = read_json(BuildPlan, layout.plan(attempt)) if layout.plan(attempt).is_file() else None
    facts = read_json(Facts, layout.detect_facts) if layout.detect_facts.is_file() else None
    from playbook.verify.sweep import gpu_bandwidth_gb_per_s

    best = facts.best_gpu if facts else None
    gpu = best.name if best else ""
    if facts and plan:
        gpu = registry.unit(plan.backend).device(facts) or gpu
    model_file, throughput, sweep = (verify.measured(MODEL_FILE), verify.measured(THROUGHPUT),
                                     verify.measured(OFFLOAD_SWEEP))
    model = model_file.description if model_file else {}
    model_bytes = int(model.get("file_size_bytes", 0))
    limit = throughput.tg_limit_tokens_per_s if throughput else None
    if limit is None and best and model_bytes:  # runs verified before the limit was recorded
        bandwidth = gpu_bandwidth_gb_per_s(best.memory_bus_width_bits, best.memory_clock_max_mhz)
        limit = bandwidth * 1e9 / model_bytes if bandwidth else None
    return OverlaySeries(run.run_id, str(plan.backend) if plan else "", gpu, str(model.get("name", "")),
                         model_bytes, limit, sweep.measured if sweep else [])


def write_overlay(run_dirs: list[Path], output_dir: str | Path) -> list[Path]:
    """One figure of several runs of the same model (e.g. one GPU, CUDA and Vulkan builds of one source):
    tokens/s by offloaded layers, prompt processing and generation side by side, one line per run, and the
    memory-bandwidth limit of token generation. Also overlay.csv, one row per run and layer count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    series = [overlay_series(Path(d)) for d in run_dirs]
    models = {(s.model, s.model_bytes) for s in series}
    if len(models) > 1:
        raise PlaybookError("an overlay compares runs of one model; these ran "
                            + ", ".join(f"{s.run_id}: {s.model or '?'}" for s in series))
    labels = [s.label for s in series]
    if len(set(labels)) < len(labels):  # the same backend twice: tell the runs apart
        labels = [f"{label} ({s.run_id})" for label, s in zip(labels, series)]
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    rows = ["run_id,backend,gpu,n_gpu_layers,offloaded_layers,pp_tokens_per_s,tg_tokens_per_s,tg_limit_tokens_per_s"]
    for s in series:
        rows += [f"{s.run_id},{s.backend},\"{s.gpu}\",{p.n_gpu_layers},{p.offloaded_layers if p.offloaded_layers is not None else ''},"
                 f"{p.pp_tokens_per_s:.2f},{p.tg_tokens_per_s:.2f},{f'{s.tg_limit:.1f}' if s.tg_limit else ''}"
                 for p in s.points]
    csv = output_dir / f"{OVERLAY_STEM}.csv"
    csv.write_text("\n".join(rows) + "\n", encoding="utf-8")

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    markers = "osD^v<>"
    for ax, attr, title in ((axes[0], "pp", "prompt processing"), (axes[1], "tg", "token generation")):
        for index, (s, label) in enumerate(zip(series, labels)):
            xs = [p.n_gpu_layers for p in s.points]
            ys = [getattr(p, f"{attr}_tokens_per_s") for p in s.points]
            errs = [getattr(p, f"{attr}_stdev") or 0 for p in s.points]
            ax.errorbar(xs, ys, yerr=errs, marker=markers[index % len(markers)], capsize=3, label=label)
        if attr == "tg":
            for limit in sorted({round(s.tg_limit) for s in series if s.tg_limit}):
                ax.axhline(limit, color="gray", linestyle=":", label=f"memory-bandwidth limit ({limit:.0f} t/s)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layers offloaded to the GPU (n_gpu_layers)")
        ax.set_ylabel("tokens/s")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    model = series[0].model or "model"
    fig.suptitle(f"{model} ({series[0].model_bytes / 1e9:.2f} GB): " + " vs ".join(dict.fromkeys(s.backend for s in series)))
    fig.tight_layout()
    paths = [output_dir / f"{OVERLAY_STEM}.png", output_dir / f"{OVERLAY_STEM}.svg"]
    for path in paths:
        fig.savefig(path, dpi=120)
    plt.close(fig)
    return [csv, *paths]


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
