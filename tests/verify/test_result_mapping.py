"""Verify's results as a mapping by unit (issue 31): a new measurement is its own module and a register line, and
touches neither the result nor the layout; the archived runs' flat results still read, through one converter."""

from __future__ import annotations

import dataclasses
import inspect
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from playbook.params import load_params
from playbook.runfolder.layout import Layout
from playbook.serialization import read_json, write_json
from playbook.verify import result as result_module
from playbook.verify.flat_result import flat_to_mapping
from playbook.verify.launcher import ChildOutcome
from playbook.verify.measurement import (
    InstalledWheel,
    Measured,
    Registry,
    VerifyContext,
    VerifyRequest,
    VerifyTarget,
    run_units,
)
from playbook.verify.result import VerifyResult
from playbook.verify.settings import BenchSettings
from playbook.verify.units import default_registry
from playbook.verify.units.backend_library import BACKEND_LIBRARY
from playbook.verify.units.cxx_runtime import CXX_RUNTIME
from playbook.verify.units.gpu_cpu_agreement import GPU_CPU_AGREEMENT
from playbook.verify.units.import_probe import IMPORT_PROBE
from playbook.verify.units.llama_bench import LLAMA_BENCH
from playbook.verify.units.machine_code import MACHINE_CODE
from playbook.verify.units.model_file import MODEL_FILE
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP
from playbook.verify.units.rpc_offload import RPC_OFFLOAD
from playbook.verify.units.runtime_tune import TUNE
from playbook.verify.units.server import SERVER
from playbook.verify.units.throughput import THROUGHPUT

ROOT = Path(__file__).resolve().parents[2]
ARCHIVED_ALL = sorted((ROOT / "outputs" / "reference").glob("*/verify-attempt-*.json"))
# Written before verify's results became a mapping by unit (the converter's input); the newer ones are read as they are.
ARCHIVED = [p for p in ARCHIVED_ALL if "measurements" not in json.loads(p.read_text())]
MAPPED = [p for p in ARCHIVED_ALL if p not in ARCHIVED]


# ---------------------------------------------------------------- a measurement defined here, and nowhere else


@dataclass
class WheelSize:
    """The wheel's size: the file, and what it unpacks to."""

    wheel_bytes: int
    installed_bytes: int
    files: int

    @property
    def ratio(self) -> float:
        return self.installed_bytes / self.wheel_bytes


class WheelSizeUnit:
    name = "wheel-size"
    value_type = WheelSize

    def skip_reason(self, ctx: VerifyContext) -> str:
        return "" if ctx.wheel.site_dir.is_dir() else "the wheel is not installed"

    def measure(self, ctx: VerifyContext) -> Measured[WheelSize]:
        files = [p for p in ctx.wheel.site_dir.rglob("*") if p.is_file()]
        size = WheelSize(ctx.request.wheel.stat().st_size, sum(p.stat().st_size for p in files), len(files))
        listing = ctx.files(self.name).file("files.txt")
        listing.write_text("".join(f"{p.stat().st_size} {p.relative_to(ctx.wheel.site_dir)}\n" for p in files))
        log = ctx.files(self.name).log()
        log.write_text(f"{size}\n")
        return Measured(size, files=[listing, log], note=f"the wheel unpacks to {size.ratio:.1f}x its size")


WHEEL_SIZE = WheelSizeUnit()


def small_wheel(folder: Path) -> tuple[Path, Path]:
    """A real wheel file and the folder it is installed in (unpacked, as pip lays a pure wheel out)."""
    wheel = folder / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("tiny/__init__.py", "VALUE = 1\n" * 200)
        archive.writestr("tiny/data.txt", "0123456789" * 500)
        archive.writestr("tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n")
    site = folder / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return wheel, site


def test_a_new_measurement_needs_no_line_in_the_result_or_the_layout(tmp_path):
    wheel, site = small_wheel(tmp_path)
    layout = Layout(tmp_path / "run")
    layout.verify_logs(1).mkdir(parents=True)
    request = VerifyRequest(layout, wheel, load_params(), VerifyTarget(expect_gpu=False), tmp_path, tmp_path / "cache")
    ctx = VerifyContext(request, InstalledWheel(site, {}, 0), BenchSettings(threads=1), log=lambda line: None)
    registry = Registry()
    registry.register(WHEEL_SIZE)
    result = VerifyResult(False, wheel.name, str(site))

    assert run_units(registry, ctx, result) == ""  # the real runner: measured, recorded under its name

    measured = result.measured(WHEEL_SIZE)
    assert measured is not None and measured.files == 3 and measured.wheel_bytes == wheel.stat().st_size
    assert measured.installed_bytes > measured.wheel_bytes  # 7 kB of text compresses
    # its files got their names through the unit's namespace, in verify's folder of the attempt
    [record] = result.units
    assert record.status == "measured"
    assert record.files == ["verify-logs/attempt-1/wheel-size-files.txt", "verify-logs/attempt-1/wheel-size.log"]
    assert "tiny/data.txt" in (layout.root / record.files[0]).read_text()

    write_json(result, layout.verify_result(1))
    saved = json.loads(layout.verify_result(1).read_text())
    assert saved["measurements"]["wheel-size"] == {"wheel_bytes": measured.wheel_bytes,
                                                    "installed_bytes": measured.installed_bytes, "files": 3}
    back = read_json(VerifyResult, layout.verify_result(1))
    again = back.measured(WHEEL_SIZE)
    assert isinstance(again, WheelSize) and again == measured and again.ratio == measured.ratio
    assert back.measured(OFFLOAD_SWEEP) is None  # a unit that did not run has no value

    # and neither shared module names it
    for module in (result_module, Layout):
        assert "wheel-size" not in Path(inspect.getfile(module)).read_text()


