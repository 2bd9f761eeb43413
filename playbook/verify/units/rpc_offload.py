"""RPC offload (build.rpc): rpc-server built from the wheel's own tree, started on 127.0.0.1 for a bounded
time, and the wheel's layers sent to it through the RPC backend. The logits with every layer on the server
must agree with the CPU's; throughput is measured by layers sent (the offload sweep's child and points);
the server is stopped afterwards, also when a child fails or hangs."""

from __future__ import annotations

import tempfile
from pathlib import Path

from playbook.knowledge.failures import Finding, finding_for
from playbook.verify.agreement import compare_logits
from playbook.verify.launcher import ChildOutcome, run_child
from playbook.verify.measurement import Measured, VerifyContext
from playbook.verify.rpc_server import (
    RPC_SERVERS_VARIABLE,
    RpcOffload,
    RpcServer,
    RpcServerError,
    RpcServerRecord,
    announced_devices,
    held_mib,
)
from playbook.verify.sweep import SweepPoint, layer_counts, save_side_by_side, sweep_point
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP, run_bench_child

# Children a server outlives at most: the two logits sides, every sweep point, and one to spare.
SPARE_CHILDREN = 3


class RpcOffloadUnit:
    name = "rpc-offload"
    value_type = RpcOffload

    def skip_reason(self, ctx: VerifyContext) -> str:
        if ctx.target.rpc is None:
            return "the plan built no RPC client (build.rpc is false)"
        if ctx.request.rpc_server is None:
            return "no rpc-server build was given to verify"
        return ""

    def measure(self, ctx: VerifyContext) -> Measured[RpcOffload]:
        assert ctx.request.rpc_server is not None
        model, verify = ctx.require(MODEL_FILE), ctx.params.verify
        ctx.log("building rpc-server from the wheel's tree with the plan's server arguments")
        build = ctx.request.rpc_server(ctx.files("rpc").beside(".log", "server-build"))
        ctx.log(f"  rpc-server: {build.binary if build.ok else build.error} ({build.build_s:.0f} s)")
        files = [ctx.files("rpc").beside(".log", "server-build")]
        if not build.ok:
            return Measured(RpcOffload(error=build.error), files=files, passed=False,
                            summary=f"RPC not measured: {build.error}")
        counts = layer_counts(model.n_layer, verify.n_gpu_layers, True, verify.sweep_points)
        offload = RpcOffload(layer_counts=counts)
        lifetime_s = ctx.timeout_s * (len(counts) + SPARE_CHILDREN)
        server = RpcServer(Path(build.binary), ctx.files("rpc").log("server"), ctx.settings.threads,
                           lifetime_s, env=ctx.target.rpc.server_env if ctx.target.rpc else None)
        record = RpcServerRecord("", build, log_file=ctx.files("rpc").log("server").name)
        offload.servers.append(record)
        files.append(ctx.files("rpc").log("server"))
        findings: list[Finding] = []
        try:
            with server:
                record.address = server.address
                ctx.log(f"rpc-server listening on {server.address} (lifetime at most {lifetime_s:.0f} s)")
                findings += self._agreement(ctx, offload, server, model.path, model.n_layer, files)
                findings += self._sweep(ctx, offload, server, record, model.path, files)
                record.exit_status = server.exit_status() if not server.running() else "stopped by verify"
        except RpcServerError as error:
            offload.error = str(error)
            record.exit_status = server.exit_status()
        record.devices = announced_devices(server.log_file.read_text(errors="replace"))
        ctx.log(f"  rpc-server devices: {'; '.join(record.devices) or 'none announced'}; {record.exit_status}")
        local_sweep = ctx.value(OFFLOAD_SWEEP)
        offload.plot_files = [p.name for p in plot_local_against_rpc(
            local_sweep.points if local_sweep else [], offload,
            f"{model.path.name} · client {ctx.target.backend}, server {build.backend} on {record.address or '-'}",
            [ctx.files("rpc").beside(s) for s in (".png", ".svg")])]
        files += [ctx.files("rpc").beside(s) for s in (".png", ".svg")]
        full = max(counts)
        at_full = next((p for p in offload.points if p.n_gpu_layers == full), None)
        # llama.cpp says "offloaded N/N layers to GPU" even when no device took them: the server must hold weights.
        held = record.model_mib_by_layers.get(str(full), 0.0)
        sent_all = at_full is not None and at_full.status == "ok" and bool(at_full.offloaded_layers) and held > 0
        if at_full is not None and at_full.status == "ok" and not held:
            offload.error = (f"no weights reached {record.address} with {full} layers sent: the client's load log "
                             "names no RPC buffer (the server was not among the model's devices)")
            ctx.log(f"  {offload.error}")
        passed = (not offload.error and sent_all and offload.agreement is not None and offload.agreement.ok)
        return Measured(offload, findings, files, passed=passed, summary=summary(offload))

    def _agreement(self, ctx: VerifyContext, offload: RpcOffload, server: RpcServer, model: Path, n_layer: int,
                   files: list[Path]) -> list[Finding]:
        """The same tokens' logits with no layer sent and with every layer (and the output layer) on the server."""
        findings: list[Finding] = []
        outcomes: dict[str, ChildOutcome] = {}
        with tempfile.TemporaryDirectory(prefix="playbook-rpc-logits-") as tmp:
            for side, ngl, env in (("cpu", 0, ctx.wheel.child_env), ("rpc", n_layer + 1, _rpc_env(ctx, server))):
                log = ctx.files("rpc").log(f"logits-{side}")
                files.append(log)
                args = ["logits", str(model), str(ngl), str(ctx.settings.threads),
                        str(ctx.params.verify.compare_positions), str(Path(tmp) / f"{side}.f32"), "0"]
                outcomes[side] = run_child(args, ctx.wheel.site_dir, log, ctx.timeout_s, ctx.request.python,
                                           expected=("cpu-only-build",), extra_env=env)
                findings += outcomes[side].findings
            if any(o.status != "ok" for o in outcomes.values()):
                ctx.log("RPC logits comparison skipped: a child failed (see findings)")
                return findings
            rpc_result = outcomes["rpc"].result
            assert rpc_result is not None, "a child whose status is ok wrote its result line"
            n_vocab = int(rpc_result["n_vocab"])
            offload.agreement = compare_logits(Path(tmp) / "cpu.f32", Path(tmp) / "rpc.f32", n_vocab,
                                               ctx.params.model.quant)
        agreement = offload.agreement
        ctx.log(f"RPC ({outcomes['rpc'].offloaded_layers} layers on {server.address}) vs CPU over "
                f"{agreement.positions} positions: relative error {agreement.relative_error:.2e} "
                f"(max {agreement.max_relative_error}), top-1 agreement {agreement.top1_agreement:.1%}")
        if not agreement.ok:
            findings.append(finding_for("numeric-mismatch", f"playbook: numeric mismatch through rpc-server: relative "
                                        f"error {agreement.relative_error:.3g}, top-1 agreement "
                                        f"{agreement.top1_agreement:.3f}", stage="run"))
        return findings

    def _sweep(self, ctx: VerifyContext, offload: RpcOffload, server: RpcServer, record: RpcServerRecord,
               model: Path, files: list[Path]) -> list[Finding]:
        verify, findings = ctx.params.verify, []
        for ngl in offload.layer_counts:
            if not server.running():
                ctx.log(f"rpc-server is not running ({server.exit_status()}): the sweep stops before {ngl} layers")
                offload.points.append(SweepPoint(ngl, "server gone"))
                continue
            log = ctx.files("rpc").log(f"bench-ngl-{ngl}")
            files.append(log)
            ctx.log(f"measuring {ngl} layers sent to {server.address}: pp{verify.prompt_tokens}, tg{verify.gen_tokens}")
            outcome = run_bench_child(model, ngl, ctx.settings, verify.prompt_tokens, verify.gen_tokens,
                                      verify.repetitions, ctx.wheel.site_dir, log, ctx.timeout_s, ctx.request.python,
                                      _rpc_env(ctx, server))
            point = sweep_point(outcome, ngl, ctx.settings)
            offload.points.append(point)
            findings += outcome.findings
            total, weights = held_mib(log.read_text(errors="replace"), server.address)
            record.held_mib_by_layers[str(ngl)] = total
            record.model_mib_by_layers[str(ngl)] = weights
            ctx.log(f"  {point.status}: pp {point.pp_tokens_per_s or 0:.1f} t/s, tg {point.tg_tokens_per_s or 0:.1f} "
                    f"t/s, offloaded {point.offloaded_layers}, {total:.1f} MiB on the server ({weights:.1f} weights)")
        return findings



