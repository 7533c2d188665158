"""Guards on step 05's prose: the figure's caption (stored against sent) at every device count."""

import pytest

from course_utils import placement_figure_data, ring_bytes


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_reduce_scatter_halves_the_traffic_and_cuts_storage_by_p(p):
    n_values = 2 * p  # the notebook's gradient
    stored, sent = (
        panel["series"][0]["y"]
        for panel in placement_figure_data([n_values, 2, n_values], 4 * n_values, p)["panels"]
    )
    ring = ring_bytes(4 * n_values, p)
    assert sent == [ring.all_reduce, ring.reduce_scatter, ring.all_reduce]  # RS + AG = AR
    assert sent[0] == 2 * sent[1] and stored[0] == stored[2] == p * stored[1]


def test_the_sliced_path_fits_almost_twice_the_all_reduce_s_gradient_on_many_devices():
    from course_utils.checks.storage import largest_gradient_bytes

    ratios = [(lambda f: f["reduce_scatter"] / f["all_reduce"])(largest_gradient_bytes(2**20, p))
              for p in (2, 4, 8, 64)]
    assert ratios == sorted(ratios) and 1.3 < ratios[0] and 1.95 < ratios[-1] < 2  # the Read
