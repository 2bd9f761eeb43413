"""Runs inside a child process that verify starts with the built wheel on its path.

Deliberately standalone: it imports nothing from ``playbook`` but its sibling ``dll_directories``
(itself standalone), and nothing before
``llama_cpp`` (a segfault was seen when numpy was imported first), so that what it
measures is the wheel alone. It prints one line ``PLAYBOOK_RESULT {json}`` at the end;
llama.cpp's own log goes to stderr, which the parent archives and diagnoses.

Usage: python child.py probe
       python child.py bench MODEL NGL THREADS N_PROMPT N_GEN REPETITIONS [SETTINGS_JSON [DEPTHS]]
       python child.py bench MODEL NGL,NGL,... ...   (every layer count in this one process, as llama-bench)
       python child.py logits MODEL NGL THREADS N_POSITIONS OUT_FILE OP_OFFLOAD

On Windows, Python 3.8+ ignores PATH when it looks for a DLL's dependencies: the folders named in
``PLAYBOOK_DLL_DIRECTORIES`` (os.pathsep-separated; the plan's ``dll_directories``, e.g. CUDA's bin)
are added with ``os.add_dll_directory`` before ``llama_cpp`` is imported.

With ``PLAYBOOK_RPC_SERVERS`` set (comma-separated host:port), every mode first registers those rpc-server
processes as devices through the RPC backend's registry functions, as llama.cpp's own ``--rpc`` does
(llama-cpp-python 0.3.36's binding has no ``rpc_servers`` argument): n_gpu_layers then sends layers to them.
"""

import ctypes
import enum
import json
import os
import random
import statistics
import sys
import time

from dll_directories import DLL_DIRECTORIES_VARIABLE, add_dll_directories  # a sibling: this runs as a script

DLL_ADDED, DLL_MISSING, _DLL_HANDLES = add_dll_directories(
    os.environ.get(DLL_DIRECTORIES_VARIABLE), getattr(os, "add_dll_directory", None)
)

import llama_cpp

RESULT_PREFIX = "PLAYBOOK_RESULT "
RPC_SERVERS_VARIABLE = "PLAYBOOK_RPC_SERVERS"


def emit(result):
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


def library_file():
    """The llama.cpp library the binding loaded (``llama_cpp.llama_cpp._lib``, a ctypes.CDLL whose
    ``_name`` is the path it was loaded from: ``$LLAMA_CPP_LIB_PATH/libllama.so`` or the wheel's ``lib/``)."""
    lib = getattr(getattr(llama_cpp, "llama_cpp", None), "_lib", None)
    name = getattr(lib, "_name", None)
    return os.path.abspath(name) if isinstance(name, str) and os.path.sep in name else name


# The C++, GCC and OpenMP runtimes: one of another build loaded first is a known cause of crashes at model load.
RUNTIME_PREFIXES = ("libstdc++", "libgcc_s", "libgomp", "libomp", "libiomp", "libc++")


def mapped_libraries(prefixes=("libllama", "libggml", "llama", "ggml")):
    """Libraries mapped into this process whose names start with ``prefixes``, from /proc/self/maps (Linux
    only): by default llama.cpp's and ggml's, which shows where the library's own dependencies came from too."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    return sorted(p for p in paths if os.path.basename(p).startswith(prefixes))


def probe():
    return {
        "version": llama_cpp.__version__,
        "module": llama_cpp.__file__,
        "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "system_info": llama_cpp.llama_print_system_info().decode(errors="replace"),
        "library": library_file(),
        "mapped_libraries": mapped_libraries(),
        "runtime_libraries": mapped_libraries(RUNTIME_PREFIXES),
        "lib_path_variable": os.environ.get("LLAMA_CPP_LIB_PATH"),
        "dll_directories": {"added": DLL_ADDED, "missing": DLL_MISSING},
        "devices": registered_devices(),
    }


def registered_devices():
    """Every device ggml's registry holds (CPU, BLAS, CUDA0, RPC0[...]), as "name: description"; None where the
    ggml library cannot be found beside llama.cpp's."""
    try:
        ggml = ggml_library()
    except (RuntimeError, OSError):
        return None
    return device_list(ggml, describe=True)


def device_list(ggml, describe=False):
    """The devices ggml's registry holds now: their names, or "name: description" with ``describe``."""
    ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
    ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
    ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(ggml, name).restype = ctypes.c_char_p
        getattr(ggml, name).argtypes = [ctypes.c_void_p]
    devices = []
    for i in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(i)
        name = ggml.ggml_backend_dev_name(device).decode(errors="replace")
        devices.append(f"{name}: {ggml.ggml_backend_dev_description(device).decode(errors='replace')}" if describe
                       else name)
    return devices


