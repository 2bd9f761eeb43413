import csv
from pathlib import Path

import pytest

from playbook.verify.sweep import SweepPoint, layer_counts, plot_scale, plot_throughput, write_sweep_csv

SEVEN_B = Path(__file__).resolve().parents[2] / "outputs" / "reference" / "20261122T031414Z-vm" / "throughput-attempt-1.csv"


def png_and_svg(stem):
    return [stem.with_suffix(".png"), stem.with_suffix(".svg")]


@pytest.mark.parametrize(
    "n_layer, requested, offload, expected",
    [(16, [], True, [0, 4, 8, 13, 17]), (16, [], False, [0]), (16, [17, 0, 17], True, [0, 17]), (4, [], True, [0, 1, 2, 4, 5])],
)
def test_layer_counts(n_layer, requested, offload, expected):
    assert layer_counts(n_layer, requested, offload) == expected


def test_csv_and_plot(tmp_path):
    points = [SweepPoint(0, "ok", 0, 100.0, 2.0, 10.0, 0.5, 0.1), SweepPoint(17, "ok", 17, 900.0, 5.0, 300.0, 3.0, 0.2),
              SweepPoint(8, "crash")]
    csv = write_sweep_csv(points, tmp_path / "throughput.csv")
    assert csv.read_text().splitlines()[0].startswith("n_gpu_layers,status,offloaded_layers,pp_tokens_per_s")
    paths = plot_throughput(points, "test", png_and_svg(tmp_path / "throughput"))
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)




def test_a_single_point_plot_has_a_readable_axis(tmp_path):
    import matplotlib.image

    paths = plot_throughput([SweepPoint(0, "ok", 0, 6662.3, 1474.3, 736.4, 223.5, 0.1)], "cpu", png_and_svg(tmp_path / "one"))
    assert matplotlib.image.imread(paths[0]).shape[0] > 100


def reference_points(path: Path) -> list[SweepPoint]:
    rows = list(csv.DictReader(path.open()))
    return [SweepPoint(int(r["n_gpu_layers"]), r["status"], pp_tokens_per_s=float(r["pp_tokens_per_s"]),
                       tg_tokens_per_s=float(r["tg_tokens_per_s"])) for r in rows]


def test_a_curve_spanning_more_than_a_decade_is_drawn_on_a_log_axis(tmp_path):
    seven_b = reference_points(SEVEN_B)  # token generation 16.8 -> 362.9 t/s
    assert plot_scale(seven_b) == "log" and plot_scale(seven_b, "linear") == "linear"
    flat = [SweepPoint(0, "ok", pp_tokens_per_s=100.0, tg_tokens_per_s=50.0),
            SweepPoint(8, "ok", pp_tokens_per_s=400.0, tg_tokens_per_s=90.0)]
    assert plot_scale(flat) == "linear"
    paths = plot_throughput(seven_b, "7B", png_and_svg(tmp_path / "seven"), scale="auto")
    assert "(log scale)" in paths[1].read_text()


def test_a_cpu_only_build_is_a_bar_titled_as_such(tmp_path):
    paths = plot_throughput([SweepPoint(0, "ok", 0, 120.3, 1.2, 80.5, 0.4, 0.1)], "tiny.gguf", png_and_svg(tmp_path / "cpu"),
                            gpu_offload=False)
    svg = paths[1].read_text()
    assert "CPU-only build" in svg and "all layers on the CPU" in svg and "n_gpu_layers" not in svg
    crashed = plot_throughput([SweepPoint(0, "crash")], "tiny.gguf", png_and_svg(tmp_path / "crash"), gpu_offload=False)
    assert "crash" in crashed[1].read_text()
