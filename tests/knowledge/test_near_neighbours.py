"""Generic rows yield to more specific evidence in the same log (issue 33: wrong names from near neighbours).

A library that did not load, a crash, or CMake's "No CUDA toolset found" are symptoms with many causes. When
the log also shows the specific cause (a CPU without the AVX2 the build uses, an error inside CMake's CUDA
compiler-identification step), the generic row is not named (``unless`` in failures.yaml): the specific row
names the log, or it stays unrecognised with its first failure line. The logs are real train logs of the
corpus (each headed by its public source).
"""

from __future__ import annotations

from pathlib import Path

from playbook.knowledge.corpus import thread_key
from playbook.knowledge.evaluation import parse_corpus_log
from playbook.knowledge.failures import UNRECOGNISED, diagnose_log, diagnose_text, load_knowledge_base
from playbook.knowledge.logtext import LogText

TRAIN = Path(__file__).resolve().parents[1] / "data" / "corpus" / "train"


def body(relative: str) -> str:
    """A train log without its header lines."""
    text = (TRAIN / relative).read_text(encoding="utf-8")
    return "\n".join(line for line in text.splitlines() if not line.startswith("# "))


def first_id(text: str) -> str:
    findings = diagnose_text(text)
    return findings[0].id if findings else ""


def test_generic_rows_declare_what_they_yield_to():
    knowledge = load_knowledge_base()
    for generic in ("shared-library-not-found", "process-crash", "cuda-toolset-missing"):
        assert knowledge.get(generic).unless, generic


def test_a_dll_that_fails_to_initialize_on_a_cpu_without_avx2_is_that_cpu():
    # LM Studio with AVX2 switched off in the BIOS: "DLL initialization routine failed" and "CPU Incompatible"
    text = body("cpu/lmstudio-avx2-off-dll-init-routine-failed.txt")
    assert first_id(text) == "illegal-instruction"
    # the same failure without the CPU's report is a library that did not load, as before
    without_hint = "\n".join(line for line in text.splitlines() if "Incompatible" not in line)
    assert first_id(without_hint) == "shared-library-not-found"


def test_a_library_load_failure_beside_a_cpu_report_is_never_named_a_missing_library():
    # a wheel that needs AVX2/FMA: odysseus's own report of the CPU, with the Windows crash code
    text = body("cpu/odysseus-avx2-instruction-set-mismatch-0xc000001d.txt")
    ids = [f.id for f in diagnose_text(text)]
    assert ids[0] == "illegal-instruction"
    assert "shared-library-not-found" not in ids and "process-crash" not in ids


def test_a_crash_beside_a_cpu_report_is_not_a_reason_to_reinstall():
    crash = body("rocm-hip/rocm_sdk_builder-gfx906-tensile-symbol.txt").replace("Cannot find Symbol", "Cannot see")
    assert first_id(crash) == "process-crash"
    cpu_report = "AVX2 Instruction Set Mismatch: the precompiled llama-cpp-python wheel requires CPU features " \
                 "(AVX2/FMA) that your processor or virtual machine lacks."
    assert first_id(crash + "\n" + cpu_report) != "process-crash"


def test_a_missing_tensile_kernel_symbol_is_rocblas_without_this_gpu_not_a_crash():
    assert first_id(body("rocm-hip/rocm_sdk_builder-gfx906-tensile-symbol.txt")) == "rocblas-arch-unsupported"


def test_an_error_inside_the_cuda_compiler_id_step_is_not_a_missing_toolset():
    # a paste of two attempts: CMake's "No CUDA toolset found" (llama.cpp#9144), then the compiler-id step's
    # compile failing on CUDA's host_config.h (llama.cpp#8628)
    toolset = body("cuda-toolkit/vs2019-cmake319-no-cuda-toolset.txt")
    header_error = body("host-compiler/cuda122-msvc1440-compiler-id-unsupported.txt")
    assert first_id(toolset) == "cuda-toolset-missing"
    ids = [f.id for f in diagnose_text(toolset + "\n" + header_error)]
    assert ids[0] == "host-compiler-unsupported" and "cuda-toolset-missing" not in ids


def test_an_unknown_error_inside_the_compiler_id_step_stays_unrecognised():
    # the compiler-id step's own failure, its cause in words no row knows: no missing-toolset remedy
    toolset = body("cuda-toolkit/vs2019-cmake319-no-cuda-toolset.txt")
    header_error = body("host-compiler/cuda122-msvc1440-compiler-id-unsupported.txt")
    unknown = "\n".join(line for line in header_error.splitlines()
                        if "allow-unsupported-compiler" not in line and "unsupported host compiler" not in line)
    findings = diagnose_log(LogText.from_text(toolset + "\n" + unknown), "configure", detect_failure=True)
    assert all(f.id != "cuda-toolset-missing" for f in findings)


def test_the_corpus_examples_of_this_issue_are_named_rightly():
    for relative in ("cpu/lmstudio-avx2-off-dll-init-routine-failed.txt",
                     "cpu/odysseus-avx2-instruction-set-mismatch-0xc000001d.txt",
                     "rocm-hip/rocm_sdk_builder-gfx906-tensile-symbol.txt"):
        example = parse_corpus_log(TRAIN / relative, "train", relative.split("/")[0])
        findings = diagnose_log(LogText.from_text(example.text), detect_failure=True,
                                exclude_thread=thread_key(example.source))
        assert findings and findings[0].id in example.expected, relative
        assert findings[0].id != UNRECOGNISED
