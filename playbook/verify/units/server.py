"""The server check: with the plan's ``server`` extra, ``python -m llama_cpp.server`` started on the
model, asked one completion over HTTP, stopped (:mod:`playbook.verify.server_check`)."""

from __future__ import annotations

from playbook.knowledge.failures import Finding, finding_for
from playbook.verify.launcher import child_env
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.server_check import ServerCheck, check_server
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.model_file import MODEL_FILE

EXTRA = "server"


class ServerUnit:
    name = "server"
    value_type = ServerCheck

    def skip_reason(self, ctx: VerifyContext) -> str:
        return "" if EXTRA in ctx.target.extras else f"the plan installs no [{EXTRA}] extra"

    def measure(self, ctx: VerifyContext) -> Measured[ServerCheck]:
        model = ctx.require(MODEL_FILE)
        ngl = model.n_layer + 1 if ctx.require(IMPORT_PROBE).gpu_offload else 0
        log_file = ctx.files("server").log()
        ctx.log(f"starting python -m llama_cpp.server on {model.path.name} with n_gpu_layers={ngl}")
        server = check_server(model.path, child_env(ctx.wheel.site_dir, ctx.wheel.child_env), log_file, ngl,
                              ctx.request.python, startup_timeout_s=ctx.timeout_s, request_timeout_s=ctx.timeout_s)
        ctx.log(f"  server: {server.status}, up in {server.startup_s} s, /v1/completions HTTP {server.http_status} in "
                f"{server.latency_s} s, {server.text_length} characters"
                + (f": {server.error}" if server.error else ""))
        return Measured(server, [] if server.ok else [server_failed(server)], [log_file])



def server_failed(server: ServerCheck) -> Finding:
    return finding_for("server-failed", f"{server.status}: {server.error}\n{server.log_tail}", stage="run")


SERVER = ServerUnit()