# llama-bench's defaults (tools/llama-bench/llama-bench.cpp); the parent passes every one explicitly.
DEFAULT_SETTINGS = {"n_batch": 2048, "n_ubatch": 512, "flash_attn": "auto", "type_k": "f16", "type_v": "f16",
                    "offload_kqv": True, "load_mode": "auto", "poll": 50, "env": []}
GGML_MAX_N_THREADS = 512  # ggml.h


class ThreadpoolParams(ctypes.Structure):
    """ggml.h's struct ggml_threadpool_params; all zeros but n_threads and poll is ggml_threadpool_params_default."""

    _fields_ = [("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS), ("n_threads", ctypes.c_int), ("prio", ctypes.c_int),
                ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool)]


class CpuThreadpool:
    """The CPU thread pool llama-bench attaches to its context (``ggml_threadpool_new`` with ``poll``), attached
    the same way: ``llama_attach_threadpool`` (which the binding does not wrap) on the library the binding loaded."""

    def __init__(self, ctx, threads, poll):
        llama = llama_cpp.llama_cpp._lib
        folder = os.path.dirname(library_file() or "")
        names = [n for n in sorted(os.listdir(folder)) if "ggml-cpu" in n] if folder else []
        if not names:
            raise RuntimeError(f"no ggml-cpu library beside {library_file()}: cannot attach a thread pool")
        self.ggml_cpu = ctypes.CDLL(os.path.join(folder, names[0]))
        self.ggml_cpu.ggml_threadpool_new.restype = ctypes.c_void_p
        self.ggml_cpu.ggml_threadpool_new.argtypes = [ctypes.POINTER(ThreadpoolParams)]
        self.ggml_cpu.ggml_threadpool_free.argtypes = [ctypes.c_void_p]
        llama.llama_attach_threadpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        llama.llama_detach_threadpool.argtypes = [ctypes.c_void_p]
        params = ThreadpoolParams(n_threads=threads, poll=poll)
        self.pool = self.ggml_cpu.ggml_threadpool_new(ctypes.byref(params))
        if not self.pool:
            raise RuntimeError(f"ggml_threadpool_new failed: {threads} threads, poll {poll}")
        self.ctx, self.llama, self.poll = ctx, llama, poll
        llama.llama_attach_threadpool(ctx, self.pool, self.pool)

    def free(self):
        self.llama.llama_detach_threadpool(self.ctx)
        self.ggml_cpu.ggml_threadpool_free(self.pool)


def _enum(prefix, name):
    wanted = prefix + name.upper()
    value = getattr(llama_cpp, wanted, None)
    if value is None:
        value = _enum_member(wanted)
    if value is None:
        raise ValueError(f"this llama_cpp has no {wanted}")
    return value


def _enum_member(wanted):
    """A value some bindings keep only as a member of an enum class, not as a module constant: JamePeng's fork
    (guide 002) has llama_load_mode.LLAMA_LOAD_MODE_AUTO, and GGMLType.GGML_TYPE_F16 in llama_cpp._ggml."""
    modules = [llama_cpp, getattr(llama_cpp, "llama_cpp", None), sys.modules.get("llama_cpp._ggml")]
    for module in filter(None, modules):
        for holder in list(vars(module).values()):
            if isinstance(holder, type) and issubclass(holder, enum.Enum) and wanted in holder.__members__:
                return int(holder[wanted])
    return None


def load_model(model_path, n_gpu_layers, settings):
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    load_mode = settings.get("load_mode", "auto")
    if hasattr(mparams, "load_mode"):
        mparams.load_mode = _enum("LLAMA_LOAD_MODE_", load_mode)
    elif load_mode != "auto":  # an older llama.cpp: use_mmap
        mparams.use_mmap = load_mode == "mmap"
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        raise RuntimeError(f"llama_model_load_from_file failed for {model_path}")
    return model


def context_params(threads, n_ctx, n_batch, n_ubatch, settings, op_offload=True):
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = n_batch
    cparams.n_ubatch = n_ubatch
    cparams.n_threads = threads
    cparams.n_threads_batch = threads
    cparams.flash_attn_type = _enum("LLAMA_FLASH_ATTN_TYPE_", {"on": "enabled", "off": "disabled"}.get(
        settings.get("flash_attn", "auto"), "auto"))
    cparams.type_k = _enum("GGML_TYPE_", settings.get("type_k", "f16"))
    cparams.type_v = _enum("GGML_TYPE_", settings.get("type_v", "f16"))
    cparams.offload_kqv = bool(settings.get("offload_kqv", True))
    # With op offload on (llama.cpp's default), large batches run on the GPU even with
    # n_gpu_layers=0: a CPU reference for logits must turn it off.
    cparams.op_offload = op_offload
    return cparams


