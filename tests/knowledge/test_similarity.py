"""The second stage of diagnosis (playbook/knowledge/similarity.py): the nearest known failure by the
resemblance of error lines, named only above the threshold measured on the train examples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from playbook.interfaces.cli import finding_lines
from playbook.knowledge.corpus import project_key, thread_key
from playbook.knowledge.evaluation import parse_corpus_log
from playbook.knowledge.failures import (
    UNRECOGNISED,
    diagnose_log,
    first_failure,
    load_knowledge_base,
    nearest_failure,
    seems_failed,
    unrecognised,
)
from playbook.knowledge.index_writer import index_document
from playbook.knowledge.logtext import LogText
from playbook.knowledge.similarity import (
    INDEX_FILE,
    MIN_SIMILARITY,
    TARGET_PRECISION,
    Example,
    Index,
    Threshold,
    held_out_outcomes,
    measure_threshold,
    shipped_index,
    threshold_of,
)
from playbook.steps.repair import apply_remedies

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "playbook" / "knowledge" / INDEX_FILE

# A failure no pattern names, in words close to cuda-arch-unsupported's examples.
ARCH_LOG = ("[3/90] Building CUDA object ggml/src/ggml-cuda/CMakeFiles/ggml-cuda.dir/acc.cu.o\n"
            "nvcc error   : 'compute_30' is not a supported gpu architecture for this nvcc release\n"
            "ninja: build stopped: subcommand failed.\n")


def _examples() -> list[Example]:
    return [
        Example("cuda-arch-unsupported", "https://github.com/a/one/issues/1", "a/one#1",
                ("nvcc fatal : unsupported gpu architecture compute_<n>",), ("cuda-arch-unsupported",)),
        Example("cuda-arch-unsupported", "https://github.com/a/two/issues/2", "a/two#2",
                ("nvcc fatal : unsupported gpu architecture sm_<n>",), ("cuda-arch-unsupported",)),
        Example("openmp-conflict", "https://github.com/b/three/issues/3", "b/three#3",
                ("undefined reference to omp_get_thread_num",), ("openmp-conflict",)),
    ]


@pytest.mark.long
def test_shipped_index_is_what_the_script_writes():
    """Run `python scripts/write-similarity-index.py` after changing examples, the corpus's train part or
    the error-line rules."""
    assert json.loads(SHIPPED.read_text(encoding="utf-8")) == index_document(REPO)


def test_shipped_index_holds_no_test_log_and_every_id_is_known():
    document = json.loads(SHIPPED.read_text(encoding="utf-8"))
    test_part = REPO / "tests" / "data" / "corpus" / "test"
    test_sources = {line[len("# source:"):].strip() for path in test_part.glob("*/*.txt")
                    for line in path.read_text(encoding="utf-8").split("\n")[:2] if line.startswith("# source:")}
    assert not test_sources & {row["source"] for row in document["examples"]}
    assert {row["id"] for row in document["examples"]} <= set(load_knowledge_base().ids)


def test_shipped_threshold_keeps_its_precision():
    _, threshold = shipped_index()
    assert TARGET_PRECISION >= 0.97  # issue 33: a wrong name applies a wrong remedy
    assert threshold.value > 1 or threshold.precision >= TARGET_PRECISION


def test_the_threshold_is_set_for_the_target_precision():
    outcomes = [(0.9, True)] * 19 + [(0.5, False)]  # all 20 named: 95% right; the 19 above 0.5: all right
    assert threshold_of(outcomes, 20, target=0.9).value == 0.5
    assert threshold_of(outcomes, 20).value == 0.9 and threshold_of(outcomes, 20).precision == 1.0


@pytest.mark.parametrize("source, project", [
    ("https://github.com/ggml-org/llama.cpp/issues/12", "ggml-org/llama.cpp"),
    ("https://github.com/Ollama/Ollama/pull/5712#issuecomment-1", "ollama/ollama"),  # GitHub's names ignore case
    ("https://github.com/abetlen/llama-cpp-python/discussions/3", "abetlen/llama-cpp-python"),
    ("https://github.com/a/b/blob/main/build.log", "a/b"),
    ("https://www.stackoverflow.com/questions/1/why", "stackoverflow.com"),
    ("produced on this machine with nvcc -arch=native", "local"),
])
def test_a_project_is_a_repository(source, project):
    assert project_key(source) == project


def test_the_threshold_leaves_a_whole_project_out():
    """Two threads of one project vouch for each other (its paths, versions, wording): measured leaving one
    thread out they name each other; leaving the project out, nothing of that project is left to name them."""
    one_project = [Example(e.id, e.source.replace("/a/two/issues/2", "/a/one/issues/2"),
                           e.thread.replace("a/two", "a/one"), e.lines, e.expected) for e in _examples()]
    index = Index(one_project)
    assert index.projects == ["a/one", "a/one", "b/three"]
    by_thread = dict(enumerate(held_out_outcomes(index, leave_out="thread")))
    assert [right for _, right in by_thread.values()][:2] == [True, True]
    by_project = held_out_outcomes(index)
    assert all(not right for _, right in by_project)  # the nearest example of another project is another id
    assert measure_threshold(index).value > 1  # so nothing would be named
    assert measure_threshold(Index(_examples())).named == 2  # two projects: each names the other's thread
    with pytest.raises(ValueError):
        held_out_outcomes(index, leave_out="log")


def test_threshold_is_the_lowest_score_that_keeps_the_precision():
    index = Index(_examples())
    threshold = measure_threshold(index, target=0.9)
    assert threshold.examples == 3
    assert 0 < threshold.value <= 1 and threshold.precision >= 0.9 and threshold.named == 2
    # a line that shares only a word or two with the cuda-arch examples: too weak to name, no confidence
    weak = index.nearest_id(["cmake error: could not find nvcc"])
    assert weak.id == "cuda-arch-unsupported" and 0 < weak.score < MIN_SIMILARITY and weak.confidence == 0


def test_confidence_is_the_lead_over_the_next_id():
    examples = _examples() + [Example("openmp-conflict", "https://github.com/b/four/issues/4", "b/four#4",
                                      ("nvcc fatal : unsupported gpu architecture sm_<n> omp",), ("openmp-conflict",))]
    query = ["nvcc fatal : unsupported gpu architecture compute_<n>"]
    match = Index(examples).nearest_id(query, exclude_thread="a/one#1")
    scores = Index(examples).scores(["nvcc fatal : unsupported gpu architecture compute_<n>"])
    runner_up = max(score for number, score in scores.items() if examples[number].id == "openmp-conflict")
    assert match.id == "cuda-arch-unsupported" and match.score >= MIN_SIMILARITY
    assert abs(match.confidence - (match.score - runner_up)) < 1e-3 and match.confidence < match.score
    assert measure_threshold(Index(_examples()[2:]), target=0.9).value > 1  # nothing to measure against


def test_below_the_threshold_the_nearest_id_is_only_a_hint():
    log = LogText.from_text(ARCH_LOG)
    fallback = unrecognised(log)
    finding = nearest_failure(log, fallback, index=(Index(_examples()), Threshold(0.99, 1.0, 1, 3)))
    assert finding.id == UNRECOGNISED and finding.automatic is False
    assert finding.likely == "cuda-arch-unsupported" and 0 < finding.similarity < 0.99
    assert finding.like.startswith("https://github.com/a/")
    assert finding.evidence == fallback.evidence
    shown = finding_lines(finding)
    assert shown[0].startswith(f"[{UNRECOGNISED}]") and "fix (automatic" not in "\n".join(shown)
    assert any(line.strip().startswith("hint, not a diagnosis: the nearest known failure is cuda-arch-unsupported")
               for line in shown)


def test_above_the_threshold_the_failure_is_named_with_its_example(this_machine):
    log = LogText.from_text(ARCH_LOG)
    finding = nearest_failure(log, unrecognised(log), index=(Index(_examples()), Threshold(0.05, 1.0, 1, 3)))
    entry = load_knowledge_base().get("cuda-arch-unsupported")
    assert (finding.id, finding.title, finding.automatic) == (entry.id, entry.title, entry.remedy is not None)
    assert finding.similarity >= 0.05 and finding.like.startswith("https://github.com/a/")
    assert finding.line_number == 2
    shown = "\n".join(finding_lines(finding))
    assert f"likely cuda-arch-unsupported ({finding.similarity:.2f}, like {finding.like})" in shown


def test_a_hint_never_changes_the_plan(tmp_path, this_machine):
    from dataclasses import replace

    from playbook.params import Params
    from playbook.steps.configure import configure

    plan = configure(this_machine, Params())
    named = replace(unrecognised(LogText.from_text(ARCH_LOG)), id="deprecated-cuda-flag")
    assert apply_remedies(plan, [named], this_machine, cache_dir=tmp_path) is None  # not automatic: no change


def test_diagnose_log_uses_the_second_stage_only_for_a_failed_text():
    assert diagnose_log(LogText.from_text("all good\n"), detect_failure=True) == []
    (finding,) = diagnose_log(LogText.from_text(ARCH_LOG), detect_failure=True)
    assert finding.line_number == 2 and (finding.id == UNRECOGNISED or finding.similarity > 0)


def test_shipped_index_names_no_folder_of_the_machine_it_was_written_on():
    import re

    document = json.loads(SHIPPED.read_text(encoding="utf-8"))
    local = [row["source"] for row in document["examples"] if not row["source"].startswith("https://")]
    assert all(not re.search(r"(?<![\w.:/-])/[^\s/]+/", source) for source in local), local


@pytest.mark.parametrize("name, expected", [
    ("cpu/gpt4all-osx-intel-mac-pro-illegal.txt", "illegal-instruction"),
    ("cublas-cccl/faster-whisper-cublaslt64-12-dll-not-located.txt", "shared-library-not-found"),
])
def test_a_log_that_only_seems_to_fail_is_named_by_resemblance(name, expected):
    """Train logs that never say "error:" (a bare `Illegal instruction`, a DLL that cannot be located): with
    every pattern set aside and their own thread left out, the second stage names them from other threads'."""
    log = parse_corpus_log(REPO / "tests" / "data" / "corpus" / "train" / name, "train", name.split("/")[0])
    text = LogText.from_text(log.text)
    assert first_failure(text) is None and seems_failed(text)
    (finding,) = diagnose_log(text, detect_failure=True, knowledge=load_knowledge_base().without_patterns(),
                              exclude_thread=thread_key(log.source))
    assert finding.id == expected and finding.similarity > 0 and thread_key(finding.like) != thread_key(log.source)
    assert finding.evidence and finding.line_number > 0
    no_patterns = load_knowledge_base().without_patterns()
    assert diagnose_log(text, detect_failure=False, knowledge=no_patterns) == []  # only when asked to detect


