"""Runs in a child process with the built wheel on its path: which dotted names are missing.

Usage: python symbols_child.py NAME [NAME ...]   e.g. llama_cpp.llama_chat_format.Qwen3VLChatHandler
Prints one line ``PLAYBOOK_RESULT {"missing": {name: reason}}``. Like child.py, it adds the
plan's DLL folders (``PLAYBOOK_DLL_DIRECTORIES``) before anything imports ``llama_cpp``.
"""

import importlib
import json
import os
import sys

from dll_directories import DLL_DIRECTORIES_VARIABLE, add_dll_directories  # a sibling: this runs as a script

_DLL_HANDLES = add_dll_directories(os.environ.get(DLL_DIRECTORIES_VARIABLE), getattr(os, "add_dll_directory", None))

RESULT_PREFIX = "PLAYBOOK_RESULT "


def find(name):
    """Import the longest module prefix of ``name``, then look the rest up as attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as err:
            if cut == 1:
                return f"{type(err).__name__}: {err}"
            continue
        except Exception as err:  # noqa: BLE001 the module exists but fails to import, e.g. its shared library is missing
            return f"{'.'.join(parts[:cut])} does not import: {type(err).__name__}: {err}"
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return f"{'.'.join(parts[:cut])} has no attribute {attribute!r}"
            value = getattr(value, attribute)
        return ""
    return "empty name"


missing = {name: reason for name in sys.argv[1:] if (reason := find(name))}
sys.stdout.write(RESULT_PREFIX + json.dumps({"missing": missing}) + "\n")
