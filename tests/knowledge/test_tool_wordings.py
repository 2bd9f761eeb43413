"""How other tools word "no compiler" and "no ninja" (issue 33): Rust's cc crate, node-gyp's search for Visual
Studio, Python's distutils on Windows and scikit-build-core each say it in words of their own. Each wording names
the entry the CMake wording names; a neighbouring cause in the same tool's words (a missing nvcc or archiver, a
Visual Studio that is there but not the release asked for, a search that went on to find one) does not. The
lines are shaped as the corpus's train logs show them (the file each comes from is named beside it)."""

from __future__ import annotations

import pytest

from playbook.knowledge.failures import diagnose_text

NAMED = {
    # train/host-compiler/cargo-c-cc-rs-failed-to-find-gcc.txt
    "cc-rs, BuildKit around it": "#0 17.01   --- stderr\n#0 17.01   error occurred in cc-rs: Failed to find tool. "
                                 "Is `gcc` installed?\n#0 20.71 error: failed to compile `cargo-c v0.10.9`",
    # train/host-compiler/cc-rs-failed-to-find-gcc-exe.txt
    "cc-rs, older wording": "error occurred: Failed to find tool. Is `gcc.exe` installed? (see\n"
                            "https://github.com/alexcrichton/cc-rs#compile-time-requirements for help)",
    "cc-rs, cross compiler": "error occurred: Failed to find tool. Is `aarch64-linux-gnu-gcc` installed?",
    # train/windows-env/gemini-cli-ui-node-gyp-missing-vc-toolset.txt
    "node-gyp 11 under npm 10": "npm error gyp ERR! find VS - missing any VC++ toolset\n"
                                "npm error gyp ERR! find VS could not find a version of Visual Studio 2017 or newer "
                                "to use\nnpm error gyp ERR! find VS not looking for VS2017 as it is only supported "
                                "up to Node.js 21",
    # train/windows-env/mslearn-staticwebapp-node-gyp-find-vs.txt
    "node-gyp, VS2015 not found either": "npm ERR! gyp ERR! find VS looking for Visual Studio 2015\n"
                                         "npm ERR! gyp ERR! find VS - not found\n"
                                         "npm ERR! gyp ERR! find VS not looking for VS2013 as it is only "
                                         "supported up to Node.js 8",
    "node-gyp's final error": "gyp ERR! stack Error: Could not find any Visual Studio installation to use",
    # train/windows-env/pyctp-unable-to-find-vcvarsall.txt
    "distutils": "running build_ext\nbuilding 'ctp._MdApi' extension\nerror: Unable to find vcvarsall.bat",
}


@pytest.mark.parametrize("case", NAMED)
def test_another_tools_words_for_no_compiler_name_cxx_compiler_missing(case):
    assert [f.id for f in diagnose_text(NAMED[case])][:1] == ["cxx-compiler-missing"]


def test_scikit_build_core_without_ninja_is_ninja_not_found():
    # train/build-tooling/cmake-pypi-rpi3-32bit-ninja-not-found-error.txt
    text = "scikit_build_core.errors.NinjaNotFoundError: Ninja is required to build"
    assert [f.id for f in diagnose_text(text)] == ["ninja-not-found"]


NOT_A_MISSING_COMPILER = {
    # the cc crate's own words for a missing tool that is not the C compiler
    "cc-rs, no nvcc": "error occurred: Failed to find tool. Is `nvcc` installed?",
    "cc-rs, no archiver": "error occurred in cc-rs: Failed to find tool. Is `ar` installed?",
    # a CC of two words is a wrong setting the cc crate could not split, not a compiler that is not installed
    "cc-rs, CC with a launcher": "Internal error occurred: Failed to find tool. Is `ccache clang` installed?",
    # Visual Studio is there; npm config's msvs_version asks for another release
    "node-gyp, msvs_version mismatch": "gyp ERR! find VS msvs_version was set from command line or npm config\n"
                                       "gyp ERR! find VS - found VC++ toolset: v142\n"
                                       "gyp ERR! find VS - msvs_version does not match this version\n"
                                       "gyp ERR! find VS could not find a version of Visual Studio 2017 or newer "
                                       "to use\ngyp ERR! find VS looking for Visual Studio 2015\n"
                                       "gyp ERR! find VS - not found",
    # an old node-gyp that found no VS2017+ and went on to find VS2015: a verbose log of a build that went on
    "node-gyp, VS2015 found": "gyp verb find VS could not find a version of Visual Studio 2017 or newer to use\n"
                              "gyp verb find VS looking for Visual Studio 2015\n"
                              "gyp verb find VS - found in \"C:\\Program Files (x86)\\Microsoft Visual Studio 14.0\"",
}


@pytest.mark.parametrize("case", NOT_A_MISSING_COMPILER)
def test_a_neighbouring_cause_in_the_same_tools_words_is_not_cxx_compiler_missing(case):
    assert "cxx-compiler-missing" not in [f.id for f in diagnose_text(NOT_A_MISSING_COMPILER[case])]
