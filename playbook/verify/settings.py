"""The runtime settings of one throughput measurement, passed identically to the binding's child
(``child_scripts/probe.py bench``) and to ``llama-bench``, and recorded beside every number.

The defaults are llama-bench's own (tools/llama-bench/llama-bench.cpp, ``cmd_params_defaults``):
a measurement with them is the measurement llama-bench makes when given only ``-ngl -p -n -r -t``.
:data:`LLAMA_CLASS_DEFAULTS` are what ``llama_cpp.Llama(...)`` uses when a user passes nothing
(llama_cpp/llama.py 0.3.36): flash attention off, n_batch 512, the model memory-mapped, and no thread pool of
its own: llama.cpp then makes one for each graph it computes on the CPU.

``poll`` is the one setting where the two differ by design. llama-bench always attaches a thread pool to its
context (``llama_attach_threadpool``) whose idle workers spin for a while (``--poll``, 50 by default) before they
sleep; the binding's child attaches the same pool when ``poll`` is a number. With layers left on the CPU the spinning
workers compete with the thread that drives the GPU: on an H100, generation at 14 of 17 layers moved 1.28x between
``--poll 50`` and ``--poll 0``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from playbook.params import FlashAttn, KvTypeName, LoadMode

LLAMA_BENCH_POLL = 50  # llama-bench's --poll when none is given


@dataclass(frozen=True)
class BenchSettings:
    threads: int
    n_batch: int = 2048
    n_ubatch: int = 512
    flash_attn: FlashAttn = "auto"
    type_k: KvTypeName = "f16"
    type_v: KvTypeName = "f16"
    offload_kqv: bool = True
    load_mode: LoadMode = "auto"  # llama.cpp's load_mode: mmap, none (read into memory), auto
    # The CPU thread pool's polling level (0 to 100), as llama-bench's --poll; None: no pool attached (Llama()'s way).
    poll: int | None = LLAMA_BENCH_POLL
    # Environment variables the child and llama-bench get, e.g. (("GGML_CUDA_DISABLE_GRAPHS", "1"),).
    env: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BenchSettings:
        data = json.loads(text)
        data["env"] = tuple(tuple(pair) for pair in data.get("env", ()))
        return cls(**data)

    def replace(self, **changes: object) -> BenchSettings:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def llama_bench_args(self) -> list[str]:
        """The same settings as llama-bench arguments (llama-bench's names: -fa on|off|auto, -lm, -nkvo)."""
        return ["-t", str(self.threads), "-b", str(self.n_batch), "-ub", str(self.n_ubatch), "-fa", self.flash_attn,
                "-ctk", self.type_k, "-ctv", self.type_v, "-nkvo", "0" if self.offload_kqv else "1",
                "-lm", self.load_mode, "--poll", str(self.bench_poll)]

    @property
    def bench_poll(self) -> int:
        """The polling llama-bench runs with: it always attaches a pool, so "none" becomes its default."""
        return LLAMA_BENCH_POLL if self.poll is None else self.poll

    def as_llama_bench_runs_it(self) -> BenchSettings:
        """These settings as llama-bench really applies them (``poll`` None becomes its default)."""
        return self.replace(poll=self.bench_poll)

    def csv_fields(self) -> dict[str, object]:
        """The columns the throughput CSV records beside each measurement."""
        return {"threads": self.threads, "n_batch": self.n_batch, "n_ubatch": self.n_ubatch,
                "flash_attn": self.flash_attn, "type_k": self.type_k, "type_v": self.type_v,
                "offload_kqv": self.offload_kqv, "load_mode": self.load_mode,
                "poll": "none" if self.poll is None else self.poll,
                "env": " ".join(f"{k}={v}" for k, v in self.env)}

    def llama_kwargs(self, n_gpu_layers: int) -> dict[str, str]:
        """``Llama(...)`` keyword arguments as source text (``type_k=llama_cpp.GGML_TYPE_Q8_0``).
        ``Llama`` has no "auto" flash attention: auto is written as llama.cpp resolves it off."""
        kwargs = {"n_gpu_layers": str(n_gpu_layers), "n_threads": str(self.threads),
                  "n_threads_batch": str(self.threads), "n_batch": str(self.n_batch), "n_ubatch": str(self.n_ubatch),
                  "flash_attn": str(self.flash_attn == "on"), "offload_kqv": str(self.offload_kqv),
                  "use_mmap": str(self.load_mode != "none")}
        for name in ("type_k", "type_v"):
            kwargs[name] = f"llama_cpp.GGML_TYPE_{getattr(self, name).upper()}"
        return kwargs


def llama_class_defaults(threads: int) -> BenchSettings:
    """What ``Llama(model_path, n_gpu_layers=N)`` runs with (0.3.36): flash_attn=False, n_batch=512,
    n_ubatch=512, f16 KV cache, offload_kqv=True, use_mmap=True. ``threads`` is the caller's (Llama's own
    default is half the cores)."""
    return BenchSettings(threads=threads, n_batch=512, n_ubatch=512, flash_attn="off", load_mode="mmap", poll=None)


def threadpool_lines(settings: BenchSettings) -> list[str]:
    """Python lines that attach the CPU thread pool ``settings`` measured with to a ``Llama`` named ``llm``
    (``Llama`` has no argument for it; llama.cpp's API does). Empty when no pool was attached."""
    if settings.poll is None:
        return []
    return [
        "import ctypes, pathlib",
        "lib = pathlib.Path(llama_cpp.__file__).parent / 'lib'",
        "ggml_cpu = ctypes.CDLL(str(next(lib.glob('*ggml-cpu*'))))",
        "class ThreadpoolParams(ctypes.Structure):  # ggml.h: struct ggml_threadpool_params",
        "    _fields_ = [('cpumask', ctypes.c_bool * 512), ('n_threads', ctypes.c_int), ('prio', ctypes.c_int),",
        "                ('poll', ctypes.c_uint32), ('strict_cpu', ctypes.c_bool), ('paused', ctypes.c_bool)]",
        f"params = ThreadpoolParams(n_threads={settings.threads}, poll={settings.poll})",
        "ggml_cpu.ggml_threadpool_new.restype = ctypes.c_void_p",
        "pool = ggml_cpu.ggml_threadpool_new(ctypes.byref(params))",
        "llama_cpp.llama_cpp._lib.llama_attach_threadpool.argtypes = [ctypes.c_void_p] * 3",
        "llama_cpp.llama_cpp._lib.llama_attach_threadpool(llm._ctx.ctx, pool, pool)",
    ]


def differences(ours: BenchSettings, theirs: BenchSettings) -> dict[str, tuple[object, object]]:
    """The settings two measurements did not share: ``{name: (ours, theirs)}``."""
    a, b = dataclasses.asdict(ours), dataclasses.asdict(theirs)
    return {name: (a[name], b[name]) for name in a if a[name] != b[name]}
