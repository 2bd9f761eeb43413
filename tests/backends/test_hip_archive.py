"""The archived HIP run (outputs/reference/): llama-cpp-python 0.3.15 built by the playbook with Debian 13's
ROCm 5.7.1 on a Debian 12 machine without an AMD GPU, for gfx1100;gfx1030, and verified "compiled only". The
HIP row of docs/backends.md quotes these files; this test reads them and checks every figure the README gives."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "outputs" / "reference" / "20261125T145359Z-vm"
PROGRESS = re.compile(r"^\s*\[(\d+)/(\d+)\]", re.MULTILINE)


def hip_row() -> str:
    return next(line for line in (ROOT / "docs" / "backends.md").read_text().splitlines()
                if line.startswith("| HIP (ROCm) |"))


def read(name: str) -> dict:
    return json.loads((RUN / name).read_text())


def test_the_run_is_the_playbooks_plan_for_debians_rocm():
    plan = read("plan-attempt-1.json")
    assert plan["backend"] == "hip" and plan["gpu_targets"] == "gfx1100;gfx1030"
    assert plan["env"]["HIP_PLATFORM"] == "amd" and "ROCM_PATH" not in plan["env"]
    assert plan["env"]["HIPCXX"].endswith("rocm-debian-5.7.1/usr/lib/llvm-17/bin/clang")
    assert [w["code"] for w in plan["warnings"]] == ["rocm-needs-newer-glibc"]
    detect = read("detect.json")
    assert detect["rocm"]["version"] == "5.7" and detect["rocm"]["layout"] == "debian"
    assert detect["rocm"]["glibc_needed"] == "2.38" and detect["os"]["glibc"] == "2.36"
    assert read("build-attempt-1.json")["source"]["version"] == "0.3.15"


def test_the_build_log_ends_where_the_build_result_says():
    build = read("build-attempt-1.json")
    done, total = PROGRESS.findall((RUN / "build-attempt-1.log").read_text())[-1]
    assert build["ok"] and (int(done), int(total)) == (build["progress"]["done"], build["progress"]["total"])


def test_verify_says_compiled_only_with_both_targets_in_the_hip_library():
    verify = read("verify-attempt-1.json")
    assert verify["ok"] and verify["summary"].startswith("compiled only: ") and verify["compiled_only"]
    bundles = verify["hip_bundles"]
    assert bundles["library"].endswith("libggml-hip.so") and bundles["architectures"] == ["gfx1030", "gfx1100"]
    assert bundles["missing"] == [] and bundles["bundles"] > 0
    listing = (RUN / "verify-logs" / "attempt-1" / "hip-fatbin.log").read_text()
    assert f"{bundles['bundles']} offload bundle(s)" in listing and "hipv4-amdgcn-amd-amdhsa--gfx1100" in listing
    # the import failed as the plan said it would: the ROCm libraries are not loadable here
    assert "libhipblas.so.0: cannot open shared object file" in (RUN / "verify-logs" / "attempt-1" / "probe.log").read_text()


def test_the_readme_quotes_the_archived_figures():
    build, verify = read("build-attempt-1.json"), read("verify-attempt-1.json")
    row = hip_row()
    assert f"all {build['progress']['done']} of {build['progress']['total']} build steps" in row
    assert f"in {round(build['duration_s'])} s" in row
    assert f"{verify['hip_bundles']['bundles']} offload bundles" in row and "gfx1030 and gfx1100" in row
    assert "llama-cpp-python 0.3.15" in row and "ROCm 5.7.1" in row and "glibc 2.38" in row and "2.36" in row
