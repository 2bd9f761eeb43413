"""rocm.yaml (ROCm release x gfx target) and vulkan.yaml: every row has a public source, and each rule
the planner reads answers as its row says."""

from __future__ import annotations

from playbook.knowledge.compatibility import (
    gfx_targets,
    knowledge,
    llama_cpp_min_rocm,
    rocm_supports_gfx,
    vulkan_min_headers,
)


def test_every_rocm_row_names_a_public_source():
    rows = knowledge("rocm")["targets"]
    assert len(rows) == len(gfx_targets()) >= 10  # no gfx id twice
    for row in rows:
        assert row["source"].startswith("https://"), row["gfx"]
        assert row["gfx"].startswith("gfx") and row["products"]
        assert row["supported"] == bool(row["min_rocm"]), row["gfx"]  # a supported target says since when
        assert row["supported"] or row.get("override"), row["gfx"]  # an unsupported one says how people run it


def test_rocm_release_by_gfx_target():
    assert rocm_supports_gfx("6.2", "gfx1100")[0] is True
    assert rocm_supports_gfx("5.6", "gfx1100")[0] is False
    ok, why = rocm_supports_gfx("6.4.0", "gfx1201")
    assert ok is False and "needs ROCm 6.4.1 or newer" in why
    assert rocm_supports_gfx("6.4.1", "gfx1201")[0] is True
    ok, why = rocm_supports_gfx("6.2", "gfx1103")
    assert ok is False and "HSA_OVERRIDE_GFX_VERSION=11.0.0" in why and "issues/3059" in why
    assert rocm_supports_gfx("6.4", "gfx906")[0] is False and rocm_supports_gfx("6.2", "gfx906")[0] is True
    assert rocm_supports_gfx("6.2", "gfx9999")[0] is None
    assert llama_cpp_min_rocm()[0] == "6.1"


def test_vulkan_minimum_headers_have_a_source():
    minimum, source, newer = vulkan_min_headers()
    assert minimum == "1.3.272" and source.startswith("https://") and "Debian 13" in newer
    assert knowledge("vulkan")["cpu_devices"]["variable"] == "GGML_VK_VISIBLE_DEVICES"
