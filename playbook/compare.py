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
from typing import Any

import papermill

from playbook.errors import PlaybookError

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "compare.ipynb"
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


def expand_run_dirs(patterns: list[str]) -> list[Path]:
    """Run folders named or matched by glob patterns, in order, each once; a folder without
    ``run.json`` is skipped unless named exactly (then it is an error)."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for match in map(Path, matches):
            if not (match / "run.json").is_file():
                if glob.has_magic(pattern):
                    continue
                raise PlaybookError(f"{match} is not a run folder (no run.json)")
            if match.resolve() not in {p.resolve() for p in found}:
                found.append(match)
    if not found:
        raise PlaybookError(f"no run folder matches {' '.join(patterns)}")
    return found


def fleet_row(run_dir: Path) -> FleetRow:
    run_dir = Path(run_dir)
    record, params, detect = (_json(run_dir / name) for name in ("run.json", "params.json", "detect.json"))
    builds = _attempts(run_dir, "build")
    verifies = _attempts(run_dir, "verify")
    plans = _attempts(run_dir, "plan")
    plan = plans[max(plans)] if plans else {}
    toolkit = next((t for t in detect.get("cuda_toolkits", []) if t.get("root") == plan.get("cuda_toolkit")), {})
    gpus = detect.get("gpus") or [{}]
    passed = [n for n, v in verifies.items() if v.get("ok")]
    final = verifies[passed[-1]] if passed else {}
    points = [p for p in final.get("points", []) if p.get("status") == "ok"]
    full = max(points, key=lambda p: p["n_gpu_layers"], default=None)
    none = next((p for p in points if p["n_gpu_layers"] == 0), None)
    wheel_build = builds.get(passed[-1], {}) if passed else {}
    model = final.get("model") or {}
    return FleetRow(
        run_id=run_dir.name,
        host=run_dir.name.split("Z-", 1)[-1],
        gpu=gpus[0].get("name", "") if gpus[0] else "",
        compute_capability=gpus[0].get("compute_capability", "") if gpus[0] else "",
        driver=(detect.get("driver") or {}).get("version", ""),
        toolkit=toolkit.get("version", ""),
        cpu=(detect.get("cpu") or {}).get("model", ""),
        cores=(detect.get("cpu") or {}).get("logical_cores"),
        python=(detect.get("python") or {}).get("version", ""),
        backend=plan.get("backend", ""),
        cuda_architectures=plan.get("cuda_architectures", ""),
        model=model.get("name") or "{shape} {quant}".format(**{"shape": "", "quant": "", **params.get("model", {})}),
        attempts=len(builds),
        outcome=record.get("outcome", ""),
        build_s_total=round(sum(b.get("duration_s", 0.0) for b in builds.values()), 2),
        wheel_build_s=wheel_build.get("duration_s"),
        wheel_reused=bool(wheel_build.get("reused_wheel")),
        full_offload_layers=full["n_gpu_layers"] if full else None,
        tg_full_offload=_round(full.get("tg_tokens_per_s")) if full else None,
        pp_full_offload=_round(full.get("pp_tokens_per_s")) if full else None,
        tg_no_offload=_round(none.get("tg_tokens_per_s")) if none else None,
        run_dir=str(run_dir),
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


def _attempts(run_dir: Path, stem: str) -> dict[int, dict[str, Any]]:
    found = {}
    for path in run_dir.glob(f"{stem}-attempt-*.json"):
        tail = path.stem.rsplit("-", 1)[-1]
        if tail.isdigit():
            found[int(tail)] = _json(path)
    return dict(sorted(found.items()))


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None
