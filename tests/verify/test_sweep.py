import pytest

from playbook.verify.sweep import SweepPoint, layer_counts, plot_throughput, write_sweep_csv


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
    paths = plot_throughput(points, "test", tmp_path / "throughput")
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 1000 for p in paths)




def test_a_single_point_plot_has_a_readable_axis(tmp_path):
    import matplotlib.image

    paths = plot_throughput([SweepPoint(0, "ok", 0, 6662.3, 1474.3, 736.4, 223.5, 0.1)], "cpu", tmp_path / "one")
    assert matplotlib.image.imread(paths[0]).shape[0] > 100
