"""The server profile's verify: ``python -m llama_cpp.server`` started, asked one completion, stopped.
Fast tests run a stand-in server module; the slow one installs a real wheel with ``[server]`` (its
packages come from the package index) and runs the real server on a tiny F16 model."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from playbook.params import PARAMS_DIR, load_params
from playbook.runfolder.layout import Layout
from playbook.verify.launcher import child_env
from playbook.verify.server_check import check_server
from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
from playbook.verify.units.server import SERVER, server_failed

# Answers as llama_cpp.server does, on the standard library's HTTP server.
FAKE_SERVER = """
    import argparse, json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    parser = argparse.ArgumentParser()
    for name in ("--model", "--host", "--port", "--n_gpu_layers"):
        parser.add_argument(name)
    args = parser.parse_args()
    print(f"fake server on {args.host}:{args.port}, n_gpu_layers={args.n_gpu_layers}", file=sys.stderr, flush=True)

    class Handler(BaseHTTPRequestHandler):
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply({"object": "list", "data": [{"id": args.model, "object": "model"}]})

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.reply({"choices": [{"text": " Paris" * request["max_tokens"], "index": 0}],
                        "usage": {"completion_tokens": request["max_tokens"]}})

    HTTPServer((args.host, int(args.port)), Handler).serve_forever()
"""


def fake_server_site(tmp_path: Path, main: str) -> Path:
    site = tmp_path / "site"
    (site / "llama_cpp" / "server").mkdir(parents=True)
    (site / "llama_cpp" / "__init__.py").write_text("")
    (site / "llama_cpp" / "server" / "__init__.py").write_text("")
    (site / "llama_cpp" / "server" / "__main__.py").write_text(textwrap.dedent(main))
    return site


def test_a_server_that_answers_is_ok(tmp_path):
    site = fake_server_site(tmp_path, FAKE_SERVER)
    model = tmp_path / "model.gguf"
    check = check_server(model, child_env(site), tmp_path / "server.log", 7, startup_timeout_s=60,
                         request_timeout_s=30)
    assert check.ok and check.status == "ok", check.error
    assert check.http_status == 200 and check.text_length == len(" Paris" * 4) and check.completion_tokens == 4
    assert check.models == [str(model)] and check.startup_s is not None and check.latency_s is not None
    assert check.command[-2:] == ["--n_gpu_layers", "7"] and "--port" in check.command
    log = (tmp_path / "server.log").read_text()
    assert "n_gpu_layers=7" in log and "playbook: server check ok" in log


def test_a_server_that_dies_is_a_finding_with_its_log(tmp_path):
    site = fake_server_site(tmp_path, """
        import sys
        print("ModuleNotFoundError: No module named 'fastapi'", file=sys.stderr)
        sys.exit(1)
    """)
    check = check_server(tmp_path / "model.gguf", child_env(site), tmp_path / "server.log", 0, startup_timeout_s=60)
    assert not check.ok and check.status == "exited" and check.returncode == 1
    assert "No module named 'fastapi'" in check.log_tail
    finding = server_failed(check)
    assert finding.id == "server-failed" and "No module named 'fastapi'" in finding.evidence


def test_a_server_that_never_answers_is_stopped(tmp_path):
    site = fake_server_site(tmp_path, "import time\ntime.sleep(600)\n")
    check = check_server(tmp_path / "model.gguf", child_env(site), tmp_path / "server.log", 0, startup_timeout_s=2)
    assert check.status == "no-start" and "did not answer within 2 s" in check.error


@pytest.mark.slow
@pytest.mark.network
def test_server_extra_is_installed_and_answers_a_completion(tmp_path, cpu_wheel, tiny_f16_model):
    """verify with the plan's extras=["server"]: the wheel installed as wheel[server] from the index,
    the real server started on the tiny model, one completion recorded in the result."""
    params = load_params(PARAMS_DIR / "server.yaml", [f"model.path={tiny_f16_model}", "model.quant=F16",
                                                      "verify.repetitions=1", "verify.prompt_tokens=16",
                                                      "verify.gen_tokens=4", "verify.timeout_s=300",
                                                      f"build.cache_dir={tmp_path / 'cache'}"])
    layout = Layout(tmp_path / "run")
    result = run_verify(VerifyRequest(layout, cpu_wheel, params, VerifyTarget(expect_gpu=False, extras=["server"]),
                                      tmp_path, tmp_path / "cache"), log=print)
    install_log = layout.install_log(1).read_text()
    assert result.extras == ["server"] and (Path(result.site_dir) / "fastapi").is_dir(), install_log[-2000:]
    server = result.measured(SERVER)
    assert server is not None and server.ok, (server, result.findings)
    assert server.http_status == 200 and server.text_length is not None and server.latency_s > 0
    assert server.n_gpu_layers == 0  # a CPU-only wheel
    assert result.ok, result.findings
    assert layout.unit_files(1, "server").log().is_file()