def _rpc_env(ctx: VerifyContext, server: RpcServer) -> dict[str, str]:
    """The child's environment with the server to register (the child script reads RPC_SERVERS_VARIABLE)."""
    return {**ctx.wheel.child_env, RPC_SERVERS_VARIABLE: server.address}


def summary(offload: RpcOffload) -> str:
    measured = [p for p in offload.points if p.status == "ok"]
    if not measured:
        return f"RPC: nothing measured through rpc-server{': ' + offload.error if offload.error else ''}"
    first, last = measured[0], measured[-1]
    agreement = (f"; logits vs CPU relative error {offload.agreement.relative_error:.1e}"
                 if offload.agreement else "; logits not compared")
    return (f"RPC through {offload.servers[0].address}: tg {first.tg_tokens_per_s:.1f} t/s with {first.n_gpu_layers} "
            f"layers sent, {last.tg_tokens_per_s:.1f} with {last.n_gpu_layers}{agreement}")


def plot_local_against_rpc(local: list[SweepPoint], offload: RpcOffload, title: str, paths: list[Path]) -> list[Path]:
    """Tokens/s by layers: the local sweep (layers on the client's own device; one point, drawn across, for a
    CPU-only client) against the layers sent to the RPC server; prompt processing and generation side by side."""
    from matplotlib.ticker import MaxNLocator

    local_ok = sorted((p for p in local if p.status == "ok"), key=lambda p: p.n_gpu_layers)
    remote_ok = [p for p in offload.points if p.status == "ok"]

    def draw(axes) -> None:
        for ax, attr, label in ((axes[0], "pp", "prompt processing"), (axes[1], "tg", "token generation")):
            if len(local_ok) == 1:
                ax.axhline(getattr(local_ok[0], f"{attr}_tokens_per_s"), color="gray", linestyle="--",
                           label=f"local, {local_ok[0].n_gpu_layers} layers offloaded")
            elif local_ok:
                ax.plot([p.n_gpu_layers for p in local_ok], [getattr(p, f"{attr}_tokens_per_s") for p in local_ok],
                        marker="s", color="gray", label="local: layers on the client's own device")
            if remote_ok:
                ax.errorbar([p.n_gpu_layers for p in remote_ok], [getattr(p, f"{attr}_tokens_per_s") for p in remote_ok],
                            yerr=[getattr(p, f"{attr}_stdev") or 0.0 for p in remote_ok], marker="o", capsize=3,
                            label="RPC: layers sent to rpc-server")
            for bad in (p for p in offload.points if p.status != "ok"):
                ax.axvline(bad.n_gpu_layers, color="red", alpha=0.4, linestyle=":")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layers (n_gpu_layers)")
            ax.set_ylabel("tokens/s")
            ax.set_ylim(bottom=0)
            ax.set_title(label)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)

    return save_side_by_side(title, paths, draw)


RPC_OFFLOAD = RpcOffloadUnit()
