"""The playbook's exceptions, one tree, each with the exit status the CLI returns for it.

A :class:`PlaybookError` is something the user can act on: its message says what to change. Shown
in a notebook, it is that one sentence, not a traceback (``_render_traceback_``, IPython's hook).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What ``playbook``'s exit status says failed."""

    OK = 0
    RUN_FAILED = 1  # the chain ran and ended failed (build or verify); the run folder says why
    BAD_INPUT = 2  # a parameter, a file or a command line was refused before anything was built
    REFUSED = 3  # the plan knows the build must fail (blockers); nothing was built
    STEP_ERROR = 4  # a step notebook raised, or a step's predecessor has not run
    RUN_FOLDER = 5  # a run folder cannot be written, read or checked
    FOUND = 6  # `playbook diagnose`: a known failure was named in the text
    UNRECOGNISED = 7  # `playbook diagnose`: the text plainly failed, and no known failure matches it
    NOT_A_LOG = 8  # `playbook diagnose`: the file is binary, not a log
    INTERRUPTED = 130


class PlaybookError(Exception):
    """Base class: an error the user can act on; the message says what to change."""

    exit_code = ExitCode.BAD_INPUT

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of the traceback
        return [f"{type(self).__name__}: {self}"]


class ParameterError(PlaybookError):
    """A parameter set is invalid: unknown key, wrong type, missing file or unknown version."""


class PlanRefused(PlaybookError):
    """The plan's blockers make building pointless until they are fixed (``--force`` builds anyway)."""

    exit_code = ExitCode.REFUSED


class StepFailed(PlaybookError):
    """A pipeline step ended with a failure that needs a person; the run folder keeps everything."""

    exit_code = ExitCode.STEP_ERROR


class MissingPredecessor(StepFailed):
    """A step was asked to run before the step whose facts it reads."""


class RunFolderError(PlaybookError):
    """A run folder cannot be created, written or read as the playbook wrote it."""

    exit_code = ExitCode.RUN_FOLDER


class NotALogError(PlaybookError):
    """``playbook diagnose`` was given a binary file (a program, an archive), not a log."""

    exit_code = ExitCode.NOT_A_LOG


class KnowledgeBaseError(PlaybookError):
    """A knowledge file (failures.yaml, cuda.yaml, ...) is malformed."""

    exit_code = ExitCode.STEP_ERROR
