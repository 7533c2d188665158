"""The shared shard-mapped kernels: one gradient, communicated by all-reduce or by reduce-scatter.

Each builder takes the mesh and returns a ``Kernel``: a jitted ``jax.shard_map`` function that
checks its inputs' shapes against the mesh before JAX traces anything, places host arrays on the
mesh, and has a ``.lower(...)`` like any jitted function (used by ``collectives_in``). The
collective each kernel is named after is the last line of its body.

Builders are cached (``cached_builder``): the same mesh and arguments give the same ``Kernel``,
so a loop that calls ``all_reduce_gradient(mesh)`` again traces and compiles once per input shape,
not once per call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, TypeVar

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.constants import BETA, LR
from course_utils.devices.setup import axis_of
from course_utils.models.cost_model import COLLECTIVES
from course_utils.problems.regression import check_regression_shapes

BUILDER_CACHE_SIZE = 256  # kernels kept per builder (each holds its compiled programs)

Builder = TypeVar("Builder", bound=Callable[..., "Kernel"])


@dataclass(frozen=True)
class Kernel:
    """A jitted shard_map function with its input check and its input placements.

    Calling it checks the arguments, places host arrays (arrays already placed as the kernel wants
    them skip ``device_put``, which has a cost of its own on every call) and runs ``jitted``.

    Attributes:
        jitted: the jitted ``shard_map`` function itself (no checks, no placement).
        shardings: where each argument must live.
        check: raises a short ``ValueError`` for arguments that do not fit the mesh.
    """

    jitted: Callable
    shardings: tuple[NamedSharding, ...]
    check: Callable[..., None]

    def place(self, args: tuple) -> tuple:
        """Check ``args`` and put each on its sharding."""
        if len(args) != len(self.shardings):
            raise TypeError(f"expected {len(self.shardings)} arrays, got {len(args)}")
        self.check(*args)
        return tuple(
            a if isinstance(a, jax.Array) and a.sharding == s else jax.device_put(a, s)
            for a, s in zip(args, self.shardings)
        )

    def __call__(self, *args):
        return self.jitted(*self.place(args))

    def lower(self, *args):
        """``jitted.lower`` on the checked, placed arguments (for ``collectives_in``)."""
        return self.jitted.lower(*self.place(args))


def cached_builder(build: Builder) -> Builder:
    """Cache a kernel builder on its arguments (the mesh, a kind, …): the same arguments return
    the same ``Kernel``, whose jitted function then traces once per input shape.

    Arguments that cannot be hashed skip the cache (the builder's own check still says what is
    wrong); ``True`` and ``1`` are different keys; a builder that raised caches nothing.

    Examples:
        >>> calls = []
        >>> @cached_builder
        ... def build(mesh, kind):
        ...     calls.append(kind)
        ...     return (mesh, kind)
        >>> build("m", "all_reduce") is build("m", "all_reduce"), calls
        (True, ['all_reduce'])
    """
    cached = functools.lru_cache(maxsize=BUILDER_CACHE_SIZE, typed=True)(build)

    @functools.wraps(build)
    def builder(*args, **kwargs):
        try:
            hash((args, tuple(kwargs.items())))
        except TypeError:
            return build(*args, **kwargs)
        return cached(*args, **kwargs)

    builder.cache_clear = cached.cache_clear
    return builder  # type: ignore[return-value]


def make_kernel(
    mesh: Mesh, body: Callable, in_specs: tuple, out_specs, check: Callable[..., None]
) -> Kernel:
    """``body`` shard-mapped over ``mesh`` and jitted, as a ``Kernel`` with ``check``."""
    jitted = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs))
    return Kernel(jitted, tuple(NamedSharding(mesh, spec) for spec in in_specs), check)


def local_contribution(x_block, y_block, w, n_rows: int):
    """One device's share of the gradient: ``2 x_blockᵀ(x_block w − y_block) / n_rows``.

    ``n_rows`` is the *global* row count, so the p shares add up to the mean over all rows.
    """
    # x_block: f32[rows/p, features], y_block: f32[rows/p], w: f32[features]
    return 2 * x_block.T @ (x_block @ w - y_block) / n_rows


def _regression_kernel(mesh: Mesh, body: Callable, out_specs, *, split_features: bool) -> Kernel:
    axis, n_devices = axis_of(mesh), mesh.size

    def check(x, y, w) -> None:
        check_regression_shapes(x, y, w, n_devices, split_features=split_features)

    return make_kernel(mesh, body, (P(axis, None), P(axis), P()), out_specs, check)


def all_reduce_gradient(mesh: Mesh) -> Kernel:
    """The MSE gradient with ``psum``: every device ends with the whole gradient.

    Args:
        mesh: a one-axis mesh.

    Returns:
        A kernel of ``(x, y, w)`` (x row-sharded, y sharded, w replicated) returning
        the gradient, shape ``(n_features,)``, replicated on every device.
    """
    axis, p = axis_of(mesh), mesh.size

    def kernel(x_block, y_block, w):
        # x_block: f32[rows/p, features], y_block: f32[rows/p], w: f32[features]
        partial = local_contribution(x_block, y_block, w, x_block.shape[0] * p)  # f32[features]
        return jax.lax.psum(partial, axis)  # f32[features], the same on every device

    return _regression_kernel(mesh, kernel, P(), split_features=False)


def reduce_scatter_gradient(mesh: Mesh) -> Kernel:
    """The MSE gradient with ``psum_scatter`` (tiled): each device keeps 1/p of it.

    Only the last line of the kernel differs from ``all_reduce_gradient``'s: ``psum_scatter``
    in place of ``psum``, and the output is split by features (``P(axis)``).

    Args:
        mesh: a one-axis mesh.

    Returns:
        A kernel of ``(x, y, w)`` returning the gradient, shape ``(n_features,)``, sharded over
        the mesh axis: device i holds features ``i·f/p … (i+1)·f/p``.
    """
    axis = axis_of(mesh)

    def kernel(x_block, y_block, w):
        n_rows = x_block.shape[0] * mesh.size  # the global row count
        partial = local_contribution(x_block, y_block, w, n_rows)  # f32[features]
        return jax.lax.psum_scatter(partial, axis, tiled=True)  # f32[features/p]

    return _regression_kernel(mesh, kernel, P(axis), split_features=True)


def all_gather_shards(mesh: Mesh) -> Kernel:
    """Sharded → replicated with ``all_gather`` (tiled): every device ends with the whole vector.

    Args:
        mesh: a one-axis mesh; the vector comes split over its axis.

    Returns:
        A kernel of one 1-D array returning it replicated.
    """
    axis, p = axis_of(mesh), mesh.size

    def check(g) -> None:
        if np.ndim(g) != 1 or np.shape(g)[0] % p:
            raise ValueError(
                f"all_gather_shards expects a 1-D array whose length divides over {p} "
                f"devices, got shape {tuple(np.shape(g))}"
            )

    def kernel(g_block):
        # g_block: f32[n/p]; to="invarying" tells the vma check that the result is the same on
        # every device, so out_specs=P() passes with the check on (the same compiled all-gather)
        return jax.lax.all_gather(g_block, axis, tiled=True, to="invarying")  # f32[n]

    jitted = jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=P(axis), out_specs=P()))
    return Kernel(jitted, (NamedSharding(mesh, P(axis)),), check)


def momentum_update(w, v, g, lr, beta):
    """The heavy-ball momentum update, elementwise: entry j depends only on entry j of w, v, g."""
    v_new = beta * v + g
    return w - lr * v_new, v_new


_momentum = jax.jit(momentum_update)


def sharded_momentum_step(w, v, g, *, lr: float = LR, beta: float = BETA):
    """One heavy-ball momentum step, elementwise: ``v ← β·v + g``, ``w ← w − lr·v``.

    Elementwise operations keep their inputs' sharding, so with ``w``, ``v`` and ``g`` sharded
    by features each device updates only its own slice (the ZeRO-style sliced update).

    Args:
        w: weights.
        v: momentum, the shape of ``w``.
        g: gradient, the shape of ``w``.
        lr: learning rate.
        beta: momentum decay.

    Returns:
        ``(w_new, v_new)``, sharded like the inputs.
    """
    shapes = [tuple(np.shape(a)) for a in (w, v, g)]
    if len(set(shapes)) != 1:
        raise ValueError(
            f"w, v and g must have one shape, got w {shapes[0]}, v {shapes[1]}, g {shapes[2]}"
        )
    for name, value in (("lr", lr), ("beta", beta)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
            raise ValueError(f"{name} must be a number, got {value!r}")
    return _momentum(w, v, g, float(lr), float(beta))


def check_blocks(blocks, p: int, kind: str) -> None:
    """Raise a short ``ValueError`` unless ``blocks`` is ``(p, m)``, one row per device (and, for
    a reduce-scatter, ``m`` divisible by ``p``)."""
    shape = tuple(np.shape(blocks))
    if len(shape) != 2 or shape[0] != p:
        raise ValueError(f"expected blocks of shape ({p}, m), one row per device; got {shape}")
    if kind == "reduce_scatter" and shape[1] % p:
        raise ValueError(f"reduce_scatter needs m divisible by {p} devices; got blocks {shape}")


def block_collective(mesh: Mesh, kind: str) -> Kernel:
    """One collective on per-device blocks, returned as a per-device view.

    The input has shape ``(p, m)`` split by rows: device i holds block ``i`` (``m`` values). The
    output stacks what each device ends with along a leading device axis (row i lives on device i):

    - ``all_reduce`` (``psum``): ``(p, m)``, every row the sum of all blocks;
    - ``reduce_scatter`` (``psum_scatter``, tiled): ``(p, m/p)``, row i slice i of that sum;
    - ``all_gather`` (tiled): ``(p, p·m)``, every row all blocks one after another.

    Args:
        mesh: a one-axis mesh.
        kind: one of ``COLLECTIVES``.

    Returns:
        A kernel of one ``(p, m)`` array.
    """
    if kind not in COLLECTIVES:
        raise ValueError(f"kind must be one of {', '.join(COLLECTIVES)}, got {kind!r}")
    axis, p = axis_of(mesh), mesh.size

    def check(blocks) -> None:
        check_blocks(blocks, p, kind)

    def kernel(block):
        # block: f32[1, m], this device's row
        if kind == "all_reduce":
            return jax.lax.psum(block, axis)  # f32[1, m]
        if kind == "reduce_scatter":
            return jax.lax.psum_scatter(block[0], axis, tiled=True)[None]  # f32[1, m/p]
        return jax.lax.all_gather(block[0], axis, tiled=True)[None]  # f32[1, p*m]

    spec = P(axis, None)  # every output differs by device (row i on device i): vma check on
    jitted = jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=spec, out_specs=spec))
    return Kernel(jitted, (NamedSharding(mesh, spec),), check)


# every builder caches on its arguments (after the definitions, so inspect.getsource shows each
# as it is written)
all_reduce_gradient = cached_builder(all_reduce_gradient)
reduce_scatter_gradient = cached_builder(reduce_scatter_gradient)
all_gather_shards = cached_builder(all_gather_shards)
block_collective = cached_builder(block_collective)
