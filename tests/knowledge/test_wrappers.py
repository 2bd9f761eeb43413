"""Failure lines inside another tool's output (issue 33): npm, node, docker build (BuildKit), cargo, PowerShell,
GitHub Actions and Python's logging relay a build's lines under prefixes of their own. A wrapped failure line
is named as the bare line is, a plainly failed wrapped log is never "no failure found", and a wrapped clean line
gives no finding. The prefixes are taken off in one place, ``normalise.unwrap``; the lines are shaped as the
corpus's train logs show them (the file each comes from is named beside it)."""

from __future__ import annotations

import pytest

from playbook.knowledge.failures import UNRECOGNISED, diagnose_log, diagnose_text, first_failure
from playbook.knowledge.logtext import LogText
from playbook.knowledge.normalise import failure_record, match_line, unwrap

# Each prefix as its tool writes it before a line it relays.
WRAPPERS = {
    "npm 10": "npm error ",
    "npm 6-9": "npm ERR! ",
    "BuildKit step": "#12 30.76 ",  # train/build-tooling/linuxdeploy-docker-cmake-400.txt: "#17 1.139 CMake Error ..."
    "BuildKit summary": "0.784 ",  # train/build-tooling/llamacpp-glue-docker-ubuntu2404-pip-requirements.txt
    "cargo build script": "warning: llama-cpp-sys-2@0.1.45: ",
    "GitHub Actions": "2024-05-01T12:00:00.1234567Z ",
    "GitHub Actions, BuildKit under it": "2024-05-01T12:00:00.1234567Z #12 30.76 ",
    "Python logging": "ERROR:root:",  # train/rocm-hip/therock-ci-azure-gfx110x-no-dev-kfd-amdgpu-not-in-modules.txt
}

# Lines of failures.yaml entries whose pattern is anchored at the line's start: a prefix hides them from it.
FAILURE_LINES = {
    "gcc: No such file or directory": "cxx-compiler-missing",
    "ERROR: Could not install packages due to an OSError: [Errno 13] Permission denied": "install-failed",
    "ERROR: No matching distribution found for llama-cpp-pythn": "install-failed",
    "FAILED: vendor/llama.cpp/ggml/src/ggml-vulkan/xielu.comp.cpp": "vulkan-shaders-gen-failed",
    "cannot compile matmul_f32 (exit code 1)": "vulkan-shaders-gen-failed",
    "RuntimeError: Unable to retrieve list of all GPU devices": "vulkan-driver-incompatible",
    "File size limit exceeded": "disk-full",
}


@pytest.mark.parametrize("line, failure_id", FAILURE_LINES.items())
def test_the_bare_lines_name_their_entry(line, failure_id):
    assert [f.id for f in diagnose_text(line)] == [failure_id]


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("line, failure_id", FAILURE_LINES.items())
def test_a_wrapped_failure_line_names_the_entry_the_bare_line_names(wrapper, line, failure_id):
    assert match_line(WRAPPERS[wrapper] + line) == match_line(line)
    assert [f.id for f in diagnose_text(WRAPPERS[wrapper] + line)] == [failure_id]


# What each tool prints around a build that went well: no finding, wrapped or not.
CLEAN_LINES = {
    "npm": "npm notice New minor version of npm available! 10.2.4 -> 10.8.1\nnpm warn deprecated glob@7.2.3: "
           "Glob versions prior to v9 are no longer supported",
    "node": "    at Module._compile (node:internal/modules/cjs/loader:1105:14)\n"
            "    at node:internal/main/run_main_module:22:47",
    # train/cuda-toolkit/dgx-spark-container-libcuda-rpath.txt
    "BuildKit": "#14 92.07 [ 62%] Building CXX object common/CMakeFiles/common.dir/peg-parser.cpp.o\n"
                "#14 92.38 [ 62%] Linking CXX executable ../../bin/llama-simple\n#14 DONE 95.1s",
    "cargo": "warning: llama-cpp-sys-2@0.1.45: ggml/src/ggml.c:10:5: warning: unused variable 'x' [-Wunused-variable]",
    "GitHub Actions": "2024-05-01T12:00:00.1234567Z ##[group]Run cmake --build build -j 4\n"
                      "2024-05-01T12:00:00.1234567Z -- The CUDA compiler identification is NVIDIA 12.4.131\n"
                      "2024-05-01T12:00:09.0000000Z [100%] Built target llama",
    "Python logging": "INFO:root:Loading model from /models/x.gguf\nWARNING:llama_cpp:n_ctx 8192 > n_ctx_train 4096",
}


