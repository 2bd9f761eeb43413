"""publish and install with real wheels (small packages built by pip here), a real HTTP server, moto's S3 server
and the real uv: what fits is chosen with its reasons, a tampered or cut-off download is refused and leaves no
file, an unreachable index is skipped with one line, and a project's uv sync never reuses another backend's wheel."""

from __future__ import annotations

import dataclasses
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import make_facts

from playbook.backends import registry
from playbook.facts import Facts, Gpu, NvidiaDriver
from playbook.files import sha256_of
from playbook.localhost import free_port
from playbook.params import load_params
from playbook.runfolder.folder import Outcome, RunFolder
from playbook.runfolder.layout import Step
from playbook.wheelindex import index as wheel_index
from playbook.wheelindex.install import InstallRequest, install
from playbook.wheelindex.metadata import CpuTarget, PublishRefused, WheelRecord, cpu_target, record_from_run
from playbook.wheelindex.project_lines import for_build, for_published
from playbook.wheelindex.select import Candidate, MachineNeeds, choose, needs_from_facts

PY = sys.executable


def small_wheel(folder: Path, marker: str) -> Path:
    """A real wheel named like the binding (llama-cpp-python 0.3.36) whose llama_cpp says which build it is."""
    source = folder / f"src-{marker}"
    (source / "llama_cpp").mkdir(parents=True)
    (source / "llama_cpp" / "__init__.py").write_text(f'__version__ = "0.3.36"\nBUILD = "{marker}"\n')
    (source / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\nbuild-backend = '
                                           '"setuptools.build_meta"\n[project]\nname = "llama-cpp-python"\n'
                                           'version = "0.3.36"\n[tool.setuptools]\npackages = ["llama_cpp"]\n')
    out = folder / f"dist-{marker}"
    subprocess.run([PY, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    return next(out.glob("*.whl"))


def record_of(wheel: Path, backend: str = "cpu", flags: tuple[str, ...] = (), **changes) -> WheelRecord:
    record = WheelRecord(wheel.name, sha256_of(wheel), wheel.stat().st_size, "0.3.36", "ab" * 32, backend, "py3",
                         "none", "any", "2.17", CpuTarget(False, sorted(flags)), ["-DGGML_NATIVE=OFF"])
    return dataclasses.replace(record, **changes)


def cuda_target(release: str, architectures: str, listed: list[str]) -> dict:
    """What the CUDA unit records of a wheel built for CMAKE_CUDA_ARCHITECTURES=``architectures``."""
    return registry.unit("cuda").wheel_requirements([f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"], release, listed)


RTX_3090 = Gpu(0, "NVIDIA GeForce RTX 3090", 24576, "8.6")


def machine_with(base: Facts, gpus: list[Gpu], driver_cuda: str) -> Facts:
    """``base`` with a test CPU (avx, avx2, f16c, fma), glibc 2.36, and ``gpus`` behind a driver of ``driver_cuda``."""
    facts = make_facts(base, gpus=gpus, driver=NvidiaDriver(bool(gpus), "570.86.10" if gpus else "", driver_cuda))
    facts.cpu.flags, facts.cpu.model, facts.os.glibc = ["avx", "avx2", "f16c", "fma"], "a test CPU", "2.36"
    return facts


def needs(base: Facts, gpus: list[Gpu] = [RTX_3090], driver_cuda: str = "12.8") -> MachineNeeds:  # noqa: B006
    return needs_from_facts(machine_with(base, gpus, driver_cuda), ["py3-none-any"], "auto", "0.3.36")


@pytest.fixture
def index_server(tmp_path):
    """http.server over a folder: the index as pip and uv read it."""
    root = tmp_path / "index"
    root.mkdir()
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(root), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_what_a_wheel_needs_comes_from_its_cmake_arguments():
    assert cpu_target(["-DGGML_CUDA=on"], ["avx", "avx2"]) == CpuTarget(True, ["avx", "avx2"])
    portable = cpu_target(["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AVX512=ON", "-DGGML_FMA=OFF"], ["avx"])
    assert portable == CpuTarget(False, ["avx2", "avx512f"])
    assert cpu_target(["-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"], []).runtime_dispatch
    cuda = cuda_target("12.8.1", "86;90-virtual;120a-real", [])
    assert cuda == {"release": "12.8", "sass": ["sm_86", "sm_120a"], "ptx": ["compute_86", "compute_90"],
                    "sass_listed": False}
    assert cuda_target("12.8", "86;89", ["sm_86"])["sass"] == ["sm_86"]  # what cuobjdump listed wins


def test_a_record_of_the_first_format_is_read_as_the_second():
    """Wheels published before the backend's needs moved under ``requirements`` stay installable."""
    from playbook.serialization import from_dict

    old = {"wheel": "w.whl", "sha256": "1" * 64, "size_bytes": 1, "version": "0.3.36", "source_sha256": "",
           "backend": "cuda", "python_tag": "py3", "abi_tag": "none", "platform_tag": "any", "glibc": "2.17",
           "cpu": {"native": False}, "cuda": {"release": "12.8", "sass": ["sm_86"], "ptx": [], "sass_listed": True},
           "gpu_targets": ""}
    record = from_dict(WheelRecord, old)
    assert (record.format, record.requirements) == (2, old["cuda"])
    hip = from_dict(WheelRecord, {**old, "backend": "hip", "cuda": None, "gpu_targets": "gfx1100"})
    assert hip.requirements == {"gpu_targets": "gfx1100"}


def test_the_choice_never_takes_what_this_machine_cannot_run(tmp_path, this_machine):
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-any.whl"
    wheel.write_bytes(b"x")
    records = {
        "sm90": record_of(wheel, "cuda", requirements=cuda_target("12.8", "90-real", []), sha256="1" * 64),
        "ptx80": record_of(wheel, "cuda", requirements=cuda_target("12.4", "80-virtual", []), sha256="2" * 64),
        "sm86": record_of(wheel, "cuda", requirements=cuda_target("12.8", "86-real", []), sha256="3" * 64),
        "cuda13": record_of(wheel, "cuda", requirements=cuda_target("13.0", "86-real", []), sha256="4" * 64),
        "avx512": record_of(wheel, "cpu", ("avx2", "avx512f"), sha256="5" * 64),
        "avx2": record_of(wheel, "cpu", ("avx", "avx2"), sha256="6" * 64),
        "glibc": record_of(wheel, "cpu", glibc="2.39", sha256="7" * 64),
    }
    selection = choose([Candidate("team", r) for r in records.values()], needs(this_machine))
    by_sha = {v.variant.split("-")[1][0]: v for v in selection.verdicts}
    reason = {name: by_sha[r.sha256[0]].reason for name, r in records.items()}
    assert [c.record.sha256[0] for c in selection.ranked] == ["3", "2", "6"]  # SASS, then PTX, then the CPU wheel
    assert "native machine code sm_86" in reason["sm86"] and "PTX compute_80 only" in reason["ptx80"]
    assert "nothing that runs on sm_86" in reason["sm90"] and not by_sha["1"].accepted
    assert "CUDA 13.0 is newer than the driver supports (CUDA 12.8)" in reason["cuda13"]
    assert "avx512f, which this CPU (a test CPU) lacks" in reason["avx512"]
    assert "glibc 2.39; this machine has 2.36" in reason["glibc"]
    # without a GPU the CUDA wheels are refused for that, and the CPU wheel is the best fit
    cpu_only = choose([Candidate("team", r) for r in records.values()], needs(this_machine, gpus=[], driver_cuda=""))
    assert [c.record.sha256[0] for c in cpu_only.ranked] == ["6"]
    assert any("a cuda wheel: no NVIDIA GPU" in v.reason for v in cpu_only.verdicts)


def verified_run(tmp_path: Path, wheel: Path, facts, verify_ok: bool = True) -> Path:  # type: ignore[no-untyped-def]
    """A run folder whose records say the wheel was built and verified (the steps' own dataclasses)."""
    from playbook.steps.build import BuildResult, WheelInfo
    from playbook.steps.configure import configure
    from playbook.steps.source import SourceInfo
    from playbook.verify.result import VerifyResult
    from playbook.verify.settings import BenchSettings
    from playbook.verify.sweep import SweepPoint
    from playbook.verify.units.model_file import MODEL_FILE, ModelFile
    from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP, Sweep

    params = load_params(None, ["backend=cpu", f"build.cache_dir={tmp_path / 'cache'}"])
    run = RunFolder.create_at(tmp_path / "20261129T000000Z-test", params, "test")
    layout = run.layout
    run.write(facts, layout.detect_facts)
    run.write(configure(facts, params), layout.plan(1))
    layout.wheel_dir(1).mkdir(parents=True)
    shutil.copy2(wheel, layout.wheel_dir(1) / wheel.name)
    source = SourceInfo("sdist", str(tmp_path / "gone.tar.gz"), "0.3.36", "cd" * 32, "test")
    run.write(BuildResult(1, True, 0, 1.0, "build-attempt-1.log", [], {}, source,
                          WheelInfo(wheel.name, str(wheel), wheel.stat().st_size, sha256_of(wheel))),
              layout.build_result(1))
    verify = VerifyResult(verify_ok, wheel.name, "", 2, summary="CPU-only build: measured")
    verify.record(MODEL_FILE, ModelFile(tmp_path / "model.gguf", {"n_layer": 4}))
    verify.record(OFFLOAD_SWEEP, Sweep([0], BenchSettings(2), [SweepPoint(0, "ok", pp_tokens_per_s=100.0,
                                                                         tg_tokens_per_s=10.0)]))
    run.write(verify, layout.verify_result(1))
    run.begin_step(Step.VERIFY, 1)
    run.finish_step(Step.VERIFY, 1, Outcome.OK if verify_ok else Outcome.FAILED, "measured")
    return run.path


def test_publish_refuses_a_run_whose_verify_did_not_pass(tmp_path, this_machine):
    wheel = small_wheel(tmp_path, "cpu")
    run_dir = verified_run(tmp_path, wheel, this_machine, verify_ok=False)
    with pytest.raises(PublishRefused, match=r"run 20261129T000000Z-test has no passed verify \(attempt 1: failed\)"
                                             r".*playbook resume"):
        record_from_run(run_dir)
    shown = subprocess.run([PY, "-m", "playbook", "publish", str(run_dir), "--to", str(tmp_path / "index")],
                           capture_output=True, text=True, timeout=300, check=False)
    assert shown.returncode == 2 and "no passed verify" in shown.stderr
    assert not (tmp_path / "index").exists()


def test_publish_records_a_verified_run(tmp_path, this_machine):
    """A passed run's record: its backend's requirements (none for the CPU), verify's figures, its CPU code."""
    wheel = small_wheel(tmp_path, "cpu")
    record, found = record_from_run(verified_run(tmp_path, wheel, this_machine))
    assert found.name == wheel.name and record.sha256 == sha256_of(wheel)
    assert (record.backend, record.requirements, record.format) == ("cpu", {}, 2)
    assert (record.verified.offloadable_layers, record.verified.best_tg_tokens_per_s) == (5, 10.0)
    assert record.describe().startswith("cpu; llama-cpp-python 0.3.36; py3-any")


def fresh_venv(path: Path) -> Path:
    subprocess.run([PY, "-m", "venv", str(path)], check=True, timeout=300)
    return path


def installed_build(venv: Path) -> str:
    site = next((venv / "lib").glob("python*/site-packages"))
    text = (site / "llama_cpp" / "__init__.py").read_text()
    return text.split('BUILD = "')[1].split('"')[0]


def install_request(tmp_path: Path, facts, sources: list[str], venv: Path) -> InstallRequest:  # type: ignore[no-untyped-def]
    params = load_params(None, [f"build.cache_dir={tmp_path / 'second-cache'}"])
    return InstallRequest(facts, params, sources, venv, build=False, check=False)


@pytest.mark.long
def test_install_refuses_a_tampered_wheel_skips_an_unreachable_index_and_installs_the_next(tmp_path, this_machine,
                                                                                          index_server):
    root, url = index_server
    store = wheel_index.open_store(root)
    avx2 = small_wheel(tmp_path, "avx2")
    baseline = small_wheel(tmp_path, "baseline")
    flags = tuple(f for f in ("avx", "avx2") if f in this_machine.cpu.flags)
    wheel_index.publish(store, record_of(avx2, "cpu", flags, cpu=CpuTarget(False, sorted(flags) + ["avx2"])
                                         if "avx2" not in flags else CpuTarget(False, sorted(flags))), avx2)
    wheel_index.publish(store, record_of(baseline, "cpu"), baseline)
    [best, other] = wheel_index.read_catalogue(store).records
    # the best fitting wheel's file no longer matches its index entry
    tampered = root / wheel_index.wheel_path(best)
    tampered.write_bytes(tampered.read_bytes() + b"\0")
    venv = fresh_venv(tmp_path / "venv")
    lines: list[str] = []
    dead = f"http://127.0.0.1:{free_port()}"
    done = install(install_request(tmp_path, this_machine, [dead, url], venv), log=lines.append)
    assert done.chosen is not None and done.chosen.sha256 == other.sha256
    assert installed_build(venv) == "baseline"
    assert [line for line in lines if dead in line] == [
        f"index {dead} skipped: {dead} did not answer: [Errno 111] Connection refused"]
    refused = [v for v in done.verdicts if v.variant == best.variant and not v.accepted]
    assert refused and "refused and skipped" in refused[-1].reason and "sha256" in refused[-1].reason
    downloads = tmp_path / "second-cache" / "downloads" / "wheels" / best.sha256[:16]
    assert list(downloads.iterdir()) == []  # neither the wrong file nor a partial one is left
    # the installed wheel joined this machine's own index: the next install finds it without the team's
    assert wheel_index.read_catalogue(wheel_index.open_store(tmp_path / "second-cache" / "wheel-index")).records


class CutOff(http.server.BaseHTTPRequestHandler):
    """Promises the whole wheel and closes the connection half-way."""

    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body[: len(self.body) // 2])
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args) -> None:  # type: ignore[no-untyped-def]
        pass


def test_an_interrupted_download_leaves_no_file(tmp_path):
    wheel = small_wheel(tmp_path, "cut")
    CutOff.body = wheel.read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CutOff)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = wheel_index.HttpStore(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(wheel_index.IndexError_, match="cut off"):
            wheel_index.fetch_wheel(store, record_of(wheel), tmp_path / "downloads")
    finally:
        server.shutdown()
        server.server_close()
    assert list((tmp_path / "downloads").iterdir()) == []


@pytest.mark.long
def test_an_s3_index_is_written_and_read_back(tmp_path, monkeypatch):
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    from playbook.localhost import wait_until_listening

    port = free_port()
    server = subprocess.Popen([PY, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until_listening(port, server, timeout_s=60)
        for name, value in {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
                            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
            monkeypatch.setenv(name, value)
        boto3.session.Session().client("s3").create_bucket(Bucket="wheels")
        wheel = small_wheel(tmp_path, "s3")
        store = wheel_index.open_store("s3://wheels/team")
        url = wheel_index.publish(store, record_of(wheel), wheel)
        assert url == f"http://127.0.0.1:{port}/wheels/team/{record_of(wheel).variant}/simple"
        [record] = wheel_index.read_catalogue(wheel_index.open_store("s3://wheels/team")).records
        fetched = wheel_index.fetch_wheel(store, record, tmp_path / "got")
        assert sha256_of(fetched) == sha256_of(wheel)
        assert wheel_index.listed_sha256(store, record) == record.sha256
    finally:
        server.terminate()
        server.wait(timeout=30)


def uv_sync(project: Path, lines: str, cache: Path) -> subprocess.CompletedProcess[str]:
    (project / "pyproject.toml").write_text(lines.replace("[project]\n", '[project]\nname = "user-app"\n'
                                                          'version = "1.0"\nrequires-python = ">=3.9"\n', 1))
    uv = shutil.which("uv", path=str(Path(PY).parent)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is in the test extra: pip install -e '.[test]'")
    env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_PYTHON": PY, "XDG_CONFIG_HOME": str(cache.parent / "config")}
    return subprocess.run([uv, "sync", "--no-progress"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


@pytest.mark.long
def test_uv_sync_installs_the_published_wheel_and_a_backend_change_never_reuses_it(tmp_path, index_server):
    root, url = index_server
    store = wheel_index.HttpStore(url)
    wheel_index.FolderStore(root).root.mkdir(exist_ok=True)
    cpu, cuda = small_wheel(tmp_path, "cpu"), small_wheel(tmp_path, "cuda")
    assert cpu.name == cuda.name  # one file name for both builds: what a version-keyed cache confuses
    records = {"cpu": record_of(cpu, "cpu"), "cuda": record_of(cuda, "cuda", requirements=cuda_target("12.8", "86", []))}
    urls = {}
    for name, wheel in (("cpu", cpu), ("cuda", cuda)):
        urls[name] = wheel_index.publish(wheel_index.FolderStore(root), records[name], wheel)
        assert wheel_index.listed_sha256(store, records[name]) == records[name].sha256
    project, cache = tmp_path / "user-app", tmp_path / "uv-cache"
    project.mkdir()
    venv = project / ".venv"
    for backend in ("cpu", "cuda", "cpu"):  # one uv cache for all three syncs
        lines = for_published(records[backend], urls[backend].replace(f"file://{root}", url))
        synced = uv_sync(project, lines.pyproject, cache)
        assert synced.returncode == 0, synced.stderr
        assert installed_build(venv) == backend, synced.stderr
    # a build instead: the backend's CMake arguments are in uv's cache key (config-settings, extra-build-variables)
    build = for_build("0.3.36", ["-DGGML_CUDA=on", "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"])
    assert 'config-settings = { "cmake.args" = "-DGGML_CUDA=on" }' in build.pyproject
    assert 'llama-cpp-python = { CMAKE_ARGS = "-DGGML_CUDA=on" }' in build.pyproject
    assert "--no-cache-dir --no-binary llama-cpp-python -C cmake.args='-DGGML_CUDA=on'" in build.pip_command
