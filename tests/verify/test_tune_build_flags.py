"""verify.tune_build_flags: which flags a build is offered, the decision for each workload, the report, and the rebuild
into the run folder through the build step's machinery; on the CPU wheel for real (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import compiled_project, tree_source

from playbook.backends import registry
from playbook.errors import ParameterError
from playbook.params import load_params
from playbook.runfolder.layout import Layout, Step, owner_of
from playbook.verify.settings import BenchSettings, llama_class_defaults
from playbook.verify.tune import (
    BuildFlag,
    FlagBuild,
    FlagMeasurement,
    GainRow,
    Recommendation,
    TuneTrial,
    build_flag_candidates,
    builds_every_fa_pair,
    fa_pairs_built,
    recommend_build_flag,
    report_markdown,
    tune,
    tune_build_flags,
)
from playbook.verify.units.runtime_tune import TUNE

DEFAULTS = llama_class_defaults(8)
FA_FLAG = "-DGGML_CUDA_FA_QUANTS=q4_0-q4_0,q8_0-q8_0,f16-f16,bf16-bf16,q8_0-f16"


def test_the_flash_attention_pairs_a_cuda_build_has_come_from_its_cmake_arguments():
    assert fa_pairs_built(["-DGGML_CUDA=on"]) == ["q4_0-q4_0", "q8_0-q8_0", "f16-f16", "bf16-bf16"]  # the pinned default
    assert fa_pairs_built(["-DGGML_CUDA_FA_QUANTS=f16-f16,q8_0-f16"]) == ["f16-f16", "q8_0-f16"]
    assert fa_pairs_built(["-DGGML_CUDA_FA_QUANTS:STRING=all"]) is None
    assert fa_pairs_built(["-DGGML_CUDA_FA_ALL_QUANTS=ON"]) is None  # deprecated in the pinned llama.cpp: "all"
    assert not builds_every_fa_pair(["-DGGML_CUDA=on"])
    assert builds_every_fa_pair([FA_FLAG]) and builds_every_fa_pair(["-DGGML_CUDA_FA_ALL_QUANTS=ON"])


def test_each_backend_offers_its_own_flag():
    (cuda,) = build_flag_candidates(registry.unit("cuda").tune_build_flags, ["-DGGML_CUDA=on"])
    assert cuda.cmake_args == [FA_FLAG] and cuda.kv_pairs == ["q8_0-f16"]
    assert build_flag_candidates(registry.unit("cuda").tune_build_flags, ["-DGGML_CUDA=on", FA_FLAG]) == []  # it has every pair already
    (cpu,) = build_flag_candidates(registry.unit("cpu").tune_build_flags, ["-DGGML_NATIVE=OFF"])
    assert cpu.cmake_args == ["-DGGML_LLAMAFILE=OFF"] and cpu.kv_pairs == []
    assert build_flag_candidates(registry.unit("cpu").tune_build_flags, ["-DGGML_LLAMAFILE=OFF"])[0].cmake_args == ["-DGGML_LLAMAFILE=ON"]
    assert build_flag_candidates(registry.unit("vulkan").tune_build_flags, []) == []


def rows(test: str, *gains: float) -> list[GainRow]:
    return [GainRow(depth, test, 100.0, 100.0 * gain, gain) for depth, gain in zip((0, 4096), gains, strict=True)]


def test_a_flag_is_recommended_only_where_it_beats_the_defaults_at_every_depth_and_the_runtime_settings():
    flag = BuildFlag([FA_FLAG], "kernels", ["q8_0-f16"])
    fast = DEFAULTS.replace(flash_attn="on", type_k="q8_0")
    runtime_only = Recommendation("tg", DEFAULTS.replace(flash_attn="on"), rows("tg", 1.10, 1.10))
    kept_defaults = Recommendation("tg", DEFAULTS, kept_defaults="keep the defaults: ...")
    same_rounds = {"tg": rows("tg", 1.10, 1.10)}  # the runtime-only settings, measured in the same rounds

    chosen = recommend_build_flag(runtime_only, flag, [FlagMeasurement(fast, rows("tg", 1.15, 1.30), same_rounds)],
                                  [0, 4096], 33)
    assert not chosen.kept and chosen.cmake_args == [FA_FLAG] and chosen.settings == fast
    assert chosen.llama_kwargs["type_k"] == "llama_cpp.GGML_TYPE_Q8_0" and chosen.llama_kwargs["flash_attn"] == "True"
    assert chosen.without_flag == same_rounds["tg"]

    slower_at_depth = recommend_build_flag(kept_defaults, flag, [FlagMeasurement(fast, rows("tg", 1.40, 0.95))],
                                           [0, 4096], 33)
    assert slower_at_depth.kept == "not recommended: slower than the defaults in tg at depth 4096 (0.950×)"

    no_better = recommend_build_flag(runtime_only, flag, [FlagMeasurement(fast, rows("tg", 1.11, 1.11), same_rounds)],
                                     [0, 4096], 33)
    assert no_better.kept == ("not recommended: 1.110× the defaults in tg, not 2% more than the runtime settings "
                              "alone on the verified wheel (1.100×)")
    # where the workload keeps the defaults, the same rows win
    assert not recommend_build_flag(kept_defaults, flag, [FlagMeasurement(fast, rows("tg", 1.11, 1.11))],
                                    [0, 4096], 33).kept

    unmeasured = recommend_build_flag(kept_defaults, flag, [FlagMeasurement(fast, rows("tg", 1.2, 1.2)[:1])],
                                      [0, 4096], 33)
    assert unmeasured.kept == "the rebuilt wheel could not be measured at every depth"
    # the pp rows of a trial measured for both workloads do not decide for tg
    assert recommend_build_flag(kept_defaults, flag, [FlagMeasurement(fast, rows("pp", 2.0, 2.0))], [0, 4096], 33).kept


def fa_speed(rebuilt: bool):
    """A made-up GPU: flash attention speeds prompts and slows generation at depth; q8_0/f16 with flash attention
    needs the rebuilt wheel (without its kernel attention falls back to the CPU) and then speeds generation at depth
    but slows prompts; without flash attention it changes nothing."""
    def measure(settings: BenchSettings, ngl: int, label: str) -> TuneTrial:
        rates = {}
        for depth in ("0", "4096"):
            pp, tg = 1000.0, 100.0
            if settings.flash_attn == "on":
                pp, tg = pp * 1.3, tg * (1.0 if depth == "0" else 0.97)
            if (settings.type_k, settings.type_v, settings.flash_attn) == ("q8_0", "f16", "on"):
                assert rebuilt, f"{label}: q8_0/f16 with flash attention measured on a wheel without its kernel"
                pp, tg = pp * 0.9, tg * (1.1 if depth == "0" else 1.4)
            rates[depth] = {"pp": pp, "tg": tg}
        return TuneTrial(label, ngl, settings, "ok", rates)
    return measure


def test_the_rebuilt_wheel_is_measured_beside_the_defaults_and_reported_with_the_llama_arguments():
    result = tune("/models/m.gguf", 32, True, 8, 16, [0, 4096], 512, 64, 2, fa_speed(rebuilt=False),
                  log=lambda line: None, cmake_args=["-DGGML_CUDA=on"])
    (target,) = result.targets
    assert [r.settings.flash_attn for r in target.recommendations] == ["on", "off"]  # pp: flash attention; tg: none
    flags = build_flag_candidates(registry.unit("cuda").tune_build_flags, ["-DGGML_CUDA=on"])
    sides: list[str] = []

    def rebuild(flag: BuildFlag):
        def on_rebuilt(settings, ngl, label):
            sides.append(label)
            return fa_speed(rebuilt=True)(settings, ngl, label)
        return FlagBuild(flag.cmake_args, True, "/run/tune-wheelhouse/attempt-1/x.whl", "ab" * 32, 41.0,
                         ccache="271 hits, 12 misses", log_file="tune-build-attempt-1.log"), on_rebuilt

    verified: list[str] = []

    def on_verified(settings, ngl, label):
        verified.append(label)
        return fa_speed(rebuilt=False)(settings, ngl, label)

    tune_build_flags(result, flags, rebuild, on_verified, rounds=2, log=lambda line: None)
    # one candidate serves both workloads (q8_0/f16 with flash attention on either's settings); each round measures
    # the defaults, pp's runtime-only settings (flash attention) on the verified wheel, then the rebuilt wheel
    assert verified == ["side by side 1: defaults", "side by side 1: without the flag: pp settings",
                        "side by side 2: defaults", "side by side 2: without the flag: pp settings"]
    assert sides == [f"side by side {n}: rebuilt {FA_FLAG}" for n in (1, 2)]
    prompts, generation = target.build_flags
    # faster than the defaults in pp, but slower than flash attention alone on the verified wheel: not worth a rebuild
    assert prompts.workload == "pp" and prompts.kept == ("not recommended: 1.170× the defaults in pp, not 2% more "
                                                         "than the runtime settings alone on the verified wheel "
                                                         "(1.300×)")
    assert generation.workload == "tg" and not generation.kept
    assert (generation.settings.flash_attn, generation.settings.type_k, generation.settings.type_v) == ("on", "q8_0",
                                                                                                        "f16")
    assert [round(r.gain, 3) for r in generation.gains] == [1.1, 1.358]  # 0.97 x 1.4 at depth 4096
    text = report_markdown(result)
    assert f"- `{FA_FLAG}`: rebuilt in 41 s (ccache: 271 hits, 12 misses); wheel `x.whl`" in text
    assert f'CMAKE_ARGS="$CMAKE_ARGS {FA_FLAG}"' in text
    assert ("llm = llama_cpp.Llama(model_path='/models/m.gguf', n_gpu_layers=33, n_threads=8, n_threads_batch=8, "
            "n_batch=512, n_ubatch=512, flash_attn=True, offload_kqv=True, use_mmap=True, "
            "type_k=llama_cpp.GGML_TYPE_Q8_0, type_v=llama_cpp.GGML_TYPE_F16)") in text
    assert "Build: type_k=q8_0 type_v=f16" not in text  # the hint is answered by the measurement
    saved = json.loads(json.dumps(__import__("dataclasses").asdict(result)))
    assert saved["targets"][0]["build_flags"][1]["cmake_args"] == [FA_FLAG]


def test_a_rebuild_that_failed_is_reported_and_nothing_is_recommended():
    result = tune("/models/m.gguf", 32, True, 8, 16, [0], 512, 64, 2, fa_speed(rebuilt=False), log=lambda line: None)
    failed = FlagBuild([FA_FLAG], False, error="the rebuild failed (pip exited with 1); see tune-build-attempt-1.log")
    tune_build_flags(result, build_flag_candidates(registry.unit("cuda").tune_build_flags, []), lambda flag: (failed, None), fa_speed(rebuilt=False),
                     log=lambda line: None)
    assert result.targets[0].build_flags == []
    assert f"- `{FA_FLAG}`: not measured: the rebuild failed (pip exited with 1)" in report_markdown(result)


def test_the_rebuilt_wheel_has_names_of_its_own_in_the_run_folder(tmp_path):
    layout = Layout(tmp_path)
    assert layout.tune_wheel_dir(1) != layout.wheel_dir(1)
    assert owner_of("tune-wheelhouse/attempt-2").step is Step.VERIFY  # type: ignore[union-attr]
    assert owner_of(layout.tune_build_log(2).name).step is Step.VERIFY  # type: ignore[union-attr]
    view = layout.for_tune_build()
    assert view.wheel_dir(1) == layout.tune_wheel_dir(1) and view.build_log(1) == layout.tune_build_log(1)


def test_the_parameter_needs_the_tune():
    assert load_params().verify.tune_build_flags is False
    assert load_params(None, ["verify.tune=true", "verify.tune_build_flags=true"]).verify.tune_build_flags
    with pytest.raises(ParameterError, match="verify.tune_build_flags .* needs verify.tune: true"):
        load_params(None, ["verify.tune_build_flags=true"])


@pytest.mark.long
def test_the_rebuild_goes_through_the_build_step_and_leaves_the_verified_wheel_alone(this_machine, tmp_path):
    """A real (tiny) scikit-build-core project built as the build step builds, then rebuilt with a flag added."""
    from playbook.steps.build import run_build
    from playbook.steps.configure import configure
    from playbook.verify.tune_build import wheel_builder

    cache, layout = tmp_path / "cache", Layout(tmp_path / "run")
    source = tree_source(compiled_project(tmp_path))
    plan = configure(this_machine, load_params(None, ["backend=cpu"]))
    verified = run_build(plan, source, layout, cache, {"gcc": "12"})
    assert verified.ok and verified.wheel is not None
    before = Path(verified.wheel.path).read_bytes()

    built = wheel_builder(plan, source, layout, cache, {"gcc": "12"})(["-DTINY_UNUSED_OPTION=1"])
    assert built.ok and not built.reused_wheel and built.cmake_args == ["-DTINY_UNUSED_OPTION=1"]
    assert Path(built.wheel).parent == layout.tune_wheel_dir(1) and Path(built.wheel).name == verified.wheel.name
    assert Path(verified.wheel.path).read_bytes() == before  # the same file name, never overwritten
    assert built.log_file == "tune-build-attempt-1.log"
    assert "-DTINY_UNUSED_OPTION=1" in layout.tune_build_log(1).read_text()
    assert "-DTINY_UNUSED_OPTION=1" not in layout.build_log(1).read_text()
    if plan.ccache:
        assert built.ccache.endswith(", 0 misses")  # the flag changed no compile command: ccache served it
    again = wheel_builder(plan, source, layout, cache, {"gcc": "12"})(["-DTINY_UNUSED_OPTION=1"])
    assert again.ok and again.reused_wheel and again.sha256 == built.sha256  # the wheel cache


def system_info(site_dir: Path) -> str:
    """llama.cpp's own account of what the installed wheel's CPU backend was built with, from a child."""
    import os
    import subprocess
    import sys

    code = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(site_dir)},
                          capture_output=True, text=True, timeout=120, check=True).stdout


@pytest.mark.slow  # cpu_wheel builds llama-cpp-python where no wheel is given; the rebuild compiles ggml-cpu again
def test_tune_build_flags_rebuild_the_real_cpu_wheel_and_measure_it(tmp_path, cpu_wheel, pinned_source, tiny_f16_model,
                                                                    this_machine):
    """verify.tune_build_flags on the CPU wheel: rebuilt with -DGGML_LLAMAFILE=OFF through the build step (the plan
    of the cpu_wheel fixture, whose session cache holds its ccache when it built the wheel), installed alone, measured
    beside the defaults on the verified wheel, and reported with the CMake and Llama(...) arguments together.
    PLAYBOOK_TEST_CACHE, as for built_rpc_server, keeps the rebuild's cache between sessions (its wheel cache then
    serves the rebuilt wheel), beside PLAYBOOK_TEST_WHEEL."""
    import os
    import sys

    from playbook.files import sha256_of
    from playbook.params import PARAMS_DIR
    from playbook.steps.configure import configure
    from playbook.verify.step import VerifyRequest, VerifyTarget, run_verify
    from playbook.verify.tune_build import wheel_builder

    source, session_cache = pinned_source
    cache = Path(os.environ.get("PLAYBOOK_TEST_CACHE") or session_cache)
    plan = configure(this_machine, load_params(PARAMS_DIR / "cpu-portable.yaml", [f"build.cache_dir={cache}"]))
    params = load_params(PARAMS_DIR / "cpu-portable.yaml", [
        f"model.path={tiny_f16_model}", "model.quant=F16", "verify.tune=true", "verify.tune_build_flags=true",
        "verify.tune_depths=[0, 32]", "verify.prompt_tokens=64", "verify.gen_tokens=16", "verify.repetitions=2",
        "verify.threads=2"])
    layout = Layout(tmp_path / "run")
    verified_sha = sha256_of(cpu_wheel)
    request = VerifyRequest(layout, cpu_wheel, params, VerifyTarget(expect_gpu=False, backend="cpu", tune_build_flags=registry.unit("cpu").tune_build_flags,
                                                                    cmake_args=list(plan.cmake_args)),
                            tmp_path, tmp_path / "cache",
                            tune_rebuild=wheel_builder(plan, source, layout, cache, {}, sys.executable, 1800))
    result = run_verify(request, log=print)
    tuned = result.measured(TUNE)
    assert tuned is not None, result.summary

    (built,) = tuned.flag_builds
    assert built.ok, built.error
    assert built.cmake_args == ["-DGGML_LLAMAFILE=OFF"] and built.sha256 != verified_sha
    assert Path(built.wheel).parent == layout.tune_wheel_dir(1) and sha256_of(cpu_wheel) == verified_sha
    log = layout.tune_build_log(1).read_text()
    assert "-DGGML_LLAMAFILE=OFF" in log
    if not built.reused_wheel:
        assert "sgemm.cpp" not in log  # llamafile's source is left out of ggml-cpu
    # what the flag changes at run time: the rebuilt CPU backend says it has no llamafile, the verified one does
    assert "LLAMAFILE = 1" in system_info(Path(result.site_dir))
    assert "LLAMAFILE = 1" not in system_info(tmp_path / "cache" / "site" / built.sha256[:16])

    (target,) = tuned.targets
    assert [c.workload for c in target.build_flags] == ["pp", "tg"]
    report = layout.unit_files(1, "tune").beside(".md").read_text()
    assert "Build flags (verify.tune_build_flags)" in report and "`-DGGML_LLAMAFILE=OFF`: " in report
    for choice in target.build_flags:
        assert choice.cmake_args == ["-DGGML_LLAMAFILE=OFF"]
        if choice.kept:
            assert choice.kept in report
        else:  # recommended: no slower than the defaults at any depth on its own test, every depth measured
            assert {(r.depth, r.test) for r in choice.gains} == {(0, choice.workload), (32, choice.workload)}
            assert all(r.gain >= 1.0 for r in choice.gains)
            assert 'CMAKE_ARGS="$CMAKE_ARGS -DGGML_LLAMAFILE=OFF"' in report
    tune_unit = next(u for u in result.units if u.name == "tune")
    assert {layout.in_run(Path(built.wheel)), "tune-build-attempt-1.log"} <= set(tune_unit.files)