@pytest.mark.parametrize("tool", CLEAN_LINES)
def test_a_wrapped_clean_line_gives_no_finding(tool):
    log = LogText.from_text(CLEAN_LINES[tool])
    assert first_failure(log) is None
    assert diagnose_log(log, detect_failure=True) == []


# Logs that plainly failed, in words only the relaying tool uses: never "no failure found", and the first
# failure line is the relaying tool's report.
RELAYED_ONLY = {
    "npm": ("npm error code 1\nnpm error path /app/node_modules/node-llama-cpp\nnpm error command failed", 1),
    "BuildKit": (('#12 30.70 make: Entering directory "/src"\n'
                 '#12 ERROR: process "/bin/sh -c make" did not complete successfully: exit code: 2'), 2),
    # train/build-tooling/llamacpp-glue-docker-ubuntu2404-pip-requirements.txt, BuildKit's terminal view
    "BuildKit terminal": ((" => CACHED [runtime 8/9] RUN apt-get install -y python3 python3-pip   0.0s\n"
                          " => ERROR [runtime 9/9] RUN ./frobnicate.sh                            0.9s"), 2),
    # train/windows-env/llamafile-server-exe-defender-virus-powershell.txt, another message
    "PowerShell": (("Program 'x.exe' failed to run: The frobnicator refusedAt line:1 char:1\n+ .\\x.exe\n+ ~~~~~~~.\n"
                   "    + CategoryInfo          : ResourceUnavailable: (:) [], ApplicationFailedException\n"
                   "    + FullyQualifiedErrorId : NativeCommandFailed"), 4),
    "GitHub Actions": (("2024-05-01T12:00:00.1234567Z ./frobnicate.sh\n"
                       "2024-05-01T12:00:00.2234567Z ##[error]Process completed with exit code 1."), 2),
    "Python logging": ("INFO:root:starting\nERROR:root:Driver not initialized (frobnicator not in modules)", 2),
}


@pytest.mark.parametrize("tool", RELAYED_ONLY)
def test_a_log_that_only_the_relaying_tool_calls_failed_is_never_no_failure(tool):
    text, line_number = RELAYED_ONLY[tool]
    log = LogText.from_text(text)
    assert first_failure(log) == (line_number, log.evidence(line_number))
    findings = diagnose_log(log, detect_failure=True)
    assert findings and findings[0].line_number == line_number


def test_the_relaying_tools_own_error_reports_are_told_from_its_other_lines():
    failed = ["npm error code 1", "npm ERR! errno 1", "#12 ERROR: process \"/bin/sh -c make\" did not complete",
              "ERROR: failed to solve: process \"/bin/sh -c make\" did not complete successfully: exit code: 2",
              "    + FullyQualifiedErrorId : NativeCommandFailed", "ERROR:root:Driver not initialized",
              "2024-05-01T12:00:00.1234567Z ##[error]Process completed with exit code 1.", "> npm error code 1"]
    fine = ["npm warn deprecated glob@7.2.3", "#12 30.76 [ 62%] Building CXX object x.o", "INFO:root:starting",
            "warning: llama-cpp-sys-2@0.1.45: ggml.c:1:2: error: x", "2024-05-01T12:00:00.1234567Z ok"]
    assert [line for line in failed if not failure_record(line)] == []
    assert [line for line in fine if failure_record(line)] == []


