"""The yardstick's gap taken apart (issue 35, part 3): where the binding's generation loses time against llama-bench.

On an H200 verify's binding measured generation 4-6 % below llama-bench at 3, 7 and 10 layers in one run, and the
signs flipped between machines. The hypothesis tested here: per-token work on the Python side of the binding (ctypes
calls, a batch built per token, reading n_vocab logits, the high-level loop and its sampling), and for prompts the
batch sizes Llama() uses by default. One run measures, in interleaved rounds (the order of the sides and of the
variants changes every round, so drift falls on all of them):

    tg (single-token decodes, as llama-bench's tgN):
      llama-bench         llama.cpp's own C++ loop (llama_batch_get_one, one token at a time)
      verify              the binding as verify measures it: child_scripts/probe.py's Session.generate
      low-level           llama_decode of a one-token llama_batch (llama_batch_init), llama_synchronize; nothing else,
                          with the time spent inside those two C calls recorded apart from the loop's
      low-level+logits    the same, and the n_vocab logits copied into a numpy array every token
      Llama.eval          llama_cpp.Llama(...).eval([token]), one token at a time (the high-level path)
      Llama.generate      Llama.generate with greedy sampling (llama.cpp's sampler chain, called through the binding)
    both:
      llama-bench on the wheel's libraries   the same llama-bench with the wheel's own libllama and libggml*
                          loaded in place of those built beside it: a gap between the two llama-bench sides is the
                          libraries' (how each was built), a gap from there to the binding is the caller's
    pp (one prompt of N tokens):
      llama-bench         -b 2048 -ub 512 (its defaults)
      verify              Session.prompt with the same batches (what verify passes)
      Llama() batches     Session.prompt with n_batch 512, n_ubatch 512 (what Llama() uses when given nothing)
      Llama.eval          llama_cpp.Llama(...).eval(prompt)

Every side gets the same threads, flash attention (on by default: the value llama-bench's -fa auto resolves to on
these models, and one Llama() can be given) and llama-bench's CPU thread pool (poll 50), as verify's yardstick does.

It writes one JSON (commit, machine, every variant's samples and medians, the analysis) and prints a table naming
the share of each gap every measured component explains; what is left is printed as unexplained.

    python benchmarks/yardstick_gap.py --run RUN_DIR [--layers 3,7,10,17] [--time-limit-s 150] [--out FILE]
    python benchmarks/yardstick_gap.py --site SITE --llama-bench BINARY --model GGUF [...]

RUN_DIR is a playbook run folder whose verify ran with verify.llama_bench (the installed wheel, llama-bench and the
model are read from its verify-attempt-N.json); run it with the playbook importable (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_DIR = ROOT / "playbook" / "child_scripts"
RESULT_PREFIX = "YARDSTICK_GAP "

TG_VARIANTS = ("verify", "low-level", "low-level+logits", "Llama.eval", "Llama.generate")
PP_VARIANTS = ("verify", "Llama() batches", "Llama.eval")
BENCH = "llama-bench"
BENCH_ON_WHEEL = "llama-bench on the wheel's libraries"
DESCRIPTIONS = {
    BENCH: "llama.cpp's llama-bench (C++ loop), same threads, flash attention, batches and thread pool",
    BENCH_ON_WHEEL: "the same llama-bench binary with the wheel's libllama/libggml* loaded instead of its own "
                    "(LD_LIBRARY_PATH; ldd's answer recorded): the libraries against the caller",
    "verify": "child_scripts/probe.py Session (what verify measures): llama_batch_get_one per token",
    "low-level": "llama_decode of a one-token llama_batch and llama_synchronize, nothing else per token",
    "low-level+logits": "low-level, and the n_vocab logits copied into numpy every token",
    "Llama.eval": "llama_cpp.Llama(...).eval(tokens): the high-level path, Llama()'s batches",
    "Llama.generate": "llama_cpp.Llama(...).generate with greedy sampling (the sampler chain through the binding)",
    "Llama() batches": "Session.prompt with n_batch 512 and n_ubatch 512, Llama()'s defaults",
}


# ---------------------------------------------------------------- the child: runs with the built wheel on its path


def child(spec: dict) -> dict:
    """Every binding variant at every layer count in this process, in the order ``spec`` gives."""
    sys.path.insert(0, str(PROBE_DIR))
    import llama_cpp  # first: numpy before it once crashed the model load (docs/measurements.md)
    import probe

    settings = {**probe.DEFAULT_SETTINGS, "flash_attn": spec["flash_attn"], "poll": spec["poll"], "n_batch": 2048,
                "n_ubatch": 512}
    out: dict[str, dict] = {}
    for ngl in spec["layers"]:
        model = probe.load_model(spec["model"], ngl, settings)
        llm = llama_cpp.Llama(spec["model"], n_gpu_layers=ngl, n_threads=spec["threads"],
                              n_threads_batch=spec["threads"], n_ctx=max(spec["n_prompt"], spec["n_gen"]) + 8,
                              flash_attn=spec["flash_attn"] == "on", verbose=False)
        pool = probe.CpuThreadpool(llm._ctx.ctx, spec["threads"], spec["poll"]) if spec["poll"] is not None else None
        variants = Variants(spec, settings, ngl, model, llm)
        out[str(ngl)] = {}
        for variant in spec["order"]:
            out[str(ngl)].update(variants.measure(variant))
        if pool is not None:
            pool.free()
        del llm, variants
        llama_cpp.llama_model_free(model)
    return out


class Variants:
    """The binding's ways of running one layer count: each returns seconds per repetition (after one warm-up)."""

    def __init__(self, spec: dict, settings: dict, ngl: int, model, llm):
        import probe

        self.spec, self.settings, self.ngl, self.model, self.llm, self.probe = spec, settings, ngl, model, llm, probe
        self.n_gen, self.n_prompt = spec["n_gen"], spec["n_prompt"]
        self.bos = llm.token_bos()
        self.prompt = [self.bos] + [(7 * i) % llm.n_vocab() for i in range(1, self.n_prompt)]

    def timed(self, run) -> list:
        run()  # warm-up, as llama-bench
        return [run() for _ in range(self.spec["repetitions"])]

    def session(self, n_ctx: int, n_batch: int = 2048, n_ubatch: int = 512):
        return self.probe.Session(self.spec["model"], self.ngl, self.spec["threads"], n_ctx, n_batch,
                                  settings=self.settings, n_ubatch=n_ubatch, model=self.model)

    def measure(self, variant: str) -> dict[str, list]:
        """``{variant: seconds}``, and for the lean loops ``{variant:inside: seconds inside the C calls}``."""
        kind, name = variant.split(":", 1)
        if name in ("verify", "Llama() batches") or name.startswith("low-level"):
            n_ctx = self.n_gen if kind == "tg" else self.n_prompt
            session = self.session(n_ctx, 512, 512) if name == "Llama() batches" else self.session(n_ctx)
            try:
                if name.startswith("low-level"):
                    pairs = self.timed(lambda: self.lean_generate(session, name.endswith("logits")))
                    return {variant: [t for t, _ in pairs], variant + ":inside": [i for _, i in pairs]}
                run = session.generate if kind == "tg" else session.prompt
                return {variant: self.timed(lambda: run(self.n_gen if kind == "tg" else self.n_prompt))}
            finally:
                session.close()
        if variant == "tg:Llama.eval":
            return {variant: self.timed(lambda: self.eval_tokens([self.bos] * self.n_gen))}
        if variant == "tg:Llama.generate":
            return {variant: self.timed(self.generate)}
        if variant == "pp:Llama.eval":
            return {variant: self.timed(lambda: self.eval_tokens([self.prompt]))}
        raise ValueError(variant)

    def lean_generate(self, session, read_logits: bool) -> tuple[float, float]:
        """One-token llama_batch decodes: (seconds, seconds inside llama_decode and llama_synchronize)."""
        import llama_cpp
        import numpy as np

        ctx, n_vocab = session.ctx, session.n_vocab
        batch = llama_cpp.llama_batch_init(1, 0, 1)
        batch.n_tokens, batch.n_seq_id[0], batch.seq_id[0][0], batch.logits[0] = 1, 1, 0, 1
        session.clear()
        token, inside = session.bos, 0.0
        started = time.perf_counter()
        for position in range(self.n_gen):
            batch.token[0], batch.pos[0] = token, position
            entered = time.perf_counter()
            if llama_cpp.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            llama_cpp.llama_synchronize(ctx)
            inside += time.perf_counter() - entered
            if read_logits:
                np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
            token = session.rng.randrange(n_vocab)
        total = time.perf_counter() - started
        llama_cpp.llama_batch_free(batch)
        return total, inside

    def eval_tokens(self, chunks: list) -> float:
        """Llama.eval of each chunk (a token, or the whole prompt as one list) from an empty cache."""
        self.llm.reset()
        started = time.perf_counter()
        for chunk in chunks:
            self.llm.eval(chunk if isinstance(chunk, list) else [chunk])
        return time.perf_counter() - started

    def generate(self) -> float:
        self.llm.reset()
        stream = self.llm.generate([self.bos], top_k=1, temp=0.0, reset=True)
        started = time.perf_counter()
        for _ in range(self.n_gen):
            next(stream)
        elapsed = time.perf_counter() - started
        stream.close()
        return elapsed


