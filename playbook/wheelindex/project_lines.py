"""The lines a user's project needs so that its own ``uv sync`` or ``pip install`` gets the chosen wheel, or a
correct build, never a wheel cached for another backend.

pip and uv cache a wheel they built by its version, not by ``CMAKE_ARGS``: a CPU wheel built once is reused
when CUDA is asked for. A published wheel is named by its variant's own index URL, which both tools key their
caches by; a build is described by uv's ``config-settings`` and ``extra-build-variables``, which uv puts into
its build cache key, and by pip's ``-C cmake.args`` with ``--no-cache-dir``.
"""

from __future__ import annotations

from dataclasses import dataclass

from playbook.wheelindex.metadata import LAUNCHER_ARG, PROJECT, WheelRecord


@dataclass
class ProjectLines:
    pyproject: str
    requirements: str
    pip_command: str

    def text(self) -> str:
        return (f"# pyproject.toml\n{self.pyproject}\n# requirements.txt\n{self.requirements}\n"
                f"# or with pip directly\n{self.pip_command}\n")


def index_name(record: WheelRecord) -> str:
    return f"llama-cpp-{record.variant}"


def for_published(record: WheelRecord, index_url: str) -> ProjectLines:
    """A published wheel: its variant's index, for llama-cpp-python only, binary only."""
    pin = f"{PROJECT}=={record.version}"
    # uv keeps an installed distribution of the same version even when the lock now names another index's file
    # (tested): reinstalling the one package takes the locked variant's wheel from uv's cache, keyed by its URL.
    pyproject = (f'[project]\ndependencies = ["{pin}"]\n\n[tool.uv]\nreinstall-package = ["{PROJECT}"]\n\n'
                 f'[[tool.uv.index]]\nname = "{index_name(record)}"\nurl = "{index_url}"\nexplicit = true\n\n'
                 f'[tool.uv.sources]\n{PROJECT} = {{ index = "{index_name(record)}" }}\n')
    requirements = f"--extra-index-url {index_url}\n--only-binary {PROJECT}\n{pin}\n"
    command = f"pip install --extra-index-url {index_url} --only-binary {PROJECT} '{pin}'"
    return ProjectLines(pyproject, requirements, command)


def for_build(version: str, cmake_args: list[str]) -> ProjectLines:
    """No published wheel: a build from the sdist with the plan's CMake arguments, in the tools' cache keys."""
    args = [a for a in cmake_args if not LAUNCHER_ARG.match(a)]
    joined = " ".join(args)
    settings = ";".join(args)
    pin = f"{PROJECT}=={version}"
    pyproject = (f'[project]\ndependencies = ["{pin}"]\n\n[tool.uv]\nno-binary-package = ["{PROJECT}"]\n'
                 f'config-settings = {{ "cmake.args" = "{settings}" }}\n\n'
                 f'[tool.uv.extra-build-variables]\n{PROJECT} = {{ CMAKE_ARGS = "{joined}" }}\n')
    requirements = f"--no-binary {PROJECT}\n{pin}\n"
    command = (f"CMAKE_ARGS='{joined}' pip install --no-cache-dir --no-binary {PROJECT} "
               f"-C cmake.args='{settings}' -r requirements.txt")
    return ProjectLines(pyproject, requirements, command)