def test_a_tools_own_failure_is_found_before_the_line_that_relays_it():
    # cargo: the build script's stderr (train/vulkan/rust-build-script-glslangvalidator-not-in-path.txt's shape)
    cargo = ("error: failed to run custom build command for `llama-cpp-sys-2 v0.1.45`\n\nCaused by:\n"
             "  process didn't exit successfully: `/x/target/debug/build/llama-cpp-sys-2-f40b/build-script-build` "
             "(exit status: 101)\n  --- stderr\n  CMake Error at CMakeLists.txt:3 (cmake_minimum_required):\n"
             "    Compatibility with CMake < 3.5 has been removed from CMake.")
    assert first_failure(cargo)[0] == 6
    assert [f.id for f in diagnose_text(cargo)] == ["cmake-too-new"]
    # npm relays the compiler's error under its own prefix, after lines of its own
    npm = ("npm error code 1\nnpm error path /app/node_modules/node-llama-cpp\n"
           "npm error /app/ggml/src/ggml-cuda/common.cuh:5:10: fatal error: nv/target: No such file or directory")
    assert first_failure(npm)[0] == 3
    # cargo's "warning: <crate>@<version>: " before a C compiler's error: a failure, not a warning
    wrapped = "warning: llama-cpp-sys-2@0.1.45: ggml/src/ggml.c:12:5: error: 'x' undeclared"
    assert first_failure(wrapped) == (1, wrapped)


def test_node_errors_and_their_stack():
    # train/runtime/llama-node-docker-glibcxx-3-4-29-node-addon.txt, and node's error with its code
    glibcxx = ("Error: /usr/lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
               "/app/x.node)\n    at Object.Module._extensions..node (node:internal/modules/cjs/loader:1361:18)\n"
               "    at Module.load (node:internal/modules/cjs/loader:1133:32)")
    assert [f.id for f in diagnose_text(glibcxx)] == ["glibcxx-mismatch"]
    coded = ("Uncaught Error [ERR_FROBNICATOR]: the frobnicator refused\n"
             "    at Object.<anonymous> (/app/index.js:1:2)\n"
             "    at Module._compile (node:internal/modules/cjs/loader:1105:14)")
    assert first_failure(coded)[0] == 1
    assert diagnose_log(LogText.from_text(coded), detect_failure=True)[0].line_number == 1
    assert match_line("    at async Promise.all (index 0)") == "    at async Promise.all (index 0)"  # no frame: kept
    assert match_line("    at Module.load (node:internal/modules/cjs/loader:1133:32)") == ""


def test_powershell_position_and_echo_are_not_the_message():
    # train/windows-env/llamafile-server-exe-defender-virus-powershell.txt
    glued = "virus or potentially unwanted softwareAt line:1 char:1"
    assert match_line(glued) == "virus or potentially unwanted software"
    assert [match_line(line) for line in ("At line:1 char:1", "+ ~~~~~~~~~~~~~~~~~~~~~~~~~~")] == ["", ""]
    assert unwrap("    + CategoryInfo          : ObjectNotFound: (gcc:String) [], CommandNotFoundException") == (
        "ObjectNotFound: (gcc:String) [], CommandNotFoundException", True)


def test_prefixes_nest_and_a_line_of_only_digits_keeps_its_words():
    assert unwrap("2024-05-01T12:00:00.1234567Z #12 30.76 npm error > x@1.0 install") == ("x@1.0 install", True)
    gdb = "#0  0x00007ffff7a3c9fc in _mm256_fmadd_ps ("  # a debugger's frame, not BuildKit's step
    assert match_line(gdb) == "#0  0xADDR in _mm256_fmadd_ps ("
    assert unwrap("12 errors generated.") == ("12 errors generated.", False)
    assert UNRECOGNISED not in [f.id for f in diagnose_text("#12 30.76 gcc: No such file or directory")]


