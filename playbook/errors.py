"""The playbook's own exception types."""


class PlaybookError(Exception):
    """Base class: an error the user can act on; the message says what to change."""


class ParameterError(PlaybookError):
    """A parameter set is invalid: unknown key, wrong type, missing file or unknown version."""


class StepFailed(PlaybookError):
    """A pipeline step ended with a failure that needs a person; the run folder keeps everything."""
