"""Windows DLL search folders for the child scripts, added before ``llama_cpp`` is imported.

Python 3.8+ on Windows ignores PATH when it looks for a DLL's dependencies, so llama.dll finds
cudart and cuBLAS only in folders given to ``os.add_dll_directory``. The plan's ``dll_directories``
reach a child as ``PLAYBOOK_DLL_DIRECTORIES`` (os.pathsep-separated). The child scripts import this
module as a sibling (``from dll_directories import ...``), so it imports nothing of the playbook.
"""

import os

DLL_DIRECTORIES_VARIABLE = "PLAYBOOK_DLL_DIRECTORIES"


def add_dll_directories(value, add):
    """Call ``add`` (``os.add_dll_directory``; None where the platform has none) for each existing
    folder in ``value``. Returns ``(added, missing, handles)``; the handles stay referenced for the
    child's lifetime, since closing one removes its folder from the search path."""
    added, missing, handles = [], [], []
    if add is None:
        return added, missing, handles
    for folder in filter(None, (value or "").split(os.pathsep)):
        if not os.path.isdir(folder):
            missing.append(folder)
            continue
        handles.append(add(folder))
        added.append(folder)
    return added, missing, handles