# More relaying tools (issue 33, second round): npm's debug log file, node-gyp, cmake-js, the JVM, uv's frames,
# the cmake crate's build script, and a line pasted as Markdown inline code. Each shape is a train log's
# (the file named beside it); the messages below are other ones, so the tests hold the unwrapping, not a rule.
RELAYED_FAILURES = {
    # train/build-tooling/ghostscript-js-npm-debug-log-cmake-js.txt
    "npm debug log": ("700 verbose Darwin 20.3.0\n704 error code 1\n706 error command failed", 2, "code 1"),
    # train/host-compiler/bcrypt-node-gyp-not-found-make.txt
    "node-gyp": (("gyp info spawn make\ngyp ERR! build error \ngyp ERR! stack Error: frobnicator refused\n"
                 "gyp ERR! stack     at F (/usr/lib/node_modules/npm/node_modules/which/which.js:63:19)"), 3,
                 "Error: frobnicator refused"),
    # train/build-tooling/stf-cmake-js-cmake-executable-not-found.txt
    "cmake-js": ("info TOOL Using Unix Makefiles generator.\nERR! OMG The frobnicator refused.", 2,
                 "The frobnicator refused."),
    # train/windows-env/java-llama-jllama-dll-cant-find-dependent-libraries.txt
    "JVM": ('Exception in thread "main" java.lang.UnsatisfiedLinkError: the frobnicator refused', 1,
            "java.lang.UnsatisfiedLinkError: the frobnicator refused"),
    # train/build-tooling/stratus-docker-cargo-is-cmake-not-installed.txt
    "cmake crate in BuildKit": (" 44.88   frobnicator refused\n 44.88   build script failed, must exit now", 2,
                                "  build script failed, must exit now"),
    # train/host-compiler/gptq-torch-gxx-newer-than-cuda-allows.txt
    "inline code": ("`RuntimeError: the frobnicator refused`", 1, "RuntimeError: the frobnicator refused"),
}


@pytest.mark.parametrize("tool", RELAYED_FAILURES)
def test_a_relayed_failure_is_found_and_read_without_the_relaying_prefix(tool):
    text, line_number, matched = RELAYED_FAILURES[tool]
    log = LogText.from_text(text)
    assert first_failure(log)[0] == line_number
    assert log.matched(line_number) == matched
    findings = diagnose_log(log, detect_failure=True)
    assert findings and findings[0].line_number == line_number


def test_the_new_prefixes_leave_compiler_counts_and_clean_lines_alone():
    assert unwrap("1 error generated.") == ("1 error generated.", False)
    assert unwrap("2 errors detected in the compilation of \"x.cu\".") == ("2 errors detected in the compilation of \"x.cu\".", False)
    assert unwrap("1 error detected in the compilation of \"x.cu\".")[1] is False
    for line in ("gyp info spawn make", "704 verbose node v16.5.0", "info TOOL Using Unix Makefiles generator.",
                 "`pip install llama-cpp-python`", "  `-> Call to `scikit_build_core.build.build_wheel` failed"):
        assert not failure_record(line), line
    assert diagnose_log(LogText.from_text("gyp info spawn make\n704 verbose node v16.5.0"), detect_failure=True) == []


def test_uv_frames_relay_and_the_tools_error_under_them_is_first():
    # train/host-compiler/db-gpt-uv-ascii-frames-nmake-missing.txt's frames, with another error under them
    uv = ("  x Failed to build `llama-cpp-python==0.3.7`\n  |-> The build backend returned an error\n"
          "  `-> Call to `scikit_build_core.build.build_wheel` failed (exit code: 1)\n\n      [stderr]\n"
          "      CMake Error at CMakeLists.txt:3 (project):\n        The frobnicator refused.")
    assert first_failure(uv)[0] == 6
    assert first_failure("  × Failed to build `llama-cpp-python==0.3.7`\n  ╰─▶ Call to `x` failed") == (
        1, "× Failed to build `llama-cpp-python==0.3.7`")
