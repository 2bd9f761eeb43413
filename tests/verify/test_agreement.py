import numpy as np

from playbook.verify.agreement import compare_logits


def test_logit_comparison(tmp_path):
    rng = np.random.default_rng(0)
    cpu = rng.normal(size=(64, 100)).astype(np.float32)
    cpu.tofile(tmp_path / "cpu.f32")
    (cpu + rng.normal(scale=1e-3, size=cpu.shape).astype(np.float32)).tofile(tmp_path / "close.f32")
    rng.normal(size=cpu.shape).astype(np.float32).tofile(tmp_path / "wrong.f32")
    close = compare_logits(tmp_path / "cpu.f32", tmp_path / "close.f32", 100, "Q8_0")
    assert close.ok and close.relative_error < 1e-2 and close.top1_agreement > 0.95
    wrong = compare_logits(tmp_path / "cpu.f32", tmp_path / "wrong.f32", 100, "Q8_0")
    assert not wrong.ok and wrong.relative_error > 1


