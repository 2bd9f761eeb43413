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
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import papermill

from playbook import resources
from playbook.errors import PlaybookError
from playbook.runfolder.folder import RunFolder
from playbook.serialization import read_json

NOTEBOOK = resources.notebook("compare")
CSV_FILE, PLOT_FILE, EXECUTED = "compare.csv", "compare.png", "compare.ipynb"


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
                raise PlaybookError(f"{pattern} is not a run folder (no run.json)")
            folder = Path(downloads or "runs")
            matches = [download_run(url, folder / url.rstrip("/").rsplit("/", 1)[-1]) for url in urls]
            found += [m for m in matches if m.resolve() not in {p.resolve() for p in found}]
            continue
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for match in map(Path, matches):
            if not RunFolder(match).exists():
                if glob.has_magic(pattern):
                    continue
                raise PlaybookError(f"{match} is not a run folder (no run.json)")
            if match.resolve() not in {p.resolve() for p in found}:
                found.append(match)
    if not found:
        raise PlaybookError(f"no run folder matches {' '.join(patterns)}")
    return found


def fleet_row(run_dir: Path) -> FleetRow:
    from playbook.steps.build import BuildResult
    from playbook.steps.configure import BuildPlan
    from playbook.steps.detect import Facts
    from playbook.verify.step import VerifyResult

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
    points = [p for p in (final.points if final else []) if p.status == "ok"]
    full = max(points, key=lambda p: p.n_gpu_layers, default=None)
    none = next((p for p in points if p.n_gpu_layers == 0), None)
    wheel_build = builds.get(passed[-1]) if passed else None
    model = final.model if final else {}
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
        if value == value and value is not None:  # not NaN
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
        kernel_name="python3", cwd=str(output_dir), progress_bar=False,
    )
    return [executed, output_dir / CSV_FILE, output_dir / PLOT_FILE]


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
