"""The one converter from verify's older result files to the mapping by unit.

Until the mapping, ``verify-attempt-N.json`` kept every unit's value in a top-level field of its own (``probe``,
``points``, ``agreement``, ``rpc`` ...). The archived runs under ``outputs/reference/`` have that shape, and are
never rewritten: :meth:`playbook.verify.result.VerifyResult.upgrade_json` reads them through
:func:`flat_to_mapping`. The flat shape is closed: a new unit never had a field there, so nothing is added here.
"""

from __future__ import annotations

from typing import Any

# The flat shape's fields that are verify's own, kept where they are.
OWN_FIELDS = ("ok", "wheel", "site_dir", "threads", "settings", "findings", "summary", "compiled_only", "runtime_env",
              "dll_directories", "extras", "units")


def flat_to_mapping(data: dict[str, Any]) -> dict[str, Any]:
    """An older verify result (every unit's value in a top-level field) in the mapping's shape: each value under its
    unit's name, as the unit's value type holds it. Fields an older file lacks are left out; a unit whose value it
    never kept is absent, as a unit that did not run."""
    new = {key: data[key] for key in OWN_FIELDS if key in data}
    values: dict[str, Any] = {}
    probe = data.get("probe")
    if probe is not None and probe.get("status") != "not run":
        result = probe.get("result") or {}
        gpu_skipped = data.get("gpu_skipped") or ""
        values["import-probe"] = {
            "outcome": probe, "library_file": data.get("library_file"), "gpu_skipped": gpu_skipped,
            # the sweep measured layers on the GPU only where the wheel offloaded here
            "gpu_offload": max(data.get("layer_counts") or [0]) > 0,
            "built_for_gpu": bool(result.get("supports_gpu_offload")) or bool(gpu_skipped)}
    if data.get("model_path"):
        values["model"] = {"path": data["model_path"], "description": data.get("model") or {}}
    if data.get("layer_counts") or data.get("points"):
        settings = data.get("settings") or {"threads": data.get("threads", 0)}
        values["offload-sweep"] = {"layer_counts": data.get("layer_counts") or [], "settings": settings,
                                   "points": data.get("points") or []}
    for old, unit in (("agreement", "gpu-cpu-agreement"), ("llama_bench", "llama-bench"), ("server", "server"),
                      ("tune", "tune"), ("cxx_runtime", "cxx-runtime"), ("rpc", "rpc-offload")):
        if data.get(old) is not None:
            values[unit] = data[old]
    if data.get("csv_file"):
        values["throughput"] = {key: data.get(key) for key in (
            "csv_file", "plot_files", "gpu_bandwidth_gb_per_s", "tg_limit_tokens_per_s")}
    for old, tool in (("cuda_elf", "cuobjdump"), ("hip_bundles", "hip-fatbin")):
        if data.get(old) is not None:
            values["machine-code"] = {"tool": tool, "listing": data[old]}
    if data.get("backend_libraries"):
        values["backend-library"] = {"checks": data["backend_libraries"]}
    new["measurements"] = values
    return new
