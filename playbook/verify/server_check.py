"""Verify the ``[server]`` extra: start ``python -m llama_cpp.server`` on the model, ask it for one
completion over HTTP, stop it.

The server runs as a child process in its own session, from an empty folder, with the environment
verify gives every child (the wheel's site folder first on PYTHONPATH, the plan's runtime variables);
its output goes to a log file that is archived with the other verify logs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from playbook.localhost import free_port

PROMPT = "The capital of France is"
MAX_TOKENS = 4


@dataclass
class ServerCheck:
    """What the server did: ``status`` is ok, exited (died before answering), no-start (never answered
    /v1/models in time) or request-failed (answered /v1/models but not the completion)."""

    status: str
    ok: bool
    command: list[str]
    port: int
    n_gpu_layers: int
    log_file: str
    startup_s: float | None = None  # until /v1/models answered 200
    http_status: int | None = None  # of POST /v1/completions
    latency_s: float | None = None  # of POST /v1/completions
    text_length: int | None = None  # characters of choices[0].text
    completion_tokens: int | None = None
    models: list[str] | None = None  # ids /v1/models listed
    returncode: int | None = None  # the server's, when it exited on its own
    error: str = ""
    log_tail: str = ""


def server_command(python: str, model: Path, port: int, n_gpu_layers: int) -> list[str]:
    return [python, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--n_gpu_layers", str(n_gpu_layers)]


def _get_json(url: str, timeout: float, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read().decode() or "{}")


def check_server(
    model: Path,
    env: dict[str, str],
    log_file: Path,
    n_gpu_layers: int,
    python: str = sys.executable,
    startup_timeout_s: float = 120,
    request_timeout_s: float = 120,
) -> ServerCheck:
    """Start the server, wait for ``/v1/models``, send one ``/v1/completions``, stop it; never raises
    for what the server does (a failure is a status with the log's last lines)."""
    port = free_port()
    command = server_command(python, model, port, n_gpu_layers)
    check = ServerCheck("no-start", False, command, port, n_gpu_layers, log_file.name)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="playbook-server-") as clean_dir, log_file.open("w") as log:
        log.write(f"playbook: {' '.join(command)}\n")
        log.flush()
        proc = subprocess.Popen(command, cwd=clean_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            _run_requests(check, proc, base, started, startup_timeout_s, request_timeout_s)
        finally:
            _stop(proc)
    text = log_file.read_text(errors="replace")
    with log_file.open("a") as log:
        log.write(f"playbook: server check {check.status}"
                  + (f": {check.error}" if check.error else f": HTTP {check.http_status} in {check.latency_s} s")
                  + "\n")
    check.ok = check.status == "ok"
    if not check.ok:
        check.log_tail = "\n".join(text.strip().splitlines()[-20:])
    return check


def _run_requests(check: ServerCheck, proc: subprocess.Popen, base: str, started: float, startup_timeout_s: float,
                  request_timeout_s: float) -> None:
    deadline = started + startup_timeout_s
    last_error = ""
    while True:
        if proc.poll() is not None:
            check.status, check.returncode = "exited", proc.returncode
            check.error = f"the server exited with {_describe_exit(proc.returncode)} before answering /v1/models"
            return
        if time.monotonic() > deadline:
            check.error = f"/v1/models did not answer within {startup_timeout_s:.0f} s (last: {last_error})"
            return
        try:
            status, body = _get_json(f"{base}/v1/models", timeout=5)
            if status == 200:
                break
            last_error = f"HTTP {status}"
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as error:
            last_error = f"{type(error).__name__}: {error}"
        time.sleep(0.25)
    check.startup_s = round(time.monotonic() - started, 2)
    check.models = [m.get("id", "") for m in body.get("data", [])]

    sent = time.monotonic()
    try:
        check.http_status, body = _get_json(f"{base}/v1/completions", timeout=request_timeout_s,
                                            body={"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0})
    except urllib.error.HTTPError as error:
        check.http_status = error.code
        check.status, check.error = "request-failed", f"POST /v1/completions: HTTP {error.code}: {error.read()[:500]!r}"
        return
    except (urllib.error.URLError, ConnectionError, OSError, ValueError) as error:
        check.status = "exited" if proc.poll() is not None else "request-failed"
        check.error = f"POST /v1/completions: {type(error).__name__}: {error}"
        if proc.poll() is not None:
            check.error += f"; the server exited with {_describe_exit(proc.returncode)}"
        return
    finally:
        check.latency_s = round(time.monotonic() - sent, 3)
    choices = body.get("choices") or [{}]
    text = choices[0].get("text")
    check.text_length = len(text) if isinstance(text, str) else None
    check.completion_tokens = (body.get("usage") or {}).get("completion_tokens")
    if check.http_status == 200 and isinstance(text, str):
        check.status = "ok"
    else:
        check.status, check.error = "request-failed", f"unexpected answer: {json.dumps(body)[:500]}"


def _describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 10 s."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