# ---------------------------------------------------------------- the parent: rounds, llama-bench, the analysis


@dataclass
class Sources:
    site: str
    llama_bench: str
    model: str
    threads: int


def sources_of_run(run: Path) -> Sources:
    """The installed wheel, llama-bench and the model of a run folder's last verify (verify.llama_bench)."""
    from playbook.runfolder.layout import Layout
    from playbook.serialization import from_dict
    from playbook.verify.result import VerifyResult

    layout = Layout(run)
    attempt = layout.latest_attempt("verify")
    if not attempt:
        raise SystemExit(f"{run} has no verify-attempt-N.json")
    result = from_dict(VerifyResult, json.loads(layout.verify_result(attempt).read_text()))
    from playbook.verify.units.llama_bench import LLAMA_BENCH
    from playbook.verify.units.model_file import MODEL_FILE

    bench, model = result.measured(LLAMA_BENCH), result.measured(MODEL_FILE)
    if bench is None or not bench.binary or model is None:
        raise SystemExit(f"{run}'s verify built no llama-bench (verify.llama_bench: true)")
    return Sources(result.site_dir, bench.binary, str(model.path), result.threads)


def run_child(spec: dict, site: str, timeout_s: float) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], env=env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX)), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"the binding's child exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(line[len(RESULT_PREFIX):])


