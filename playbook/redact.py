"""One redaction filter for everything the playbook writes: environments, command lines, logs."""

from __future__ import annotations

import re
from collections.abc import Mapping

REDACTED = "<redacted>"

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|(^|_)KEY($|_)|API_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION",
    re.IGNORECASE,
)

_SECRET_VALUES = (
    # user:password@host in URLs
    (re.compile(r"(?P<keep>[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@", re.IGNORECASE), r"\g<keep>" + REDACTED + "@"),
    # Authorization: Bearer xyz / token xyz
    (re.compile(r"(?P<keep>\b(?:bearer|token)\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE), r"\g<keep>" + REDACTED),
    # well-known token prefixes (GitHub, Hugging Face, OpenAI, Slack, AWS access keys, PyPI)
    (
        re.compile(
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
            r"|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|pypi-[A-Za-z0-9_-]{20,})"
        ),
        REDACTED,
    ),
    # NAME=value where NAME looks secret (command lines, logs that echo the environment)
    (
        re.compile(
            r"(?P<keep>\b[A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIALS?|AUTH)[A-Za-z0-9_]*=)"
            r"(?!<redacted>)[^\s'\"]+",
            re.IGNORECASE,
        ),
        r"\g<keep>" + REDACTED,
    ),
)


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_text(text: str) -> str:
    for pattern, replacement in _SECRET_VALUES:
        text = pattern.sub(replacement, text)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-named variables hidden and secret-looking values masked."""
    return {name: REDACTED if is_secret_name(name) else redact_text(value) for name, value in sorted(env.items())}


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of secret-named variables, to be masked wherever they appear verbatim."""
    return [value for name, value in env.items() if is_secret_name(name) and len(value) >= 6]


def redact_known(text: str, secrets: list[str]) -> str:
    """Mask the given secret values verbatim, then apply the pattern filter."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return redact_text(text)