def test_a_log_that_only_seems_to_fail_and_resembles_nothing_gets_no_finding():
    text = LogText.from_text("loading the quux plugin\nthe frobnicator could not reticulate the splines\n")
    assert seems_failed(text) and first_failure(text) is None
    assert diagnose_log(text, detect_failure=True, knowledge=load_knowledge_base().without_patterns()) == []
    (plain,) = diagnose_log(LogText.from_text("error: the frobnicator could not reticulate the splines\n"),
                            detect_failure=True, knowledge=load_knowledge_base().without_patterns())
    assert plain.id == UNRECOGNISED  # a plain failure still says so


@pytest.mark.parametrize("line", [
    "-- Performing Test CMAKE_HAVE_LIBC_PTHREAD - Failed",
    "-- Could NOT find NCCL (missing: NCCL_LIBRARY NCCL_INCLUDE_DIR)",
    "  --   Package 'openblas64', required by 'virtual:world', not found",
    "fatal: not a git repository (or any of the parent directories): .git",
    "Git repository not found; to enable automatic generation of build info, make sure Git is installed",
    "-- GL_KHR_cooperative_matrix not supported by glslc",
    "-- Using CMAKE_CUDA_ARCHITECTURES=86;120a CMAKE_CUDA_ARCHITECTURES_NATIVE=No CUDA devices found",
    ("done_getting_tensors: tensor 'token_embd.weight' (q8_0) (and 0 others) cannot be used with preferred buffer "
     "type CPU_REPACK, using CPU instead"),
    # train clean logs (mtmd on an M3 Pro, LM Studio): bf16 kernels skipped on a Mac without bfloat
    "ggml_metal_init: skipping kernel_mul_mm_bf16_f32                   (not supported)",
    # the Makefile's note (train w64devkit log), printed by builds that succeed too
    "I ccache not found. Consider installing it for faster compilation.",
])
def test_lines_successful_builds_print_never_make_a_log_seem_failed(line):
    """Lines of the archived successful runs (outputs/reference) that hold a word of trouble."""
    text = LogText.from_text(f"-- The C compiler identification is GNU 13.3.0\n{line}\n-- Build files have been written\n")
    assert not seems_failed(text)
    assert diagnose_log(text, detect_failure=True) == []


@pytest.mark.parametrize("line", [
    "Illegal instruction",
    "ggml_vulkan: No devices found.",
    "Could not find module 'llama.dll' (or one of its dependencies). Try using the full path with constructor syntax.",
    "ggml_new_object: not enough space in the context's memory pool (needed 10882896, available 10650320)",
    "dlerr: /usr/lib64/libcuda.so.418.74: undefined symbol: cuCtxCreate_v3",
    "vk::Device::getFenceStatus: ErrorDeviceLost",
    "ggml_metal_init: skipping kernel_soft_max                  (not supported)",  # a Common3 device: not routine
])
def test_a_line_of_trouble_makes_a_log_seem_failed(line):
    text = LogText.from_text(f"main: seed = 1680517006\n{line}\n")
    assert seems_failed(text) and first_failure(text) is None
