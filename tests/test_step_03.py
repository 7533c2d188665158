"""Step 03's exercise: a reduce-scatter of a gradient whose length p does not divide. The check
passes a right answer in several forms and names each slip; at other device counts in a
subprocess (the count is fixed once JAX starts)."""

import math
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import P
from jax.sharding import NamedSharding

from course_utils import data_mesh, local_contribution, reduce_scatter_gradient, reference_gradient
from course_utils.checks import ExerciseFailed, check_reduce_scatter

SPECS = (P("data", None), P("data"), P())
SLICED = P("data")


def _jitted(kernel, out_specs=SLICED, **options):
    return jax.jit(jax.shard_map(kernel, mesh=data_mesh(), in_specs=SPECS, out_specs=out_specs,
                                 **options))


def _share(x_block, y_block, w):  # this device's share, over the global row count
    return local_contribution(x_block, y_block, w, x_block.shape[0] * jax.lax.axis_size("data"))


def _padded(x_block, y_block, w):  # the answer: zeros at the end, to the next multiple of p
    share = _share(x_block, y_block, w)
    return jnp.pad(share, (0, -share.shape[0] % jax.lax.axis_size("data")))


def _right(x_block, y_block, w):
    return jax.lax.psum_scatter(_padded(x_block, y_block, w), "data", tiled=True)


def _right_concatenate(x_block, y_block, w):  # the padding written out with math.ceil
    share = _share(x_block, y_block, w)
    p = jax.lax.axis_size("data")
    zeros = jnp.zeros(p * math.ceil(share.shape[0] / p) - share.shape[0], share.dtype)
    return jax.lax.psum_scatter(jnp.concatenate([share, zeros]), "data", tiled=True)


def _right_padded_columns(x, y, w):  # zero columns of x and entries of w, outside the kernel
    pad = -x.shape[1] % jax.device_count()
    x, w = jnp.pad(x, ((0, 0), (0, pad))), jnp.pad(w, (0, pad))
    return jax.shard_map(lambda xb, yb, wb: jax.lax.psum_scatter(_share(xb, yb, wb), "data",
                                                                 tiled=True),
                         mesh=data_mesh(), in_specs=SPECS, out_specs=P("data"))(x, y, w)


def test_a_right_answer_passes_in_several_forms(capsys):
    for right in (_jitted(_right), _jitted(_right_concatenate), jax.jit(_right_padded_columns),
                  jax.shard_map(_right, mesh=data_mesh(), in_specs=SPECS, out_specs=P("data"))):
        check_reduce_scatter(right, data_mesh(), 4)
        assert capsys.readouterr().out == (
            "PASSED: reduce-scatter of any length (F = 9, 7, 8 features on p = 4: each device "
            "holds its slice of the zero-padded gradient, communicated by one reduce-scatter)\n")


def _front(x_block, y_block, w):
    share = _share(x_block, y_block, w)
    padded = jnp.pad(share, (-share.shape[0] % 4, 0))
    return jax.lax.psum_scatter(padded, "data", tiled=True)


def _by_p(x_block, y_block, w):  # p − F mod p: F + p when p divides F
    share = _share(x_block, y_block, w)
    return jax.lax.psum_scatter(jnp.pad(share, (0, 4 - share.shape[0] % 4)), "data", tiled=True)


def _unpadded(x_block, y_block, w):
    return jax.lax.psum_scatter(_share(x_block, y_block, w), "data", tiled=True)


def _all_reduce_then_slice(x_block, y_block, w):
    whole = jax.lax.psum(_padded(x_block, y_block, w), "data")
    k = whole.shape[0] // 4
    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("data") * k, k)


def _ones_padding(x_block, y_block, w):
    share = _share(x_block, y_block, w)
    padded = jnp.pad(share, (0, -share.shape[0] % 4), constant_values=1.0)
    return jax.lax.psum_scatter(padded, "data", tiled=True)


