#!/usr/bin/env python3
"""Archive a run folder under outputs/reference/ without its wheels: copy everything but wheelhouse/, then
amend the copy's manifest once to mark the wheels deliberately not archived (their sha256 stays listed,
and the run-time provenance.json is kept as it was written).

    python scripts/archive-run.py RUN_DIR [DEST_ROOT]      # DEST_ROOT defaults to outputs/reference
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playbook.runfolder.integrity import amend_manifest

WHEELS = "wheelhouse"


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    run = Path(sys.argv[1]).resolve()
    root = Path(sys.argv[2]) if len(sys.argv) == 3 else Path(__file__).resolve().parent.parent / "outputs" / "reference"
    dest = root / run.name
    if dest.exists():
        print(f"{dest} exists", file=sys.stderr)
        return 1
    shutil.copytree(run, dest, ignore=lambda folder, names: [WHEELS] if Path(folder) == run else [])
    amend_manifest(dest, [f"{WHEELS}/*"], "marked the wheels not archived (scripts/archive-run.py)")
    print(f"archived {run} as {dest}, without {WHEELS}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