def test_a_new_unit_cannot_put_files_beside_the_notebooks(tmp_path):
    files = Layout(tmp_path).unit_files(2, "wheel-size")
    with pytest.raises(ValueError, match="verify-logs/attempt-N/"):
        files.beside(".json")
    # the names verify's first units kept there stay as they were
    assert Layout(tmp_path).unit_files(2, "throughput").beside(".csv") == tmp_path / "throughput-attempt-2.csv"
    assert Layout(tmp_path).unit_files(2, "rpc").beside(".log", "server-build") == \
        tmp_path / "rpc-server-build-attempt-2.log"
    assert Layout(tmp_path).unit_files(2, "bench").log("ngl-17") == tmp_path / "verify-logs/attempt-2/bench-ngl-17.log"


def test_every_unit_declares_the_type_of_its_value():
    for unit in default_registry():
        assert dataclasses.is_dataclass(unit.value_type), unit.name


# ---------------------------------------------------------------- the archived runs: the flat shape, read


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return [_plain(v) for v in value] if isinstance(value, list) else value


def _within(old, new) -> bool:
    """Every value the archived JSON holds is in the typed one (which may have fields added since, at defaults)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return all(key in new and _within(value, new[key]) for key, value in old.items())
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_within(a, b) for a, b in zip(old, new, strict=True))
    return old == new


def _same(old, new) -> bool:
    """The archived JSON value and the typed one are the same data (paths as text)."""
    return _within(json.loads(json.dumps(old, default=str)), json.loads(json.dumps(_plain(new), default=str)))


@pytest.mark.parametrize("path", MAPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_an_archived_mapped_result_reads_as_its_units_types(path):
    """A run archived after the mapping (the GPU gate's since the backend redesign) reads without the converter."""
    stored = json.loads(path.read_text())
    verify = read_json(VerifyResult, path)
    assert set(verify.measurements) == set(stored["measurements"]) and verify.ok == stored["ok"]
    for unit in default_registry():
        value = verify.measured(unit)
        assert value is None or isinstance(value, unit.value_type), unit.name


@pytest.mark.parametrize("path", ARCHIVED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_archived_verify_result_reads_through_the_converter(path):
    flat = json.loads(path.read_text())
    assert "measurements" not in flat  # archived before the mapping, and never rewritten
    verify = read_json(VerifyResult, path)
    assert verify.ok == flat["ok"] and verify.summary == flat["summary"]
    assert [f.id for f in verify.findings] == [f["id"] for f in flat["findings"]]
    units = {u.name for u in default_registry()}
    assert set(verify.measurements) <= units
    for unit in default_registry():  # every value reads as its unit's type
        value = verify.measured(unit)
        assert value is None or isinstance(value, unit.value_type), unit.name

    probe = verify.measured(IMPORT_PROBE)
    assert probe is not None and _same(flat["probe"], probe.outcome) and isinstance(probe.outcome, ChildOutcome)
    assert probe.library_file == flat.get("library_file") and probe.gpu_skipped == flat.get("gpu_skipped", "")
    sweep = verify.measured(OFFLOAD_SWEEP)
    if flat.get("points"):
        assert sweep is not None and _same(flat["points"], sweep.points)
        assert sweep.layer_counts == flat["layer_counts"]
        assert probe.gpu_offload == any(p["n_gpu_layers"] > 0 for p in flat["points"])
    else:
        assert sweep is None
    model = verify.measured(MODEL_FILE)
    assert (model is None) == (not flat.get("model_path"))
    if model is not None:
        assert str(model.path) == flat["model_path"] and model.description == flat["model"]
    for field, unit in (("agreement", GPU_CPU_AGREEMENT), ("llama_bench", LLAMA_BENCH), ("server", SERVER),
                        ("tune", TUNE), ("cxx_runtime", CXX_RUNTIME), ("rpc", RPC_OFFLOAD)):
        value = verify.measured(unit)
        assert (value is None) == (flat.get(field) is None), field
        if value is not None:
            assert _same(flat[field], value), field
    throughput = verify.measured(THROUGHPUT)
    assert (throughput is None) == (not flat.get("csv_file"))
    if throughput is not None:
        assert throughput.plot_files == flat["plot_files"]
        assert throughput.tg_limit_tokens_per_s == flat.get("tg_limit_tokens_per_s")
    listing = verify.measured(MACHINE_CODE)
    old_listing = flat.get("cuda_elf") or flat.get("hip_bundles")
    assert (listing is None) == (old_listing is None)
    if listing is not None:
        assert type(listing.listing).__name__ == ("CudaElf" if flat.get("cuda_elf") else "HipBundles")
        assert _same(old_listing, listing.listing)
    libraries = verify.measured(BACKEND_LIBRARY)
    assert (libraries.checks if libraries else []) == [] if not flat.get("backend_libraries") else \
        _same(flat["backend_libraries"], libraries.checks)


def test_the_converter_keeps_a_current_result_as_it_is():
    current = {"ok": True, "wheel": "w.whl", "site_dir": "", "measurements": {"wheel-size": {"files": 1}}}
    assert VerifyResult.upgrade_json(current) is current
    assert flat_to_mapping({"ok": False, "wheel": "w.whl", "site_dir": "", "probe": {"status": "not run"}}) == \
        {"ok": False, "wheel": "w.whl", "site_dir": "", "measurements": {}}
