"""Runs in a child process with the built wheel on its path: which dotted names are missing.

Usage: python symbols_child.py NAME [NAME ...]   e.g. llama_cpp.llama_chat_format.Qwen3VLChatHandler
Prints one line ``PLAYBOOK_RESULT {"missing": {name: reason}}``.
"""

import importlib
import json
import sys

RESULT_PREFIX = "PLAYBOOK_RESULT "


def find(name):
    """Import the longest module prefix of ``name``, then look the rest up as attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError as err:
            if cut == 1:
                return f"{type(err).__name__}: {err}"
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return f"{'.'.join(parts[:cut])} has no attribute {attribute!r}"
            value = getattr(value, attribute)
        return ""
    return "empty name"


missing = {name: reason for name in sys.argv[1:] if (reason := find(name))}
sys.stdout.write(RESULT_PREFIX + json.dumps({"missing": missing}) + "\n")
