from __future__ import annotations

import pytest

from playbook.errors import ParameterError
from playbook.params import DEFAULT_PARAMS, PARAMS_DIR, load_params


@pytest.mark.parametrize("name", sorted(p.name for p in PARAMS_DIR.glob("*.yaml")))
def test_every_shipped_parameter_file_loads(name):
    params = load_params(PARAMS_DIR / name)
    assert params.source.kind in ("sdist", "path")


def test_default_pins_version_and_sha256():
    params = load_params(DEFAULT_PARAMS)
    assert params.source.version == "0.3.36"
    assert params.source.sha256 == "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
    assert params.backend == "auto"


def test_overrides_are_typed():
    params = load_params(None, ["model.shape=1b", "verify.n_gpu_layers=[0, 8, 17]", "build.jobs=4",
                                "build.cmake_args=['-DGGML_NATIVE=OFF']"])
    assert params.model.shape == "1b"
    assert params.verify.n_gpu_layers == [0, 8, 17]
    assert params.build.jobs == 4
    assert params.build.cmake_args == ["-DGGML_NATIVE=OFF"]
    assert load_params(None, ["build.ccache=off"]).build.ccache == "off"  # YAML's bare off is false


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.shap=1b", "unknown parameter 'model.shap'; accepted keys here: path, quant, seed, shape"),
        ("bakend=cpu", "unknown parameter 'bakend'"),
        ("backend=rocm", "parameter backend = 'rocm'; accepted values: auto, cuda, hip, metal, vulkan, sycl, openblas, mkl, cpu"),
        ("verify.repetitions=three", "parameter verify.repetitions = 'three'; accepted: a whole number of 1 or more"),
        ("build.jobs=many", "parameter build.jobs = 'many'; accepted: a whole number of 1 or more, or auto"),
        ("build.jobs=0", "parameter build.jobs = 0; accepted: a whole number of 1 or more, or auto"),
        ("build.jobs=-3", "parameter build.jobs = -3; accepted: a whole number of 1 or more, or auto"),
        ("build.max_attempts=0", "parameter build.max_attempts = 0; accepted: a whole number of 1 or more"),
        ("model.quant=Q5_K", "accepted values: F32, F16, Q8_0, Q4_0"),
        ("model.path=/no/such/model.gguf", "model.path '/no/such/model.gguf' is not a file"),
        ("source.version=latest", "source.version 'latest' is not a llama-cpp-python version"),
        ("source.sha256=abc", "source.sha256 must be the 64-hex-digit sha256"),
        ("verify.n_gpu_layers=[-1]", "verify.n_gpu_layers takes layer counts of 0 or more"),
        ("model", "--set takes KEY=VALUE"),
    ],
)
def test_bad_parameters_name_the_key(override, message):
    with pytest.raises(ParameterError, match=None) as error:
        load_params(None, [override])
    assert message in str(error.value)


def test_unreadable_parameter_file(tmp_path):
    with pytest.raises(ParameterError, match="cannot read parameter file"):
        load_params(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("backend: [unclosed")
    with pytest.raises(ParameterError, match="not valid YAML"):
        load_params(bad)


@pytest.mark.parametrize("url, message", [
    ("cache:6379", "accepted schemes: redis, http"),
    ("https://cache/ccache", "accepted schemes: redis, http"),
    ("redis://", "names no host"),
    ("redis://cache:port", "port that is not a number"),
    ("http://cache:8080/a|b", "'|'"),
])
def test_ccache_remote_is_a_url_ccache_accepts(url, message):
    with pytest.raises(ParameterError, match="build.ccache_remote") as raised:
        load_params(None, [f"build.ccache_remote={url}"])
    assert message in str(raised.value)


def test_ccache_remote_needs_ccache():
    assert load_params(None, ["build.ccache_remote=redis://cache:6379"]).build.ccache_remote == "redis://cache:6379"
    with pytest.raises(ParameterError, match="build.ccache is off"):
        load_params(None, ["build.ccache_remote=redis://cache:6379", "build.ccache=off"])
