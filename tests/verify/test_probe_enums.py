"""The probe child sets llama.cpp's enum parameters (load mode, flash attention, KV cache types) by name. The
upstream binding has them as module constants; JamePeng's fork (guide 002) only as members of enum classes,
GGML's types in a private module (llama_cpp._ggml). Both layouts, as stand-in packages, in a real child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from playbook.verify.launcher import CHILD_SCRIPT

UPSTREAM = {
    "__init__.py": "from .llama_cpp import *\n__version__ = '0.3.36'\n",
    "llama_cpp.py": """
        LLAMA_LOAD_MODE_AUTO = -1
        LLAMA_FLASH_ATTN_TYPE_AUTO = -1
        GGML_TYPE_F16 = 1
        GGML_TYPE_Q8_0 = 8
    """,
}
FORK = {
    "__init__.py": "from .llama_cpp import *\n__version__ = '0.3.48'\n",
    "_ggml.py": """
        import enum
        class GGMLType(enum.IntEnum):
            GGML_TYPE_F32 = 0
            GGML_TYPE_F16 = 1
            GGML_TYPE_Q8_0 = 8
        ggml_log_callback = object()
    """,
    "llama_cpp.py": """
        import enum
        from ._ggml import ggml_log_callback
        class llama_flash_attn_type(enum.IntEnum):
            LLAMA_FLASH_ATTN_TYPE_AUTO = -1
            LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
        class llama_load_mode(enum.IntEnum):
            LLAMA_LOAD_MODE_AUTO = -1
            LLAMA_LOAD_MODE_MMAP = 1
    """,
}
ASKED = [("LLAMA_LOAD_MODE_", "auto"), ("LLAMA_FLASH_ATTN_TYPE_", "auto"), ("GGML_TYPE_", "f16"), ("GGML_TYPE_", "q8_0")]


def enum_values(tmp_path: Path, package: dict[str, str], asked: list[tuple[str, str]]) -> list:
    site = tmp_path / "site"
    (site / "llama_cpp").mkdir(parents=True)
    for name, text in package.items():
        (site / "llama_cpp" / name).write_text(textwrap.dedent(text))
    code = ("import json, sys; sys.argv = ['probe.py']; import probe\n"
            "out = []\n"
            f"for prefix, name in {asked!r}:\n"
            "    try:\n        out.append(int(probe._enum(prefix, name)))\n"
            "    except ValueError as error:\n        out.append(str(error))\n"
            "print(json.dumps(out))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(CHILD_SCRIPT.parent)])}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("package", [UPSTREAM, FORK], ids=["module-constants", "enum-classes"])
def test_the_probe_finds_enum_values_in_either_layout(tmp_path, package):
    assert enum_values(tmp_path, package, ASKED) == [-1, -1, 1, 8]


def test_a_value_neither_layout_has_is_named(tmp_path):
    assert enum_values(tmp_path, FORK, [("LLAMA_LOAD_MODE_", "direct_io")]) == [
        "this llama_cpp has no LLAMA_LOAD_MODE_DIRECT_IO"]