def wheel_library_env(site: str) -> dict[str, str]:
    """The environment that makes llama-bench load the wheel's libllama and libggml* instead of its own: the wheel's
    folder first on LD_LIBRARY_PATH, which the loader searches before a binary's RUNPATH (CMake writes RUNPATH;
    :func:`resolved_libraries` shows whether it worked). The sonames are the same (libllama.so.0, libggml*.so.0)."""
    lib_dir = Path(site) / "llama_cpp" / "lib"
    return {"LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(lib_dir), os.environ.get("LD_LIBRARY_PATH", "")) if p)}


def resolved_libraries(binary: str, env: dict[str, str]) -> dict[str, str]:
    """ldd's answer for the llama and ggml libraries a binary loads under ``env``: {soname: path}."""
    proc = subprocess.run(["ldd", binary], env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
                          check=False)
    found = {}
    for line in proc.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if Path(name).name.startswith(("libllama", "libggml")):
            found[Path(name).name] = rest.split(" (")[0].strip() if rest else name.split(" (")[0]
    return found


def run_llama_bench_round(src: Sources, args: argparse.Namespace, timeout_s: float,
                          env: dict[str, str] | None = None) -> dict[str, dict[str, list]]:
    """One llama-bench process over every layer count: {ngl: {"pp"|"tg": [tokens/s per repetition]}}."""
    from playbook.verify.settings import BenchSettings
    from playbook.verify.yardsticks import llama_bench_command

    settings = BenchSettings(threads=src.threads, flash_attn=args.flash_attn, poll=args.poll)
    command = llama_bench_command(Path(src.llama_bench), Path(src.model), args.layers, settings, args.n_prompt,
                                  args.n_gen, args.repetitions)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"llama-bench exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    rows = json.loads(proc.stdout[proc.stdout.find("["):])
    out: dict[str, dict[str, list]] = {}
    for row in rows:
        test = "pp" if row.get("n_prompt", 0) > 0 and row.get("n_gen", 0) == 0 else "tg"
        out.setdefault(str(row["n_gpu_layers"]), {})[test] = list(row.get("samples_ts") or [row["avg_ts"]])
    return out


def variant_order(round_number: int) -> list[str]:
    """The binding's variants, rotated by one every round."""
    order = [f"tg:{v}" for v in TG_VARIANTS] + [f"pp:{v}" for v in PP_VARIANTS]
    shift = round_number % len(order)
    return order[shift:] + order[:shift]


def measure(src: Sources, args: argparse.Namespace, wheel_env: dict[str, str] | None) -> tuple[dict, int]:
    """Interleaved rounds until the next would pass --time-limit-s: {variant: {ngl: {test: {samples, inside?}}}}.
    ``wheel_env`` (when the swap of libraries works) adds llama-bench on the wheel's libraries as a third side."""
    samples: dict = {}
    sides = ["binding", BENCH] + ([BENCH_ON_WHEEL] if wheel_env else [])
    started, rounds, round_s = time.monotonic(), 0, 0.0
    while rounds < args.rounds and (rounds == 0 or time.monotonic() - started + round_s <= args.time_limit_s):
        began = time.monotonic()
        for side in sides[rounds % len(sides):] + sides[:rounds % len(sides)]:
            if side in (BENCH, BENCH_ON_WHEEL):
                got = run_llama_bench_round(src, args, args.time_limit_s + 120,
                                            wheel_env if side == BENCH_ON_WHEEL else None)
                add_bench_samples(samples, got, side)
            else:
                spec = {"model": src.model, "layers": args.layers, "threads": src.threads, "poll": args.poll,
                        "n_prompt": args.n_prompt, "n_gen": args.n_gen, "repetitions": args.repetitions,
                        "flash_attn": args.flash_attn, "order": variant_order(rounds)}
                add_child_samples(samples, run_child(spec, src.site, args.time_limit_s + 120), args)
        rounds += 1
        round_s = max(round_s, time.monotonic() - began)
        print(f"round {rounds}: {time.monotonic() - began:.0f} s", file=sys.stderr)
    return samples, rounds


def add_bench_samples(samples: dict, got: dict, side: str = BENCH) -> None:
    """One llama-bench process's rates: one sample per round (the median of its repetitions)."""
    for ngl, tests in got.items():
        for test, rates in tests.items():
            entry = samples.setdefault(side, {}).setdefault(ngl, {}).setdefault(test, {"samples": []})
            entry["samples"].append(statistics.median(rates))


def add_child_samples(samples: dict, got: dict, args: argparse.Namespace) -> None:
    """A child's seconds as tokens/s, one sample per round (the median of its repetitions)."""
    for ngl, point in got.items():
        for key, seconds in point.items():
            if key.endswith(":inside"):
                continue
            test, variant = key.split(":", 1)
            n_tokens = args.n_gen if test == "tg" else args.n_prompt
            entry = samples.setdefault(variant, {}).setdefault(ngl, {}).setdefault(test, {"samples": []})
            entry["samples"].append(statistics.median(n_tokens / s for s in seconds))
            if key + ":inside" in point:  # the loop's time outside llama_decode/llama_synchronize, per repetition
                outside = [(total - inside) * 1000 / n_tokens for total, inside in zip(
                    seconds, point[key + ":inside"], strict=True)]
                entry.setdefault("python_ms_per_token", []).append(statistics.median(outside))


# ---------------------------------------------------------------- the analysis (pure)


@dataclass
class Component:
    name: str
    ms: float  # per token (tg) or per prompt (pp)


@dataclass
class Gap:
    layers: int
    test: str
    variant: str
    gap_ms: float  # the variant's time minus llama-bench's: > 0 is the binding slower
    noise_ms: float  # half the spread of the two sides' round medians: a gap within it is no gap
    components: list[Component] = field(default_factory=list)

    @property
    def unexplained_ms(self) -> float:
        return self.gap_ms - sum(c.ms for c in self.components)


def ms(rate: float, test: str, n_prompt: int) -> float:
    """Milliseconds per token (tg) or per prompt (pp) at ``rate`` tokens/s."""
    return 1000 / rate * (n_prompt if test == "pp" else 1)


def medians(samples: dict) -> dict[str, dict[str, dict[str, float]]]:
    return {v: {ngl: {t: statistics.median(e["samples"]) for t, e in tests.items()} for ngl, tests in points.items()}
            for v, points in samples.items()}


def explain(samples: dict, n_prompt: int) -> list[Gap]:
    """Each variant's gap to llama-bench, split into what a nested variant measured; the rest is unexplained."""
    med = medians(samples)
    return [gap for ngl in med.get(BENCH, {}) for gap in Layer(samples, med, ngl, n_prompt).gaps()]


@dataclass
class Layer:
    """One layer count's medians, in milliseconds per token (tg) or per prompt (pp)."""

    samples: dict
    med: dict
    ngl: str
    n_prompt: int

    def t(self, variant: str, test: str) -> float | None:
        rate = self.med.get(variant, {}).get(self.ngl, {}).get(test)
        return ms(rate, test, self.n_prompt) if rate else None

    def noise(self, variant: str, test: str) -> float:
        """Half the spread of llama-bench's round medians plus half the variant's."""
        rounds = [self.samples[v][self.ngl][test]["samples"] for v in (BENCH, variant)]
        return sum(ms(min(r), test, self.n_prompt) - ms(max(r), test, self.n_prompt) for r in rounds if r) / 2

    def libraries(self, test: str) -> list[Component]:
        """llama-bench on the wheel's libraries against llama-bench on its own: what the two builds differ by."""
        bench, swapped = self.t(BENCH, test), self.t(BENCH_ON_WHEEL, test)
        if bench is None or swapped is None:
            return []
        return [Component("the libraries: llama-bench on the wheel's libraries against on its own", swapped - bench)]

    def gaps(self) -> list[Gap]:
        return self.tg_gaps() + self.pp_gaps()

    def tg_gaps(self) -> list[Gap]:
        bench, lean, eval_ = self.t(BENCH, "tg"), self.t("low-level", "tg"), self.t("Llama.eval", "tg")
        outside = self.samples.get("low-level", {}).get(self.ngl, {}).get("tg", {}).get("python_ms_per_token")
        if bench is None or lean is None:
            return []
        shared_parts = self.libraries("tg") + ([Component(
            "Python side of the lean loop (its time outside llama_decode/llama_synchronize)",
            statistics.median(outside))] if outside else [])
        gaps = []
        for variant in TG_VARIANTS:
            own = self.t(variant, "tg")
            if own is None:
                continue
            parts = list(shared_parts)
            if variant == "Llama.generate" and eval_ is not None:
                parts += [Component("Llama.eval's own work per token against the lean loop", eval_ - lean),
                          Component("sampling and generate's loop (Llama.generate against Llama.eval)", own - eval_)]
            elif variant != "low-level":
                parts.append(Component(f"{variant} against the lean loop", own - lean))
            gaps.append(Gap(int(self.ngl), "tg", variant, own - bench, self.noise(variant, "tg"), parts))
        return gaps

    def pp_gaps(self) -> list[Gap]:
        bench, matched = self.t(BENCH, "pp"), self.t("verify", "pp")
        if bench is None or matched is None:
            return []
        default_batches = self.t("Llama() batches", "pp") or matched
        gaps = []
        for variant in PP_VARIANTS:
            own = self.t(variant, "pp")
            if own is None:
                continue
            parts = self.libraries("pp")
            if variant != "verify":
                parts.append(Component("n_batch 512 (Llama()) against 2048, n_ubatch 512 both", default_batches - matched))
            if variant == "Llama.eval":
                parts.append(Component("Llama.eval against Session.prompt with the same batches", own - default_batches))
            gaps.append(Gap(int(self.ngl), "pp", variant, own - bench, self.noise(variant, "pp"), parts))
        return gaps


def describe(gap: Gap) -> str:
    """One line: the gap, each component's share of it, and the unexplained rest (or that there is no gap)."""
    unit = "ms/token" if gap.test == "tg" else "ms/prompt"
    head = f"{gap.gap_ms:+.3f} {unit}"
    if abs(gap.gap_ms) <= gap.noise_ms:
        return f"{head}: within the spread between rounds (±{gap.noise_ms:.3f}): no gap to explain"
    shares = [f"{c.name}: {c.ms:+.3f} ({c.ms / gap.gap_ms:.0%})" for c in gap.components]
    rest = gap.unexplained_ms
    tail = (f"unexplained: {rest:+.3f} ({rest / gap.gap_ms:.0%})" if abs(rest) > gap.noise_ms
            else f"rest {rest:+.3f} within the spread")
    return "; ".join([head, *shares, tail])


def table(data: dict) -> str:
    med = data["medians"]
    title = (f"{data['machine'].get('gpu') or data['machine']['cpu']}, {data['rounds']} interleaved rounds, "
             f"pp{data['n_prompt']} tg{data['n_gen']}, {data['threads']} threads, flash attention {data['flash_attn']}")
    lines = [title, "", "| layers | test | variant | t/s (median) | vs llama-bench | gap to llama-bench, and its parts |",
             "|---:|---|---|---:|---:|---|"]
    gaps = {(g["layers"], g["test"], g["variant"]): g for g in data["gaps"]}
    for ngl in sorted(med.get(BENCH, {}), key=int):
        for test, variants in (("tg", TG_VARIANTS), ("pp", PP_VARIANTS)):
            base = med[BENCH][ngl].get(test)
            lines.append(f"| {ngl} | {test} | {BENCH} | {base:.1f} | 1.000 | |" if base else "")
            for variant in (BENCH_ON_WHEEL, *variants):
                rate = med.get(variant, {}).get(ngl, {}).get(test)
                gap = gaps.get((int(ngl), test, variant))
                if rate and base:
                    text = describe(gap_from_dict(gap)) if gap else ""
                    lines.append(f"| {ngl} | {test} | {variant} | {rate:.1f} | {rate / base:.3f} | {text} |")
    return "\n".join(line for line in lines if line is not None)


def gap_from_dict(data: dict) -> Gap:
    return Gap(data["layers"], data["test"], data["variant"], data["gap_ms"], data["noise_ms"],
               [Component(**c) for c in data["components"]])


# ---------------------------------------------------------------- reading an archived run


@dataclass
class GapRun:
    commit: str
    machine: dict
    rounds: int
    layers: list[int]
    variants: dict  # {variant: {ngl: {test: {"samples": [...], "median": x}}}}
    gaps: list[Gap]


def read_archive(path: Path) -> GapRun:
    data = json.loads(Path(path).read_text())
    return GapRun(data["commit"], data["machine"], data["rounds"], data["layers"], data["variants"],
                  [gap_from_dict(g) for g in data["gaps"]])


# ---------------------------------------------------------------- main


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        gpu = ""
    return {"host": socket.gethostname(), "cpu": cpu, "cores": os.cpu_count(), "gpu": gpu,
            "python": platform.python_version()}


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30, check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--run", type=Path, help="a run folder whose verify built llama-bench")
    parser.add_argument("--site"), parser.add_argument("--llama-bench"), parser.add_argument("--model")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--layers", default="3,7,10,17", help="layer counts (default: 3,7,10,17)")
    parser.add_argument("--rounds", type=int, default=5, help="at most this many interleaved rounds (default 5)")
    parser.add_argument("--time-limit-s", type=float, default=150, help="no round starts that would end after this")
    parser.add_argument("--repetitions", type=int, default=2, help="timed repetitions per process (default 2)")
    parser.add_argument("--n-prompt", type=int, default=512)
    parser.add_argument("--n-gen", type=int, default=64)
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on")
    parser.add_argument("--poll", type=int, default=50, help="the CPU thread pool's polling (llama-bench's default)")
    parser.add_argument("--commit", default="", help="the playbook's commit (default: git rev-parse HEAD)")
    parser.add_argument("--out", type=Path, help="the JSON (default: yardstick-gap-<host>-<time>.json here)")
    args = parser.parse_args(argv)
    if args.child:
        print(RESULT_PREFIX + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    args.layers = [int(n) for n in args.layers.split(",")]
    if args.run:
        src = sources_of_run(args.run)
    elif args.site and args.llama_bench and args.model:
        src = Sources(args.site, args.llama_bench, args.model, args.threads or os.cpu_count() or 1)
    else:
        parser.error("give --run RUN_DIR, or --site, --llama-bench and --model")
    if args.threads:
        src.threads = args.threads
    wheel_env = wheel_library_env(src.site)
    libraries = {"own": resolved_libraries(src.llama_bench, {}), "swapped": resolved_libraries(src.llama_bench, wheel_env)}
    wheel_lib = str(Path(src.site) / "llama_cpp" / "lib")
    in_wheel = {name: path for name, path in libraries["swapped"].items() if (Path(wheel_lib) / name).exists()}
    swapped = "libllama.so.0" in in_wheel and all(path.startswith(wheel_lib) for path in in_wheel.values())
    whose = "the wheel's" if swapped else "NOT the wheel's: that side is left out"
    print(f"llama-bench's libraries: own {libraries['own']}; swapped {libraries['swapped']} ({whose})", file=sys.stderr)
    samples, rounds = measure(src, args, wheel_env if swapped else None)
    for points in samples.values():
        for tests in points.values():
            for entry in tests.values():
                entry["median"] = statistics.median(entry["samples"])
    data = {"experiment": "yardstick-gap", "commit": args.commit or commit(), "machine": machine(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sources": src.__dict__,
            "threads": src.threads, "poll": args.poll, "flash_attn": args.flash_attn, "n_prompt": args.n_prompt,
            "n_gen": args.n_gen, "repetitions": args.repetitions, "rounds": rounds, "layers": args.layers,
            "descriptions": DESCRIPTIONS, "libraries": libraries,
            "variants": samples, "medians": medians(samples),
            "gaps": [g.__dict__ | {"components": [c.__dict__ for c in g.components], "unexplained_ms": g.unexplained_ms}
                     for g in explain(samples, args.n_prompt)]}
    out = args.out or Path(f"yardstick-gap-{socket.gethostname()}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json")
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
