import jax
import pytest

from course_utils import data_mesh, placements, use_cpu_devices


def test_four_devices_configured_and_same_count_is_a_noop():
    use_cpu_devices(4)
    assert jax.device_count() == 4
    assert {d.platform for d in jax.devices()} == {"cpu"}


def test_other_count_after_start_names_both_counts_and_the_fix():
    jax.devices()
    with pytest.raises(RuntimeError) as err:
        use_cpu_devices(2)
    message = str(err.value)
    assert "4 CPU device" in message and "2 requested" in message
    assert "restart the kernel" in message and "use_cpu_devices(2)" in message


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True, None])
def test_bad_counts_are_value_errors(bad):
    with pytest.raises(ValueError, match="positive integer"):
        use_cpu_devices(bad)


@pytest.mark.parametrize("n", [2, 8])
def test_fresh_process_gets_the_requested_count(run_with_devices, n):
    assert run_with_devices(n, "print(json.dumps(jax.device_count()))") == n


def test_mesh_and_placements():
    mesh = data_mesh()
    assert mesh.axis_names == ("data",) and mesh.size == 4
    rows, replicated, sliced = placements(mesh)
    assert rows.spec == jax.sharding.PartitionSpec("data", None)
    assert replicated.spec == jax.sharding.PartitionSpec()
    assert sliced.spec == jax.sharding.PartitionSpec("data")
    assert placements(data_mesh("batch")).sliced.spec == jax.sharding.PartitionSpec("batch")


def test_bad_axis_name_and_two_axis_mesh():
    with pytest.raises(ValueError, match="axis_name"):
        data_mesh("")
    two_axes = jax.make_mesh((2, 2), ("a", "b"))
    with pytest.raises(ValueError, match="one-axis mesh"):
        placements(two_axes)
