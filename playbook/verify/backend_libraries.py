"""A wheel's ggml backend libraries (ggml-blas, ggml-rpc): where they are in the installed wheel, and what a
child's log says about the graph's splits between backends. Verify's backend-library unit checks them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# llama-context.cpp's sched_reserve: "graph (pp bs=512, tg bs=1): nodes = 1234 / 1200, splits = 9 / 1, ..." or,
# when the prompt's and generation's graphs do not differ, "graph: nodes = 1234, splits = 1, ...".
GRAPH_SPLITS = re.compile(r"\w+: graph(?: \(pp bs=\d+, tg bs=\d+\))?: nodes = [\d /]+, splits = (\d+)")


@dataclass
class LibraryCheck:
    """One ggml backend library of the wheel: present, loaded, used."""

    library: str
    """Its name ("ggml-blas")."""
    file: str = ""
    """Its file in the installed wheel, relative to the install folder; "" when absent."""
    loaded: bool = False
    """The import probe's child had it mapped (/proc/self/maps)."""
    device: str = ""
    """The device ggml's registry listed for it ("BLAS: OpenBLAS"); "" when none was listed or none is expected."""
    prompt_graph_splits: int | None = None
    """Splits of the prompt's graph in the sweep's first point (more than 1: another backend took operations)."""
    problems: list[str] = field(default_factory=list)
    """What is missing, in words; empty when the library is there and used."""


def library_files(site_dir: Path, library: str) -> list[Path]:
    """``lib<library>.so*`` / ``.dylib`` / ``<library>.dll`` anywhere in the installed wheel."""
    patterns = (f"lib{library}.so*", f"lib{library}.dylib", f"{library}.dll")
    return sorted(p for pattern in patterns for p in site_dir.rglob(pattern))


def prompt_graph_splits(log_text: str) -> int | None:
    """The prompt graph's splits in a child's log (the first sched_reserve line); None when the log has none."""
    match = GRAPH_SPLITS.search(log_text)
    return int(match[1]) if match else None
