"""The failure knowledge base (playbook/knowledge/failures.yaml) against real failure texts.

Every example under tests/data/failures/<id>/ is a verbatim excerpt of a real log, traceback or
error (its first line, ``# source: ...``, says where it comes from and is stripped before matching).
A file whose name starts with ``multi-`` shows several problems at once: its directory's id must be
found, but need not come first. Every other example must be diagnosed as its directory's id first.
The logs under tests/data/clean/ come from healthy builds and runs and must give no finding.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import pytest
import yaml

from playbook.knowledge.failures import (
    KnowledgeBaseError,
    diagnose_text,
    load_knowledge_base,
    parse_knowledge_base,
)

DATA = Path(__file__).resolve().parents[1] / "data"
FAILURES = DATA / "failures"
CLEAN = DATA / "clean"

REQUIRED_IDS = [
    "mtmd-not-built",
    "build-requirements-unreachable",
    "missing-symbol",
    "install-failed",
    "prebuilt-lib-not-used",
    "server-failed",
    "deprecated-cuda-flag",
    "cuda-toolset-missing",
    "host-compiler-unsupported",
    "nvcc-not-found",
    "cuda-arch-detection-failed",
    "cuda-arch-unsupported",
    "cuda-toolkit-too-old",
    "cccl-headers-missing",
    "cublas-missing",
    "build-backend-missing",
    "cxx-compiler-missing",
    "compiler-out-of-memory",
    "libcuda-stub-link",
    "shared-library-not-found",
    "no-gpu-visible",
    "glibcxx-mismatch",
    "driver-too-old",
    "no-kernel-image",
    "cpu-only-build",
    "illegal-instruction",
    "gpu-out-of-memory",
    "macos-arch-mismatch",
    "openmp-conflict",
    "wheel-platform-mismatch",
    "windows-cmake-args-quoting",
    "gpu-hang",
    "process-crash",
]

# Lines that appear in healthy builds and runs; none of them may be taken for a failure.
HARMLESS_LINES = [
    ("nvcc warning : Support for offline compilation for architectures prior to '<compute/sm/lto>_75' will be "
    "removed in a future release (Use -Wno-deprecated-gpu-targets to suppress warning)."),
    "-- Using CMAKE_CUDA_ARCHITECTURES=90 CMAKE_CUDA_ARCHITECTURES_NATIVE=No CUDA devices found.-real",
    "-- Could NOT find NCCL (missing: NCCL_LIBRARY NCCL_INCLUDE_DIR) ",
    "-- Warning: NCCL not found, performance for multiple CUDA GPUs will be suboptimal",
    ("-- Warning: ccache not found - consider installing it for faster compilation or disable this warning with "
    "GGML_CCACHE=OFF"),
    "-- Found OpenMP_CXX: -fopenmp (found version \"4.5\")",
    "-- CUDA Toolkit found",
    "-- Found CUDAToolkit: /usr/local/cuda/targets/x86_64-linux/include (found version \"12.4.131\")",
    "-- The CUDA compiler identification is NVIDIA 12.4.131",
    "-- CUDA host compiler is GNU 13.3.0",
    "-- Including CUDA backend",
    "-- Replacing 120 in CMAKE_CUDA_ARCHITECTURES with 120a",
    "/sbin/ldconfig.real: /usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link",
    ("2024-03-06 10:38:30,059 - scikit_build_core - WARNING - Can't find a Python library, got libdir=None, "
    "ldlibrary=None, multiarch=None, masd=None"),
    "ggml_cuda_init: found 1 CUDA devices:",
    "load_tensors: offloaded 33/33 layers to GPU",
    "load_tensors: offloaded 10/33 layers to GPU",
    "Successfully installed llama-cpp-python-0.3.36",
    "  Building wheel for llama-cpp-python (pyproject.toml) ... done",
    "set CMAKE_ARGS=-DGGML_CUDA=on",
    '$env:CMAKE_ARGS = "-DGGML_CUDA=on -DCMAKE_CUDA_FLAGS=-allow-unsupported-compiler"',
    "export CMAKE_ARGS=\"-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=86\" FORCE_CMAKE=1",
    "-- Check for working CUDA compiler: /usr/local/cuda/bin/nvcc - skipped",
    "playbook: verify: GPU offload: True",
    "imported llama_cpp 0.3.36; GPU offload supported: True",
]

KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

# Every entry of the YAML, not only the required ones: each is checked for completeness, shells and remedy.
ALL_IDS = load_knowledge_base().ids


def _strip_source(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("# source:")) + "\n"


def _examples() -> list[Path]:
    return sorted(FAILURES.glob("*/*.txt"))


def _clean_logs() -> list[Path]:
    return sorted(CLEAN.glob("*.txt"))


@pytest.fixture(scope="module")
def document() -> dict:
    text = resources.files("playbook.knowledge").joinpath("failures.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


@pytest.fixture(scope="module")
def knowledge(document):
    return parse_knowledge_base(document)


# ------------------------------------------------------------------ the file itself


def test_yaml_parses_with_the_loader(document, knowledge):
    assert document["version"] == 1
    assert knowledge.version == 1
    assert len(knowledge.entries) == len(document["failures"])
    assert load_knowledge_base().ids == knowledge.ids


@pytest.mark.parametrize("failure_id", REQUIRED_IDS)
def test_required_id_exists(knowledge, failure_id):
    assert failure_id in knowledge.ids


def test_ids_are_unique_and_kebab_case(document):
    ids = [raw["id"] for raw in document["failures"]]
    assert len(ids) == len(set(ids)), "duplicate ids"
    assert [i for i in ids if not KEBAB.match(i)] == []


def test_duplicate_id_is_rejected(document):
    doubled = {"version": 1, "failures": [document["failures"][0], document["failures"][0]]}
    with pytest.raises(KnowledgeBaseError):
        parse_knowledge_base(doubled)


@pytest.mark.parametrize("failure_id", ALL_IDS)
def test_entry_is_complete(knowledge, failure_id):
    entry = knowledge.get(failure_id)
    assert entry.title.strip()
    assert entry.cause.strip()
    assert entry.fix.strip()
    assert entry.patterns, "an entry without patterns never matches"
    assert 0 < entry.specificity <= 100


@pytest.mark.parametrize("failure_id", ALL_IDS)
def test_fix_gives_every_shell_where_a_variable_is_set(knowledge, failure_id):
    entry = knowledge.get(failure_id)
    fix = entry.fix
    if not re.search(r"\$env:|Env:\w+|\bset \w+=|\b(?:export|unset) \w+", fix):
        return  # no environment variable to set or clear
    if {"any", "windows"} & set(entry.platforms):
        assert re.search(r"\$env:|Remove-Item Env:", fix), "PowerShell syntax missing"
    assert re.search(r"\bset \w+=|\b(?:export|unset) \w+", fix), "cmd or bash syntax missing"


# ------------------------------------------------------------------ remedies


@pytest.mark.parametrize("failure_id", ALL_IDS)
def test_automatic_exactly_when_a_remedy_exists(knowledge, failure_id):
    entry = knowledge.get(failure_id)
    example = next((FAILURES / failure_id).glob("*.txt"))
    finding = next(f for f in diagnose_text(_strip_source(example.read_text(encoding="utf-8")), knowledge=knowledge)
                   if f.id == failure_id)
    assert finding.automatic is (entry.remedy is not None)


EXPECTED_REMEDIES = {
    "deprecated-cuda-flag": lambda r: "-DGGML_CUDA=on" in r.cmake_args_add and r.cmake_args_remove,
    "cuda-arch-unsupported": lambda r: r.use_detected_arch and r.pypi_toolkit,
    "host-compiler-unsupported": lambda r: r.pypi_toolkit,
    "cublas-missing": lambda r: r.toolkit_add == ("cublas",),
    "cccl-headers-missing": lambda r: r.toolkit_add == ("cccl",),
    "no-kernel-image": lambda r: r.use_detected_arch,
    "cuda-arch-detection-failed": lambda r: r.use_detected_arch,
    "build-backend-missing": lambda r: r.build_isolation is True and "scikit-build-core" in r.extra_packages,
    "compiler-out-of-memory": lambda r: r.halve_jobs,
    "cpu-only-build": lambda r: "-DGGML_CUDA=on" in r.cmake_args_add and r.env_set == {"FORCE_CMAKE": "1"},
    "openmp-conflict": lambda r: r.cmake_args_add == ("-DGGML_OPENMP=OFF",),
    "cpu-amx-fault": lambda r: r.cmake_args_add == ("-DGGML_NATIVE=OFF",),
    "illegal-instruction": lambda r: r.cmake_args_add == ("-DGGML_NATIVE=OFF",) and len(r.cmake_args_remove) == 1,
    "libcuda-stub-link": lambda r: r.cmake_args_add == ("-DGGML_CUDA_NO_VMM=ON",),
    "mtmd-not-built": lambda r: r.cmake_args_add == ("-DLLAVA_BUILD=ON",),
    "build-requirements-unreachable": lambda r: r.build_isolation is False,
    "cuda-vmm-reserve-failed": lambda r: r.cmake_args_add == ("-DGGML_CUDA_NO_VMM=ON",),
    "deprecated-hip-flag": lambda r: r.cmake_args_add == ("-DGGML_HIP=on",) and len(r.cmake_args_remove) == 2,
    "metal-common-header-missing": lambda r: r.cmake_args_add == ("-DGGML_METAL_EMBED_LIBRARY=ON",)
    and r.backends == ("metal",),
    "native-cpu-flag-rejected": lambda r: r.cmake_args_add == ("-DGGML_NATIVE=OFF",),
    "cxx-runtime-copies": lambda r: r.shared_cxx_runtime and not r.cmake_args_add,
}


@pytest.mark.parametrize("failure_id", sorted(EXPECTED_REMEDIES))
def test_expected_remedy(knowledge, failure_id):
    remedy = knowledge.get(failure_id).remedy
    assert remedy is not None
    assert EXPECTED_REMEDIES[failure_id](remedy)


@pytest.mark.parametrize("failure_id", sorted(set(ALL_IDS) - set(EXPECTED_REMEDIES)))
def test_no_remedy_where_a_person_must_act(knowledge, failure_id):
    assert knowledge.get(failure_id).remedy is None


@pytest.mark.parametrize("version, apt, pip", [("13.0.88", "libcublas-dev-13-0", "`nvidia-cublas`"),
                                               ("12.4.131", "libcublas-dev-12-4", "`nvidia-cublas-cu12`")])
def test_cublas_fix_names_the_packages_of_the_detected_cuda(version, apt, pip):
    text = (FAILURES / "cublas-missing" / "configure-cuda13-without-cublas.txt").read_text(encoding="utf-8")
    finding = next(f for f in diagnose_text(text, cuda_version=version) if f.id == "cublas-missing")
    assert apt in finding.fix and pip in finding.fix
    other = "libcublas-dev-12-4" if apt != "libcublas-dev-12-4" else "libcublas-dev-13-0"
    assert other not in finding.fix


def test_cccl_fix_names_the_release_and_unknown_versions_stay_placeholders():
    text = (FAILURES / "cccl-headers-missing" / "conda-nv-target.txt").read_text(encoding="utf-8")
    assert "cuda-cccl-12-1" in next(f for f in diagnose_text(text, cuda_version="12.1.105")
                                   if f.id == "cccl-headers-missing").fix
    generic = next(f for f in diagnose_text(text) if f.id == "cccl-headers-missing").fix
    assert "cuda-cccl-X-Y" in generic and "{" not in generic


def test_no_fix_text_keeps_a_placeholder(knowledge):
    from playbook.knowledge.failures import fill_fix

    for entry in knowledge.entries:
        assert not re.search(r"\{(cuda|cuda_dash|cu)\}", fill_fix(entry.fix, "13.0")), entry.id


def test_deprecated_flag_remedy_removes_only_the_old_flags(knowledge):
    remove = [re.compile(p) for p in knowledge.get("deprecated-cuda-flag").remedy.cmake_args_remove]
    args = ["-DLLAMA_CUBLAS=on", "-DLLAMA_CUDA=ON", "-DLLAMA_CUBLAS:BOOL=1", "-DGGML_CUDA=on",
            "-DCMAKE_CUDA_ARCHITECTURES=86", "-DLLAMA_CURL=OFF"]
    kept = [a for a in args if not any(r.search(a) for r in remove)]
    assert kept == ["-DGGML_CUDA=on", "-DCMAKE_CUDA_ARCHITECTURES=86", "-DLLAMA_CURL=OFF"]


# ------------------------------------------------------------------ the examples


@pytest.mark.parametrize("failure_id", ALL_IDS)
def test_every_id_has_an_example(failure_id):
    files = [p for p in (FAILURES / failure_id).glob("*.txt") if p.stat().st_size > 0]
    assert files, f"no example text under tests/data/failures/{failure_id}/"


def test_example_directories_name_known_ids(knowledge):
    assert sorted(p.name for p in FAILURES.iterdir() if p.is_dir()) == sorted(knowledge.ids)


@pytest.mark.parametrize("example", [*_examples(), *_clean_logs()], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_names_a_source_that_exists_first(example):
    """A source is a public URL, a file of this repository or of ../shared/ (the public guides), or the
    command that produced the log on this project's machines; a made-up line says it is synthetic and
    names the file whose format it copies. Every repository file a source names must exist."""
    root = Path(__file__).resolve().parents[2]
    first = example.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# source: "), "the first line must be '# source: ...'"
    source = first.removeprefix("# source: ")
    named = re.findall(r"(?<![\w./-])((?:\.\./shared|playbook|tests|benchmarks|scripts|notebooks|params|outputs)"
                       r"/[\w./*-]*\w)", source)
    shared = root.parent / "shared"  # beside the checkout where the guides are; elsewhere only the form is checked
    missing = [name for name in named if not (name.startswith("../shared/") and not shared.is_dir())
               and not any(path.exists() for path in [root / name, *root.glob(name)])]
    assert missing == [], f"the source names files that do not exist: {missing}"
    url = re.search(r"https?://[\w-]+(?:\.[\w-]+)+/\S+", source)
    produced = re.match(r"(?:\w+ )*produced on (?:this|a GPU) machine\b.*?(?: with |: )\S+", source)
    assert url or named or produced, f"not a public URL, a file, or the command that produced it: {source!r}"
    if "synthetic, not a real log" in source:
        assert any(name.startswith("playbook/") for name in named), "name the file whose format it copies"


@pytest.mark.parametrize("example", _examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_diagnosed(knowledge, example):
    expected = example.parent.name
    text = _strip_source(example.read_text(encoding="utf-8"))
    findings = diagnose_text(text)
    ids = [f.id for f in findings]
    assert expected in ids, f"{expected} not found; got {ids}"
    if not example.name.startswith("multi-"):
        assert ids[0] == expected, f"{expected} should come first; got {ids}"
    finding = findings[ids.index(expected)]
    assert finding.evidence, "a finding must quote the line that gave it away"
    assert 1 <= finding.line_number <= len(text.splitlines())


@pytest.mark.parametrize("example", _examples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_is_found_on_its_own_platform_and_stage(knowledge, example):
    entry = knowledge.get(example.parent.name)
    text = _strip_source(example.read_text(encoding="utf-8"))
    platform = next(p for p in entry.platforms) if "any" not in entry.platforms else "any"
    stage = next(s for s in entry.stages) if "any" not in entry.stages else "any"
    ids = [f.id for f in diagnose_text(text, platform=platform, stage=stage)]
    assert entry.id in ids


def test_multi_examples_report_every_problem():
    text = _strip_source((FAILURES / "deprecated-cuda-flag" / "multi-llama-cuda-native-no-cublas.txt")
                         .read_text(encoding="utf-8"))
    ids = [f.id for f in diagnose_text(text)]
    assert {"deprecated-cuda-flag", "cuda-arch-detection-failed", "cublas-missing"} <= set(ids)


def test_two_problems_are_both_reported_most_specific_first(knowledge):
    deprecated = _strip_source((FAILURES / "deprecated-cuda-flag" / "llama-cuda-deprecated-warning.txt")
                               .read_text(encoding="utf-8"))
    killed = _strip_source((FAILURES / "compiler-out-of-memory" / "cc1plus-killed.txt").read_text(encoding="utf-8"))
    findings = diagnose_text(deprecated + killed)
    ids = [f.id for f in findings]
    assert ids[:2] == sorted(["deprecated-cuda-flag", "compiler-out-of-memory"],
                             key=lambda i: -knowledge.get(i).specificity)
    assert len(ids) == 2
    # each finding quotes its own line
    by_id = {f.id: f for f in findings}
    assert "deprecated" in by_id["deprecated-cuda-flag"].evidence
    assert "cc1plus" in by_id["compiler-out-of-memory"].evidence
    assert by_id["deprecated-cuda-flag"].line_number < by_id["compiler-out-of-memory"].line_number


@pytest.mark.long
def test_findings_are_ordered_by_specificity(knowledge):
    for example in _examples():
        findings = diagnose_text(_strip_source(example.read_text(encoding="utf-8")))
        ranks = [knowledge.get(f.id).specificity for f in findings]
        assert ranks == sorted(ranks, reverse=True), example


def test_platform_filter_hides_other_platforms():
    text = _strip_source((FAILURES / "cuda-toolset-missing" / "pip-vs2022-buildtools.txt").read_text(encoding="utf-8"))
    assert [f.id for f in diagnose_text(text, platform="windows")] == ["cuda-toolset-missing"]
    assert diagnose_text(text, platform="linux") == []


# ------------------------------------------------------------------ clean logs


def test_clean_logs_exist():
    names = {p.name for p in _clean_logs()}
    assert {"cpu-build.txt", "cuda-build.txt", "verify-gpu-ok.txt"} <= names


@pytest.mark.parametrize("log", _clean_logs(), ids=lambda p: p.name)
def test_clean_log_gives_no_finding(log):
    findings = diagnose_text(_strip_source(log.read_text(encoding="utf-8")))
    assert [(f.id, f.evidence) for f in findings] == []


def test_cpu_only_verify_line_is_recognised():
    ids = [f.id for f in diagnose_text("imported llama_cpp 0.3.36; GPU offload supported: False\n")]
    assert ids == ["cpu-only-build"]


def test_healthy_verify_shows_full_offload():
    text = (CLEAN / "verify-gpu-ok.txt").read_text(encoding="utf-8")
    assert "offloaded 17/17 layers to GPU" in text


@pytest.mark.parametrize("line", HARMLESS_LINES)
def test_harmless_line_gives_no_finding(line):
    assert [(f.id, f.evidence) for f in diagnose_text(line + "\n")] == []


REFERENCE_RUNS = Path(__file__).resolve().parents[2] / "outputs" / "reference"


def _succeeded(log: Path) -> bool:
    result = log.with_suffix(".json")
    return result.is_file() and json.loads(result.read_text()).get("ok") is True


@pytest.mark.parametrize("log", sorted(p for p in REFERENCE_RUNS.glob("*/build-attempt-*.log") if _succeeded(p)),
                         ids=lambda p: p.parent.name + "/" + p.name)
def test_real_build_logs_of_builds_that_succeeded_are_clean(log):
    assert diagnose_text(log.read_text(errors="replace")) == []


# ------------------------------------------------------------------ families and the knowledge-base page's count

README = Path(__file__).resolve().parents[2] / "docs" / "knowledge-base.md"  # the knowledge base's page


def test_every_entry_has_a_known_family(knowledge):
    assert all(entry.family for entry in knowledge.entries)
    assert sum(knowledge.families().values()) == len(knowledge.entries)


def test_unknown_family_is_rejected(document):
    raw = dict(document["failures"][0], family="gpu-magic")
    with pytest.raises(KnowledgeBaseError, match="gpu-magic"):
        parse_knowledge_base({"version": 1, "failures": [raw]})


def test_readme_counts_match_the_yaml(knowledge):
    text = README.read_text(encoding="utf-8")
    families = knowledge.families()
    assert f"**{len(knowledge.entries)} entries** in **{len(families)} families**" in text
    for family, count in families.items():
        assert f"| `{family}` | {count} |" in text


def test_the_failed_attempt_of_the_gpu_less_cuda_build_is_named():
    """Scenario 001's first attempt: CUDA from PyPI wheels on a machine with no driver and no stub libcuda."""
    log = REFERENCE_RUNS / "20261123T170441Z-vm" / "build-attempt-1.log"
    assert diagnose_text(log.read_text(errors="replace"))[0].id == "libcuda-stub-link"


def test_a_cpu_only_sigill_paste_gets_a_fix_without_a_gpu_backend():
    """A CPU wheel's 'Illegal instruction' must not be told to build with -DGGML_CUDA=on (issue 34)."""
    import re

    from playbook.knowledge.failures import diagnose_text

    (finding,) = [f for f in diagnose_text("$ python -c 'import llama_cpp'\nIllegal instruction (core dumped)\n")
                  if f.id == "illegal-instruction"]
    commands = re.findall(r"CMAKE_ARGS[ =]+\"?(-D[^`\"]+)", finding.fix)
    assert commands and all("GGML_NATIVE=OFF" in c and "GGML_CUDA" not in c for c in commands)
    assert "--no-cache-dir" in finding.fix  # pip would reuse the wheel it cached
