"""The wheel carries copies of notebooks/ and params/ (the repository keeps them at its top level).

Everything else about the package is in pyproject.toml; this file only adds that copy to build_py.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CARRIED = ("notebooks", "params")


class BuildPyWithNotebooks(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout (playbook.resources)
        target = Path(self.build_lib) / "playbook" / "_bundled"
        for name in CARRIED:
            shutil.copytree(ROOT / name, target / name, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("*.png", ".ipynb_checkpoints", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithNotebooks})
