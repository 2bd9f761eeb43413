"""Where the playbook's notebooks and parameter sets are: in a checkout, or inside the installed wheel.

The repository keeps ``notebooks/`` and ``params/`` at its top level; a wheel carries copies of both
under ``playbook/_bundled/`` (setup.py copies them at build time). Code asks this module, never
``Path(__file__).parent.parent``, so the same code runs from a checkout and from ``pip install .``.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"
CHECKOUT_DIR = PACKAGE_DIR.parent
OUTPUT_ROOT_VARIABLE = "LLAMA_PLAYBOOK_OUTPUTS"


def _data_dir(name: str) -> Path:
    bundled = BUNDLED_DIR / name
    return bundled if bundled.is_dir() else CHECKOUT_DIR / name


def notebooks_dir() -> Path:
    return _data_dir("notebooks")


def params_dir() -> Path:
    return _data_dir("params")


def notebook(step: str) -> Path:
    return notebooks_dir() / f"{step}.ipynb"


def default_params_file() -> Path:
    return params_dir() / "default.yaml"


def is_checkout() -> bool:
    """Running from the repository (an editable install), not from an installed wheel."""
    return not BUNDLED_DIR.is_dir() and (CHECKOUT_DIR / "pyproject.toml").is_file()


def default_output_root(environ: os._Environ[str] | dict[str, str] | None = None) -> Path:
    """``$LLAMA_PLAYBOOK_OUTPUTS`` when set; else ``outputs/`` of the checkout, or of the current
    folder when the playbook runs from an installed wheel."""
    environ = os.environ if environ is None else environ
    if environ.get(OUTPUT_ROOT_VARIABLE):
        return Path(environ[OUTPUT_ROOT_VARIABLE]).expanduser()
    return (CHECKOUT_DIR if is_checkout() else Path.cwd()) / "outputs"


def resolve_params_file(name: str | Path) -> Path:
    """A parameter file as given, or by its name among the bundled sets (``params/cpu.yaml``, ``cpu``)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    for candidate in (params_dir() / path.name, params_dir() / f"{path.name}.yaml"):
        if candidate.is_file():
            return candidate
    return path
