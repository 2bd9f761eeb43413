"""A GGUF that is truncated, not GGUF at all, or of an architecture llama.cpp does not know: verify
names it `model-unreadable` and records the run instead of crashing."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter

from playbook.params import load_params
from playbook.resources import params_dir
from playbook.runfolder.layout import Layout
from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
from playbook.verify.units.offload_sweep import OFFLOAD_SWEEP


def verify_with(model: Path, cpu_wheel: Path, tmp_path: Path):
    params = load_params(params_dir() / "cpu.yaml", [f"model.path={model}", "verify.repetitions=1",
                                                      "verify.prompt_tokens=8", "verify.gen_tokens=2",
                                                      f"build.cache_dir={tmp_path / 'cache'}"])
    return run_verify(VerifyRequest(Layout(tmp_path / "run"), cpu_wheel, params, VerifyTarget(expect_gpu=False),
                                    tmp_path, tmp_path / "cache"), log=lambda _: None)


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
@pytest.mark.parametrize("damage", ["truncated", "not-gguf"])
def test_a_damaged_gguf_is_named_without_a_crash(damage, cpu_wheel, tiny_f16_model, tmp_path):
    model = tmp_path / f"{damage}.gguf"
    if damage == "truncated":
        model.write_bytes(tiny_f16_model.read_bytes()[:4096])  # a download that stopped early
    else:
        model.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4368439584\n")
    result = verify_with(model, cpu_wheel, tmp_path)
    assert not result.ok and [f.id for f in result.findings] == ["model-unreadable"]
    assert model.name in result.findings[0].evidence and result.summary.startswith(f"the model {model.name}")


@pytest.mark.slow  # cpu_wheel: builds llama-cpp-python where no wheel is given
def test_a_gguf_of_an_unknown_architecture_is_named_by_llama_cpps_loader(cpu_wheel, tmp_path):
    model = tmp_path / "other-architecture.gguf"
    writer = GGUFWriter(model, "not-a-llama")
    writer.add_block_count(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    result = verify_with(model, cpu_wheel, tmp_path)
    assert not result.ok
    assert "model-unreadable" in [f.id for f in result.findings], result.findings
    assert [p.status for p in result.measured(OFFLOAD_SWEEP).points] == ["error"]  # the sweep ran its point and recorded it
    log = (Layout(tmp_path / "run").verify_logs(1) / "bench-ngl-0.log").read_text()
    assert "unknown model architecture" in log
