#!/usr/bin/env bash
# Create or refresh .venv with the playbook and its dependencies. Idempotent: re-installs only
# when pyproject.toml changed since the last install. PYTHON picks the interpreter (default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.playbook-installed"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "playbook: needs Python 3.10 or newer; set PYTHON=/path/to/python3.x" >&2
  exit 2
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "playbook: creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
# Again when pyproject.toml or this script changed since the last install.
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ "${BASH_SOURCE[0]}" -nt "$stamp" ]; then
  log="$venv/install.log"
  echo "playbook: installing dependencies into $venv (first time: a few minutes; pip's output in $log)" >&2
  # setuptools >= 77 reads pyproject.toml's license = "MIT" (PEP 639): the venv's own setuptools (65 with
  # Python 3.11) refuses it, and `pip install --no-build-isolation .` of this project would fail in it.
  if ! { "$venv/bin/python" -m pip install --upgrade pip "setuptools>=77" \
         && "$venv/bin/python" -m pip install -e "$root[test]"; } \
      > "$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "playbook: installing into $venv failed; the whole of pip's output is in $log" >&2
    exit 1
  fi
  touch "$stamp"
fi