def _fixed_rows(x_block, y_block, w):  # the notebook's 16 rows, typed in
    share = local_contribution(x_block, y_block, w, 16)
    return jax.lax.psum_scatter(jnp.pad(share, (0, -share.shape[0] % 4)), "data", tiled=True)


def _fixed_rows_24(x_block, y_block, w):  # a typed-in count the first case does not have
    share = local_contribution(x_block, y_block, w, 24)
    return jax.lax.psum_scatter(jnp.pad(share, (0, -share.shape[0] % 4)), "data", tiled=True)


def _typed_in_length(length):  # the padded length from typed-in sizes
    def kernel(x_block, y_block, w):
        share = _share(x_block, y_block, w)
        return jax.lax.psum_scatter(jnp.pad(share, (0, length - share.shape[0])), "data",
                                    tiled=True)
    return kernel


def _first_rows_of_y(x_block, y, w):  # y whole on every device, its first rows taken
    k = x_block.shape[0]
    share = local_contribution(x_block, y[:k], w, k * jax.lax.axis_size("data"))
    return jax.lax.psum_scatter(jnp.pad(share, (0, -share.shape[0] % 4)), "data", tiled=True)


def _gather_rows(x_block, y_block, w):  # the whole data everywhere, then the reduce-scatter
    x, y = (jax.lax.all_gather(a, "data", tiled=True) for a in (x_block, y_block))
    share = local_contribution(x, y, w, x.shape[0]) / 4
    return jax.lax.psum_scatter(jnp.pad(share, (0, -share.shape[0] % 4)), "data", tiled=True)


def _two_halves(x_block, y_block, w):  # two reduce-scatters of half the rows each
    half = x_block.shape[0] // 2
    parts = [_padded(x_block[r], y_block[r], w) / 2 for r in (slice(None, half),
                                                              slice(half, None))]
    return sum(jax.lax.psum_scatter(s, "data", tiled=True) for s in parts)


def _gather_then_add(x_block, y_block, w):  # every share everywhere, added, one slice kept
    padded = _padded(x_block, y_block, w)
    whole = jax.lax.all_gather(padded, "data").sum(axis=0)
    k = whole.shape[0] // 4
    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("data") * k, k)


