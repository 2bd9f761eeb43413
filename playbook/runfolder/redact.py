"""One redaction filter for everything the playbook writes: environments, command lines, logs."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from pathlib import Path

REDACTED = "<redacted>"

SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|(^|_)KEY($|_)|API_?KEY|PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION",
    re.IGNORECASE,
)

_SECRET_VALUES = (
    # user:password@host in URLs
    (re.compile(r"(?P<keep>[a-z][a-z0-9+.-]*://[^\s:/@]+:)(?!<redacted>@|&lt;redacted&gt;@)[^\s@/]+@", re.IGNORECASE), r"\g<keep>" + REDACTED + "@"),
    # Authorization: Bearer xyz / token xyz ("token" needs a digit in the value: "token generation" is prose)
    (re.compile(r"(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE), r"\g<keep>" + REDACTED),
    (re.compile(r"(?P<keep>\btoken\s+)(?=[A-Za-z._~+/=-]*\d)[A-Za-z0-9._~+/=-]{12,}", re.IGNORECASE),
     r"\g<keep>" + REDACTED),
    # well-known token prefixes (GitHub, Hugging Face, OpenAI, Slack, AWS access keys, PyPI)
    (
        re.compile(
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
            r"|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16}|pypi-[A-Za-z0-9_-]{20,})"
        ),
        REDACTED,
    ),
)

# NAME=value where NAME names a secret (command lines, logs that echo the environment). A word of the name
# (between underscores, after the last dot) ends in TOKEN, SECRET or PASSWORD, or is AUTH, CREDENTIALS or an
# API key: HF_TOKEN, build.env.MY_API_KEY, auth_token; not verify.gen_tokens, a count of tokens.
_ASSIGNED_NAME = re.compile(r"\b[A-Za-z0-9_.]*[A-Za-z0-9_](?==)")
_ASSIGNED_VALUE = re.compile(r"=[^\s'\"]+")
_SECRET_WORD = re.compile(r"[A-Z0-9]*(?:TOKEN|SECRETS?|PASSWORD|PASSWD)|PASSPHRASE|APIKEY|CREDENTIALS?|AUTH",
                          re.IGNORECASE)


def names_a_secret(name: str) -> bool:
    """Whether an assignment's NAME (``HF_TOKEN``, ``build.env.API_KEY``) says its value is a secret."""
    words = name.rsplit(".", 1)[-1].split("_")
    pairs = ["".join(pair) for pair in itertools.pairwise(words)]
    return any(_SECRET_WORD.fullmatch(word) for word in words) or any(p.lower() == "apikey" for p in pairs)


def _redact_assignments(text: str) -> str:
    kept, position = [], 0
    for name in _ASSIGNED_NAME.finditer(text):
        if name.start() < position or not names_a_secret(name[0]) or text.startswith(REDACTED, name.end() + 1):
            continue
        if value := _ASSIGNED_VALUE.match(text, name.end()):
            kept += [text[position:name.end()], "=", REDACTED]
            position = value.end()
    return "".join(kept) + text[position:]


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def redact_text(text: str) -> str:
    for pattern, replacement in _SECRET_VALUES:
        text = pattern.sub(replacement, text)
    return _redact_assignments(text)


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


_URL_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<password>[^\s@/]+)@", re.IGNORECASE)


def url_passwords(env: Mapping[str, str]) -> list[str]:
    """Passwords inside ``user:password@`` URLs of any variable (``PIP_INDEX_URL`` has no secret
    name): a tool may print the password alone, away from its URL."""
    return [m.group("password") for value in env.values() for m in _URL_PASSWORD.finditer(value)
            if len(m.group("password")) >= 6 and m.group("password") != REDACTED]


def run_secrets(environ: Mapping[str, str], build_env: Mapping[str, str] = {}) -> list[str]:
    """Every value a run folder must not contain verbatim: secret-named variables of the
    environment and of the parameters' ``build.env``, and passwords inside URLs in either."""
    found = [*secret_values(environ), *secret_values(build_env), *url_passwords(environ), *url_passwords(build_env)]
    return sorted(set(found), key=len, reverse=True)


def redact_json(value: object, secrets: list[str], key: str = "") -> object:
    """``value`` (parsed JSON) with every string redacted, and the string of a key that names a
    secret environment variable (``{"HF_TOKEN": ...}`` in a plan's env) hidden whole. Base64
    images in notebook outputs are left alone: the patterns are for text."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(v, str) and v and _ENV_NAME.match(k) and is_secret_name(k)
                else redact_json(v, secrets, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(item, secrets, key) for item in value]
    if isinstance(value, str) and not (key.startswith("image/") and key != "image/svg+xml"):
        return redact_known(value, secrets)
    return value


# Facts keys are lower case; only environment-variable names are hidden by name.
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")


# Files the filter cannot read as text; a wheel is the product and is archived as built.
BINARY_SUFFIXES = frozenset({".whl", ".png", ".jpg", ".gguf", ".so", ".zip", ".gz", ".tar", ".pdf"})


def redact_file(path: Path, secrets: list[str]) -> bool:
    """Redact one written file in place; JSON and notebooks leaf by leaf, so they stay valid.
    Returns whether anything was masked (an unchanged file is not rewritten)."""
    if path.suffix in BINARY_SUFFIXES:
        return False
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    if path.suffix in (".json", ".ipynb"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            clean = redact_known(text, secrets)
        else:
            redacted = redact_json(data, secrets)
            if redacted == data:
                return False
            # nbformat's own layout for notebooks; write_json' for facts
            clean = (json.dumps(redacted, indent=1, sort_keys=True, ensure_ascii=False) if path.suffix == ".ipynb"
                     else json.dumps(redacted, indent=2)) + "\n"
    else:
        clean = redact_known(text, secrets)
    if clean == text:
        return False
    path.write_text(clean, encoding="utf-8")
    return True


def redact_folder(folder: Path, secrets: list[str]) -> list[Path]:
    """Redact every file under ``folder``; the files that changed."""
    return [path for path in sorted(folder.rglob("*")) if path.is_file() and redact_file(path, secrets)]