class Session:
    """A model and a context loaded through the low-level API: the leanest path the binding offers."""

    def __init__(self, model_path, n_gpu_layers, threads, n_ctx, n_batch, op_offload=True, settings=None,
                 n_ubatch=None, model=None):
        llama_cpp.llama_backend_init()
        settings = settings or {}
        started = time.perf_counter()
        self.owns_model = model is None
        self.model = model or load_model(model_path, n_gpu_layers, settings)
        cparams = context_params(threads, n_ctx, n_batch, n_ubatch or min(n_batch, 512), settings, op_offload)
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        poll = settings.get("poll")
        self.threadpool = CpuThreadpool(self.ctx, threads, poll) if poll is not None else None
        self.load_s = time.perf_counter() - started
        self.n_ctx = n_ctx
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.n_layer = llama_cpp.llama_model_n_layer(self.model)
        self.bos = llama_cpp.llama_vocab_bos(self.vocab)
        self.n_batch = n_batch
        self.rng = random.Random(0)

    def clear(self):
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)

    def fill(self, depth):
        """As llama-bench's -d: ``depth`` tokens already in the KV cache, not timed."""
        tokens = self.random_tokens(depth) if depth else []
        for start in range(0, depth, self.n_batch):
            self.decode(tokens[start : start + self.n_batch])
        llama_cpp.llama_synchronize(self.ctx)

    def random_tokens(self, n):
        return [self.bos] + [self.rng.randrange(self.n_vocab) for _ in range(n - 1)]

    def decode(self, tokens):
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        status = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(array, len(tokens)))
        if status != 0:
            raise RuntimeError(f"llama_decode returned {status}")

    def prompt(self, n_prompt, depth=0):
        """As llama-bench's pp test: ``depth`` tokens in the cache, then the prompt in batches of n_batch."""
        self.clear()
        self.fill(depth)
        tokens = self.random_tokens(n_prompt)
        started = time.perf_counter()
        for start in range(0, n_prompt, self.n_batch):
            self.decode(tokens[start : start + self.n_batch])
        llama_cpp.llama_synchronize(self.ctx)
        return time.perf_counter() - started

    def generate(self, n_gen, depth=0):
        """As llama-bench's tg test: ``depth`` tokens in the cache, then single-token decodes."""
        self.clear()
        self.fill(depth)
        token = self.bos
        started = time.perf_counter()
        for _ in range(n_gen):
            self.decode([token])
            llama_cpp.llama_synchronize(self.ctx)
            token = self.rng.randrange(self.n_vocab)
        return time.perf_counter() - started

    def all_logits(self, tokens):
        """Logits of every position of ``tokens`` decoded as one batch, as raw float32 bytes."""
        self.clear()
        n = len(tokens)
        batch = llama_cpp.llama_batch_init(n, 0, 1)
        try:
            for i, token in enumerate(tokens):
                batch.token[i] = token
                batch.pos[i] = i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1
            batch.n_tokens = n
            status = llama_cpp.llama_decode(self.ctx, batch)
            if status != 0:
                raise RuntimeError(f"llama_decode returned {status}")
            llama_cpp.llama_synchronize(self.ctx)
            pointer = llama_cpp.llama_get_logits(self.ctx)
            return ctypes.string_at(pointer, n * self.n_vocab * ctypes.sizeof(ctypes.c_float))
        finally:
            llama_cpp.llama_batch_free(batch)

    def close(self):
        if self.threadpool:
            self.threadpool.free()
        llama_cpp.llama_free(self.ctx)
        if self.owns_model:
            llama_cpp.llama_model_free(self.model)


def summary(samples_s, tokens):
    rates = [tokens / s for s in samples_s]
    return {
        "tokens_per_s_median": statistics.median(rates),
        "tokens_per_s_mean": statistics.fmean(rates),
        "tokens_per_s_stdev": statistics.stdev(rates) if len(rates) > 1 else 0.0,
        "tokens_per_s_min": min(rates),
        "tokens_per_s_max": max(rates),
        "samples_s": samples_s,
    }