@pytest.mark.parametrize("fn, said", [
    (_jitted(_front), "padding at the front: the 9 real values must come first"),
    (_jitted(_by_p), "has 12 values: padded by p rather than to the next multiple of p; F = 8"),
    (_jitted(_unpadded), r"(?s)raised ValueError:\ntiled reduce_scatter operand scatter dimension "
                         r"size 9 must be divisible by shard_count 4.*\npsum_scatter\(tiled=True\) "
                         r"cuts the vector into p = 4 equal slices, and 9 values do not split "
                         r"into 4: pad the share with zeros"),
    (_jitted(_all_reduce_then_slice), r"has all-reduce and no reduce-scatter: an all-reduce then "
                                      r"a slice"),
    (_jitted(_ones_padding), "the padding holds values other than 0: pad with zeros"),
    (_jitted(_fixed_rows), r"divides by a fixed row count \(16, the notebook's n_rows\?\)"),
    (_jitted(_fixed_rows_24), r"\(16, 9\) divides by a fixed row count \(24, the notebook's"),
    (_jitted(_typed_in_length(8)), r"(?s)raised ValueError:\nindex can't contain negative "
                                   r"values\na negative padding: .* not from the page's"),
    (_jitted(_typed_in_length(12)), r"has shape \(12,\), expected \(8,\): .*; padded too far"),
    (jax.jit(jax.shard_map(_first_rows_of_y, mesh=data_mesh(), in_specs=(P("data", None), P(),
                                                                          P()), out_specs=SLICED)),
     r"paired its rows of x with the first 4 entries of y"),
    (_jitted(_gather_rows), "has all-gather besides the reduce-scatter: devices receive other"),
    (_jitted(_two_halves), "has 2 reduce-scatters: the share is sent in pieces"),
    (_jitted(_gather_then_add), r"has only all-gather: gathering the p shares and adding them "
                                r"on every device .* end with jax.lax.psum_scatter"),
    (_jitted(lambda xb, yb, w: _right(xb, yb, w) + 0 * jax.lax.psum(_share(xb, yb, w), "data")[0]),
     "has all-reduce besides the reduce-scatter: every device still receives the whole sum"),
    (_jitted(lambda xb, yb, w: 4 * _right(xb, yb, w)), r"4× the expected value.*\(P\(\) in "
                                                       r"in_specs\)"),
    (_jitted(lambda xb, yb, w: jax.lax.psum(_padded(xb, yb, w), "data")),
     r"has shape \(48,\), 4 whole gradients side by side.*all-reduce"),
    (_jitted(lambda xb, yb, w: jax.lax.psum(_padded(xb, yb, w), "data"), P()),
     r"right values but the wrong placement: it is replicated.*\(3,\) per device"),
    (_jitted(_right, P(), check_vma=False), r"has the shape of one slice, \(3,\)"),
    (_jitted(_right, P()), r"(?s)raised ValueError:.*out_specs.*each device holds a different"),
    (_jitted(lambda xb, yb, w: jax.lax.psum_scatter(_padded(xb, yb, w), "data")),
     r"(?s)ValueError:.*pass tiled=True to cut the vector"),
    (jax.jit(jax.shard_map(_right, mesh=data_mesh(), in_specs=(P(), P("data"), P()),
                           out_specs=P("data"))), r"(?s)broadcasting.*P\(\) hands a device"),
    (jax.jit(jax.shard_map(_right, mesh=data_mesh(), in_specs=SPECS, out_specs=NamedSharding(
        data_mesh(), P("data")))), r"(?s)PartitionSpecs, P\(...\), not NamedShardings"),
    (_jitted(lambda xb, yb: xb), r"(?s)positional argument.*three blocks"),
    (lambda x, y, w: jnp.asarray(reference_gradient(*map(np.asarray, (x, y, w)))),
     r"is not on the 4 devices: it was computed outside the mesh"),
    (reduce_scatter_gradient(data_mesh()), "the package's own kernel; write the shard_map"),
    (reduce_scatter_gradient(data_mesh()).jitted, "package's"),
    (jax.jit(lambda x, y, w: reduce_scatter_gradient(data_mesh()).jitted(x, y, w)), "package's"),
    (None, "my_reduce_scatter is not defined"),
    (np.zeros(12, np.float32), "is an object of type ndarray, not a function"),
])
def test_each_slip_is_named(fn, said):
    with pytest.raises(ExerciseFailed, match=said):
        check_reduce_scatter(fn, data_mesh(), 4)


def test_a_rebound_device_count_is_refused():
    with pytest.raises(ExerciseFailed, match="N_DEVICES was changed after setup"):
        check_reduce_scatter(_jitted(_right), data_mesh(), 1)


OTHER_COUNT = """
import course_utils as cu
cu.use_cpu_devices({p})
import jax, jax.numpy as jnp
from jax import P
from course_utils import checks

mesh = cu.data_mesh()

def kernel(x_block, y_block, w):
    p = jax.lax.axis_size("data")
    share = cu.local_contribution(x_block, y_block, w, x_block.shape[0] * p)
    return jax.lax.psum_scatter(jnp.pad(share, (0, -share.shape[0] % p)), "data", tiled=True)

specs = (P("data", None), P("data"), P())
checks.check_reduce_scatter(jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=specs,
                                                  out_specs=P("data"))), mesh, {p})
"""


@pytest.mark.parametrize("p", [1, 2, 3, 8])
def test_a_right_answer_passes_at_other_device_counts(p):
    done = subprocess.run([sys.executable, "-c", OTHER_COUNT.format(p=p)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("PASSED: reduce-scatter of any length"), done.stdout
