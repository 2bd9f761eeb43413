#!/usr/bin/env python3
"""Assemble a fork's source tree with its submodules at their pinned commits (playbook/steps/fork_tree.py).

    python scripts/assemble-fork-tree.py FORK_GIT DEST --submodule vendor/llama.cpp=LLAMA_CPP_GIT [--commit REV]
        [--allow-absent 'vendor/llama.cpp/models/*.gguf']    # a mirror without its largest files

Then build it:  playbook run --params params/fork.yaml --set source.path=DEST --set backend=cpu
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playbook.steps.fork_tree import ForkTreeError, assemble, pinned_submodules


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fork", type=Path, help="the fork's git folder (a checkout or a bare mirror)")
    parser.add_argument("dest", type=Path, nargs="?", help="an empty folder for the tree; without it, list the pins")
    parser.add_argument("--submodule", action="append", default=[], metavar="PATH=GIT",
                        help="where a submodule's commits are, e.g. vendor/llama.cpp=~/mirrors/llama.cpp")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--allow-absent", action="append", default=[], metavar="PATTERN",
                        help="tree paths the git folders may lack (a mirror without its largest files); left out "
                             "of the tree and listed in its FORK_TREE.json")
    args = parser.parse_args()
    try:
        if args.dest is None:
            for module in pinned_submodules(args.fork, args.commit):
                print(f"{module.path}\t{module.commit}\t{module.url}")
            return 0
        repos = dict(item.split("=", 1) for item in args.submodule)
        tree = assemble(args.fork, args.dest, {k: Path(v).expanduser() for k, v in repos.items()}, args.commit,
                        args.allow_absent)
    except ForkTreeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{tree.tree}: {tree.repository} at {tree.commit}; " +
          ", ".join(f"{m.path} at {m.commit}" for m in tree.submodules) +
          (f"; left out (absent): {', '.join(tree.left_out)}" if tree.left_out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
