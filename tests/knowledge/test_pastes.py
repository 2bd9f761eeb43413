"""Whole issue bodies as users pasted them (tests/data/pastes/, each opening with its source): Markdown
fences and quotes, pip output beside a traceback, Windows prompts. Each must give exactly the findings
named here; a paste that shows no failure gives none, and one that failed in a way no entry knows gives
`unrecognised-failure` with its first error line and stage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbook.errors import ExitCode
from playbook.interfaces.cli import main
from playbook.knowledge.failures import (
    UNRECOGNISED,
    diagnose_file,
    diagnose_text,
    failed_stage,
    first_failure,
    normalise_paste,
    unrecognised,
)

DATA = Path(__file__).resolve().parents[1] / "data"
PASTES = DATA / "pastes"
FAILURES = DATA / "failures"

EXPECTED = {
    "llama-cpp-python-1559-traceback.md": ["shared-library-not-found"],
    "llama-cpp-python-1719-pip-and-traceback.md": ["shared-library-not-found"],
    "llama-cpp-python-2068-cmd-and-quoted-reply.md": ["windows-cmake-args-quoting"],
    "localai-2031-metal.md": ["metal-compiler-missing"],
    "framepack-zluda-4-quoted-rocblas.md": ["rocblas-arch-unsupported"],
    # no failure shown: a typed `set CMAKE_ARGS="-DLLAMA_CUBLAS=on"`, a (venv) D:\> prompt, CMake's probes
    "llama-cpp-python-582-cmd-set-with-quotes.md": [],
    "llama-cpp-python-1538-windows-venv-prompt.md": [],
    "llama-cpp-python-2047-windows-configure.md": [],
    # a path with a space split by the shell: named since the corpus brought path-with-spaces-split
    "llama-cpp-python-2006-powershell-run.md": ["path-with-spaces-split"],
    # failed, and no entry knows why
    "exllama-13-pip-build-ext.md": [UNRECOGNISED],
}

UNRECOGNISED_AT = {
    "exllama-13-pip-build-ext.md": ("compile", "error: [WinError 2] Le fichier spécifié est introuvable"),
}


def test_every_paste_names_its_source_and_has_an_expectation():
    names = sorted(p.name for p in PASTES.glob("*.md"))
    assert names == sorted(EXPECTED)
    for name in names:
        first = (PASTES / name).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("<!-- source: https://github.com/") and first.endswith(" -->")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_paste_gives_exactly_its_findings(name):
    findings = diagnose_file(PASTES / name, detect_failure=True)
    assert [f.id for f in findings] == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(UNRECOGNISED_AT))
def test_unrecognised_paste_names_first_error_line_and_stage(name):
    (finding,) = diagnose_file(PASTES / name, detect_failure=True)
    stage, evidence = UNRECOGNISED_AT[name]
    assert (finding.stage, finding.evidence) == (stage, evidence)
    assert finding.title == f"{stage} failed, and no known failure matches"
    lines = (PASTES / name).read_text(encoding="utf-8").split("\n")
    assert lines[finding.line_number - 1].strip() == evidence


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_exit_status_says_whether_something_was_named(name, capsys):
    status = main(["diagnose", str(PASTES / name), "--json"])
    ids = [f["id"] for f in json.loads(capsys.readouterr().out)]
    assert ids == EXPECTED[name]
    named = [i for i in ids if i != UNRECOGNISED]
    assert status == (ExitCode.FOUND if named else ExitCode.UNRECOGNISED if ids else ExitCode.OK)


def test_quoted_and_fenced_log_is_read_line_for_line():
    paste = "Here is my log:\r\n\r\n> ```\r\n> [  1%] Compiling Metal kernels\r\n> > xcrun: error: unable to find utility \"metal\", not a developer tool or in PATH\r\n> ```\r\n"
    assert normalise_paste(paste).split("\n") == [
        "Here is my log:", "", "", "[  1%] Compiling Metal kernels",
        "xcrun: error: unable to find utility \"metal\", not a developer tool or in PATH", "", ""]
    (finding,) = diagnose_text(paste)
    assert (finding.id, finding.line_number) == ("metal-compiler-missing", 5)


def test_anchored_pattern_matches_inside_a_quote():
    assert [f.id for f in diagnose_text("> ERROR: No matching distribution found for uvicorn\n")] == ["install-failed"]


INNOCUOUS = [
    "-- Looking for pthread_create in pthreads - not found",
    "-- Performing Test CMAKE_HAVE_LIBC_PTHREAD - Failed",
    "/llama.cpp/ggml/src/ggml.c:1234:5: warning: 'ggml_graph_compute_with_ctx' is deprecated [-Wdeprecated-declarations]",
    "warning: Support for offline compilation for architectures prior to sm_75 is deprecated",
    "-- Could NOT find NCCL (missing: NCCL_LIBRARY NCCL_INCLUDE_DIR)",
    "C:\\Users\\me>set CMAKE_ARGS=-DGGML_CUDA=on -DCMAKE_CUDA_FLAGS=-allow-unsupported-compiler",
    "(venv) D:\\ComfyUI>pip install llama-cpp-python --no-cache-dir",
    "  -Werror=implicit-int -Werror=implicit-function-declaration",
    "Successfully installed llama-cpp-python-0.3.36",
]


@pytest.mark.parametrize("line", INNOCUOUS)
def test_innocuous_line_gives_nothing(line):
    assert diagnose_text(line + "\n") == []
    assert first_failure(line + "\n") is None


@pytest.mark.parametrize("log", sorted((DATA / "clean").glob("*.txt")), ids=lambda p: p.name)
def test_clean_logs_do_not_plainly_fail(log):
    assert first_failure(log.read_text(encoding="utf-8")) is None


@pytest.mark.parametrize("example, stage", [
    ("cudart-link-failed/conda-compiler-compat-ld.txt", "link"),
    ("hip-compiler-broken/hipcc-simple-test-program.txt", "configure"),
    ("simd-target-mismatch/ollama-fmadd.txt", "compile"),
    ("spirv-headers-missing/docker-gcc.txt", "compile"),
    ("hip-invalid-device-function/gfx1103-igpu.txt", "run"),
    ("shared-library-not-found/linux-libcudart12.txt", "import"),
])
def test_stage_of_the_first_failure_in_real_logs(example, stage):
    text = (FAILURES / example).read_text(encoding="utf-8")
    line_number, _ = first_failure(text)
    assert failed_stage(text, line_number) == stage


def test_a_failed_build_is_narrowed_to_its_stage():
    text = (FAILURES / "build-tree-vanished" / "pyllamacpp-wsl-moved.txt").read_text(encoding="utf-8")
    finding = unrecognised(text, "build")
    assert finding.stage == "configure"
    assert finding.evidence.startswith("CMake Error: The current CMakeCache.txt directory")
    assert unrecognised("ImportError: libfoo.so.3: cannot open shared object file\n", "import").stage == "import"
