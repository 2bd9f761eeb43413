"""The CUDA unit's rules for a published wheel: which machine code and PTX run on which GPU, and the driver's
CUDA release against the wheel's. Values in, values out: no GPU needed."""

from __future__ import annotations

import pytest
from conftest import H100, RTX_4070, make_facts

from playbook.backends import registry
from playbook.facts import Gpu, NvidiaDriver

CUDA = registry.unit("cuda")
RTX_3090 = Gpu(0, "NVIDIA GeForce RTX 3090", 24576, "8.6")


def machine(base, gpu: Gpu | None, driver_cuda: str = "12.8"):  # type: ignore[no-untyped-def]
    return make_facts(base, gpus=[gpu] if gpu else [],
                      driver=NvidiaDriver(gpu is not None, "570.86.10" if gpu else "", driver_cuda if gpu else ""))


def built(architectures: str, release: str = "12.8", listed: tuple[str, ...] = ()) -> dict:
    return CUDA.wheel_requirements(["-DGGML_CUDA=on", f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"], release,
                                   list(listed))


def test_what_a_cuda_wheel_holds_comes_from_its_architectures_and_its_listing():
    assert built("86;90-virtual;120a-real", "12.8.93") == {
        "release": "12.8", "sass": ["sm_86", "sm_120a"], "ptx": ["compute_86", "compute_90"], "sass_listed": False}
    assert built("86;89", listed=("sm_86",))["sass"] == ["sm_86"]  # cuobjdump's listing is what the wheel holds
    assert built("native") == {"release": "12.8", "sass": [], "ptx": [], "sass_listed": False}  # CMake's word
    assert registry.unit("cpu").wheel_requirements(["-DGGML_CUDA=off"], "", []) == {}


def test_sm_90_machine_code_is_never_chosen_for_an_sm_86_gpu(this_machine):
    fit = CUDA.wheel_fit(built("90-real"), machine(this_machine, RTX_3090))
    assert not fit.ok and "nothing that runs on sm_86" in fit.reason
    fit = CUDA.wheel_fit(built("90"), machine(this_machine, RTX_3090))  # sm_90 and compute_90: neither runs
    assert not fit.ok
    assert not CUDA.wheel_fit(built("86a-real"), machine(this_machine, RTX_4070)).ok  # 86a: the sm_86 GPU only


def test_machine_code_ranks_above_an_older_minor_above_ptx(this_machine):
    ada = machine(this_machine, RTX_4070)  # sm_89
    exact, older, ptx = (CUDA.wheel_fit(built(a), ada) for a in ("89-real", "86-real", "80-virtual"))
    assert exact.ok and older.ok and ptx.ok
    assert "native machine code sm_89" in exact.reason and "sm_86 runs on sm_89" in older.reason
    assert "PTX compute_80 only" in ptx.reason
    assert exact.rank > older.rank > ptx.rank


@pytest.mark.parametrize(("ptx", "gpu", "ok"), [("80-virtual", RTX_3090, True), ("90-virtual", H100, True),
                                                ("90-virtual", RTX_3090, False), ("120-virtual", H100, False),
                                                ("90a-virtual", H100, False)])
def test_ptx_runs_only_on_a_gpu_of_its_capability_or_newer(this_machine, ptx, gpu, ok):
    fit = CUDA.wheel_fit(built(ptx), machine(this_machine, gpu))
    assert fit.ok is ok, fit.reason


def test_a_cuda_release_newer_than_the_driver_is_refused(this_machine):
    fit = CUDA.wheel_fit(built("86-real", "13.0"), machine(this_machine, RTX_3090, "12.8"))
    assert not fit.ok and "CUDA 13.0 is newer than the driver supports (CUDA 12.8)" in fit.reason
    assert CUDA.wheel_fit(built("86-real", "12.4"), machine(this_machine, RTX_3090, "12.8")).ok
    unknown = make_facts(this_machine, gpus=[RTX_3090], driver=NvidiaDriver(True, "", ""))
    assert not CUDA.wheel_fit(built("86-real"), unknown).ok


def test_without_an_nvidia_gpu_no_cuda_wheel_fits(this_machine):
    fit = CUDA.wheel_fit(built("86"), machine(this_machine, None))
    assert not fit.ok and "no NVIDIA GPU" in fit.reason


def test_other_backends_need_a_gpu_of_theirs_and_the_cpu_ones_nothing(this_machine):
    facts = make_facts(this_machine, gpus=[])
    facts.vulkan.devices, facts.rocm.gpus, facts.sycl.devices, facts.apple.chip = [], [], [], ""
    for name in ("hip", "vulkan", "sycl", "metal"):
        fit = registry.unit(name).wheel_fit({}, facts)
        assert not fit.ok and name in fit.reason, fit
    assert registry.unit("cpu").wheel_fit({}, facts).ok
    assert not registry.unit("prebuilt").wheel_fit({}, facts).ok