def bench(model_path, n_gpu_layers, threads, n_prompt, n_gen, repetitions, settings=None, depths=(0,)):
    """pp and tg at each depth, each test in its own context sized as llama-bench sizes it
    (n_ctx = n_prompt + depth for pp, n_gen + depth for tg), one model load for all of them."""
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    started = time.perf_counter()
    model = load_model(model_path, n_gpu_layers, settings)
    load_s = time.perf_counter() - started
    result = {"n_gpu_layers": n_gpu_layers, "threads": threads, "load_s": load_s, "settings": settings,
              "model_size_bytes": llama_cpp.llama_model_size(model), "depths": {}}
    for depth in depths:
        measured = {}
        for test, n_tokens in (("pp", n_prompt), ("tg", n_gen)):
            session = Session(model_path, n_gpu_layers, threads, n_ctx=n_tokens + depth, n_batch=settings["n_batch"],
                              settings=settings, n_ubatch=settings["n_ubatch"], model=model)
            result["n_layer"] = session.n_layer
            run = session.prompt if test == "pp" else session.generate
            run(n_tokens if test == "pp" else 1, depth)  # warm-up, as llama-bench
            samples = [run(n_tokens, depth) for _ in range(repetitions)]
            measured[test] = {"n_tokens": n_tokens, "n_ctx": session.n_ctx, **summary(samples, n_tokens)}
            result["threadpool"] = ({"threads": threads, "poll": session.threadpool.poll} if session.threadpool
                                    else None)
            session.close()
        result["depths"][str(depth)] = measured
    first = result["depths"][str(depths[0])]
    result["pp"], result["tg"] = first["pp"], first["tg"]
    llama_cpp.llama_model_free(model)
    return result


def logits(model_path, n_gpu_layers, threads, n_positions, out_file, op_offload):
    size = max(n_positions, 64)
    session = Session(model_path, n_gpu_layers, threads, n_ctx=size, n_batch=size, op_offload=op_offload)
    tokens = session.random_tokens(n_positions)
    data = session.all_logits(tokens)
    with open(out_file, "wb") as handle:
        handle.write(data)
    result = {"n_gpu_layers": n_gpu_layers, "op_offload": op_offload, "n_positions": n_positions,
              "n_vocab": session.n_vocab, "n_layer": session.n_layer, "tokens": tokens}
    session.close()
    return result


def ggml_library():
    """The ggml library llama.cpp's library already loaded (it holds the backend registry). A wheel keeps
    libggml.so and libggml.so.0 as two files, not a link: opening the other one would load a second registry,
    which llama.cpp never reads. So the mapped one first (Linux), else the one beside llama.cpp's library."""
    mapped = [p for p in mapped_libraries() or [] if os.path.basename(p).split(".")[0] in ("libggml", "ggml")]
    folder = os.path.dirname(library_file() or "")
    candidates = mapped + [os.path.join(folder, n) for n in ("libggml.so.0", "libggml.so", "libggml.dylib", "ggml.dll")]
    for path in candidates:
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise RuntimeError(f"no ggml library beside {library_file()}")


def connect_rpc_servers(endpoints):
    """Register each rpc-server as a device (common/arg.cpp's add_rpc_devices): the RPC backend's
    ggml_backend_rpc_add_server, then ggml_backend_register. Returns the device names now registered."""
    ggml = ggml_library()
    ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
    ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
    rpc = ggml.ggml_backend_reg_by_name(b"RPC")
    if not rpc:
        raise RuntimeError("this llama.cpp has no RPC backend (built without -DGGML_RPC=ON)")
    address = ggml.ggml_backend_reg_get_proc_address(rpc, b"ggml_backend_rpc_add_server")
    if not address:
        raise RuntimeError("the RPC backend has no ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    for endpoint in endpoints:
        registry = add_server(endpoint.encode())
        if not registry:
            raise RuntimeError(f"rpc-server {endpoint}: ggml_backend_rpc_add_server failed")
        ggml.ggml_backend_register(registry)
    devices = device_list(ggml)
    sys.stderr.write(f"playbook: devices after connecting {','.join(endpoints)}: {', '.join(devices)}\n")
    return devices


def main(argv):
    mode = argv[1]
    servers = [s for s in os.environ.get(RPC_SERVERS_VARIABLE, "").split(",") if s]
    if servers:
        llama_cpp.llama_backend_init()
        connect_rpc_servers(servers)
    if mode == "probe":
        emit(probe())
    elif mode == "bench":
        model, layer_counts = argv[2], [int(n) for n in argv[3].split(",")]
        threads, n_prompt, n_gen, reps = map(int, argv[4:8])
        settings = json.loads(argv[8]) if len(argv) > 8 else None
        depths = tuple(int(d) for d in argv[9].split(",")) if len(argv) > 9 else (0,)
        if len(layer_counts) == 1:
            emit(bench(model, layer_counts[0], threads, n_prompt, n_gen, reps, settings, depths))
        else:
            emit({"points": [bench(model, ngl, threads, n_prompt, n_gen, reps, settings, depths)
                             for ngl in layer_counts]})
    elif mode == "logits":
        emit(logits(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6], argv[7] == "1"))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv)
