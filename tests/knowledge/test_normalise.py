"""What the failure patterns read (playbook/knowledge/normalise.py): one user's log and another's, in another
shell, locale or terminal, read the same; the evidence stays the log's own words."""

from __future__ import annotations

import pytest

from playbook.knowledge.failures import diagnose_text
from playbook.knowledge.normalise import ANSI, fold_for_similarity, match_line, translations

CCCL = "ggml-cuda/common.cuh:5:10: fatal error: nv/target: No such file or directory"


@pytest.mark.parametrize("line, expected", [
    ("\x1b[1m\x1b[31merror: \x1b[0mfoo", "error: foo"),
    ("x.c:1: error: \u2018foo\u2019 undeclared", "x.c:1: error: 'foo' undeclared"),
    ("x.c:1: error: `foo' undeclared", "x.c:1: error: 'foo' undeclared"),
    ("\u201cfoo.h\u201d: No such file", '"foo.h": No such file'),
    ("> > CMake Error at CMakeLists.txt:1:\r", "CMake Error at CMakeLists.txt:1:"),
    ("```", ""),
    ("/home/alice/llama.cpp/ggml.c", "/home/<user>/llama.cpp/ggml.c"),
    ("C:\\Users\\John Doe\\AppData\\Local\\x.dll", "C:\\Users\\<user>\\AppData\\Local\\x.dll"),
    ("/Users/bob/src/a.m", "/Users/<user>/src/a.m"),
    ("segfault at 0x00007ffd1234abcd", "segfault at 0xADDR"),
    ("gcc 13.2.0, CUDA 12.4.131", "gcc 13.2.0, CUDA 12.4.131"),  # versions stay for the patterns
])
def test_match_line(line, expected):
    assert match_line(line) == expected


@pytest.mark.parametrize("local, english", [
    ("common.cuh:5:10: schwerwiegender Fehler: nv/target: Datei oder Verzeichnis nicht gefunden",
     "common.cuh:5:10: fatal error: nv/target: No such file or directory"),
    ("common.cuh:5:10: erreur fatale: nv/target : Aucun fichier ou dossier de ce type",
     "common.cuh:5:10: fatal error: nv/target: No such file or directory"),
    ("common.cuh:5:10: 致命错误：nv/target：没有那个文件或目录", "common.cuh:5:10: fatal error: nv/target: No such file or directory"),
    ("ggml.c:(.text+0x1a): undefinierter Verweis auf \u201eomp_get_thread_num\u201c",
     'ggml.c:(.text+0x1a): undefined reference to "omp_get_thread_num"'),
    ("ggml.c:(.text+0x1a)：对\u2018omp_get_thread_num\u2019未定义的引用",
     "ggml.c:(.text+0x1a): undefined reference to 'omp_get_thread_num'"),
    ("ggml.obj : error LNK2019: nicht aufgel\u00f6stes externes Symbol cublasCreate_v2",
     "ggml.obj : error LNK2019: unresolved external symbol cublasCreate_v2"),
])
def test_translated_messages_read_as_english(local, english):
    assert match_line(local) == english


def test_every_translation_names_its_source():
    assert all(row.source.startswith("https://") for row in translations())
    assert {row.language for row in translations()} == {"de", "fr", "zh"}


@pytest.mark.parametrize("line", [
    "ggml-cuda/common.cuh:5:10: fatal error: nv/target: No such file or directory",
    "ggml-cuda/common.cuh:5:10: schwerwiegender Fehler: nv/target: Datei oder Verzeichnis nicht gefunden",
    "ggml-cuda/common.cuh:5:10: erreur fatale : nv/target : Aucun fichier ou dossier de ce type",
    "ggml-cuda/common.cuh:5:10: 致命错误：nv/target：没有那个文件或目录",
    ("\x1b[01m\x1b[Kggml-cuda/common.cuh:5:10:\x1b[m\x1b[K \x1b[01;31m\x1b[Kfatal error: \x1b[m\x1b[Knv/target: No such "
    "file or directory"),
])
def test_one_failure_in_any_locale_or_colour_is_named_and_quoted_as_written(line):
    (finding,) = diagnose_text("[12/80] Building CUDA object ggml-cuda.cu.o\r\n" + line + "\r\ncompilation terminated.\r\n")
    assert finding.id == "cccl-headers-missing"
    assert finding.line_number == 2
    assert finding.evidence == ANSI.sub("", line).strip()  # the log's own words, less colour codes


@pytest.mark.parametrize("line", [
    "/tmp/cc1SXjxo.s:26007: Error: unsupported instruction `vpdpbusd'",
    "/tmp/cc1SXjxo.s:26007: 错误：unsupported instruction `vpdpbusd'",  # gas in Chinese: only 错误 is translated
])
def test_a_line_whose_only_translated_word_is_short_is_still_translated(line):
    """错误 ("error") is two characters, below a pattern literal's length, yet marks a translated line."""
    findings = diagnose_text("/tmp/cc1SXjxo.s: Assembler messages:\n" + line + "\n")
    assert [f.id for f in findings] == ["assembler-too-old"]


def test_folding_for_similarity_drops_what_differs_between_users():
    one = fold_for_similarity("/home/alice/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu(412): error: identifier "
                              "\"__hmax\" is undefined (CUDA 12.4.131)")
    other = fold_for_similarity("C:\\Users\\Bob\\AppData\\Local\\Temp\\pip-build\\vendor\\llama.cpp\\ggml\\src\\ggml-cuda"
                                "\\ggml-cuda.cu(98): error: identifier \u201c__hmax\u201d is undefined (CUDA 11.8.89)")
    assert one == other == "ggml-cuda.cu(<n>): error: identifier __hmax is undefined (cuda <v>)"


LOG = "[3/80] Building CUDA object ggml-cuda.cu.o\r\nggml-cuda/common.cuh:5:10: fatal error: nv/target: No such file or directory\r\n"


@pytest.mark.parametrize("encoded", [
    b"\xff\xfe" + LOG.encode("utf-16-le"),  # PowerShell 5's `>`
    LOG.encode("utf-16-le"),
    b"\xef\xbb\xbf" + LOG.encode("utf-8"),
    LOG.replace("fatal error", "schwerwiegender Fehler").replace("No such file or directory",
                                                                  "Datei oder Verzeichnis nicht gefunden").encode("cp1252"),
])
def test_logs_in_other_encodings_are_read(tmp_path, encoded):
    from playbook.knowledge.failures import diagnose_file

    path = tmp_path / "build.log"
    path.write_bytes(encoded)
    (finding,) = diagnose_file(path)
    assert (finding.id, finding.line_number) == ("cccl-headers-missing", 2)


def test_a_binary_file_is_no_log(tmp_path):
    from playbook.knowledge.failures import NotALogError, diagnose_file

    path = tmp_path / "libggml.so"
    path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(4096) + b"fatal error: nv/target: No such file or directory\n")
    with pytest.raises(NotALogError, match="is a binary file, not a log"):
        diagnose_file(path)
