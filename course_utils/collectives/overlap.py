"""Overlap: the all-reduce of one bucket of gradients while the backward pass computes the next.

In one program XLA combines the layers' all-reduces into one, of every gradient, which waits for
the whole backward pass (``one_program_backward``). Between programs, JAX's CPU client keeps one
queue per device: the programs of one device run in the order they were dispatched (as a CUDA
stream runs its kernels), and programs of two devices can run at the same time. So each host
computes on its first device and sends from its second, its communication stream
(``stream_meshes``): the package's copy of step 19.

The model is a tower of tanh layers (``TOWER``) whose gradient arrives one layer, one bucket, at
a time, the last layer first, as DDP's buckets do. A host's loss is its share of the mean over
every host's rows, so the all-reduced (summed) gradient is the global one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXES = ("host", "device")


@dataclass(frozen=True)
class Tower:
    """``layers`` tanh layers of ``width`` units, trained on ``rows`` rows per host."""

    width: int
    layers: int
    rows: int

    @property
    def bucket_bytes(self) -> int:
        """One layer's float32 gradient, the bucket each all-reduce sends."""
        return 4 * self.width * self.width


TOWER = Tower(width=512, layers=16, rows=3072)  # what the cluster times (16 buckets of 1 MiB)


def stream_meshes(mesh: Mesh) -> tuple[Mesh, Mesh]:
    """``(compute, stream)``: one-axis ``"host"`` meshes of each host's first device and of its
    second (its first again when a host has one device: then nothing can overlap).

    Raises:
        ValueError: ``mesh`` is not a ``("host", "device")`` mesh.
    """
    if tuple(mesh.axis_names) != AXES:
        raise ValueError(f"expected a mesh with axes {AXES}, got {tuple(mesh.axis_names)}; "
                         "build it as Mesh(devices.reshape(hosts, -1), ('host', 'device'))")
    devices = mesh.devices
    return Mesh(devices[:, 0], ("host",)), Mesh(devices[:, min(1, devices.shape[1] - 1)],
                                                ("host",))


def move(x, sharding: NamedSharding):
    """``x`` on ``sharding``'s devices, each of this process's shards copied to the device that
    holds the same index there (a copy inside each host). ``jax.device_put`` does this in one
    process; across processes jax 0.10.2 on CPU refused a reshard between different sets of
    devices."""

    def key(index):
        return tuple((s.start, s.stop, s.step) for s in index)

    held = {key(s.index): s.data for s in x.addressable_shards}
    targets = sharding.addressable_devices_indices_map(x.shape)
    return jax.make_array_from_single_device_arrays(
        x.shape, sharding, [jax.device_put(held[key(i)], d) for d, i in targets.items()])


def tower_problem(tower: Tower, hosts: int, seed: int = 0):
    """``x, y`` (``hosts · rows`` rows of ``width``) and the weights ``ws`` (``layers`` square
    matrices), float32, the same in every process."""
    rng = np.random.default_rng(seed)
    n = hosts * tower.rows
    x = rng.standard_normal((n, tower.width)).astype(np.float32)
    y = (0.5 * rng.standard_normal((n, tower.width))).astype(np.float32)
    ws = (rng.standard_normal((tower.layers, tower.width, tower.width))
          / np.sqrt(tower.width)).astype(np.float32)
    return x, y, ws


def tower_loss(ws, x, y):
    """Half the mean over rows of the squared error of the tower's output (the global loss)."""
    h = x
    for w in ws:
        h = jnp.tanh(h @ w)
    return 0.5 * jnp.mean(jnp.sum((h - y) ** 2, axis=-1))


def layer_backward(h_in, h_out, g_out, w):
    """One tanh layer backwards: this layer's weight gradient and the gradient of its input."""
    dz = g_out * (1 - h_out * h_out)
    return h_in.T @ dz, dz @ w.T


class Programs(NamedTuple):
    """The jitted programs of the bucketed backward pass on a ``(compute, stream)`` pair."""

    forward: Callable  # (ws, x) -> activations [x, h1, ..., hL], rows split over the hosts
    top: Callable  # (h_L, y) -> the output's gradient of the global loss
    backward: Callable  # (h_in, h_out, g_out, w) -> (this host's f32[1, w, w] gradient, g_in)
    all_reduce: Callable  # f32[hosts, w, w] slices on the stream -> their sum, whole on each
    stream: NamedSharding  # where a host's gradient goes to be sent


def programs(compute: Mesh, stream: Mesh, total_rows: int) -> Programs:
    """The programs of ``overlapped_backward``: computing on ``compute``, sending on
    ``stream`` (pass ``compute`` twice to send from the computing device)."""
    rows = P("host", None)

    def forward(ws, x):
        hs = [x]
        for w in ws:
            hs.append(jnp.tanh(hs[-1] @ w))
        return hs

    def backward(h_in, h_out, g_out, w):
        grad, g_in = layer_backward(h_in, h_out, g_out, w)
        return grad[None], g_in

    def on(mesh, fn, in_specs, out_specs):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs))

    return Programs(
        forward=on(compute, forward, (P(), rows), rows),
        top=on(compute, lambda h, y: (h - y) / total_rows, (rows, rows), rows),
        backward=on(compute, backward, (rows, rows, rows, P()), (P("host"), rows)),
        all_reduce=on(stream, lambda g: jax.lax.psum(g[0], "host"), P("host"), P()),
        stream=NamedSharding(stream, P("host")),
    )


def overlapped_backward(progs: Programs, hs, ws, y) -> list:
    """Each layer's global gradient, first layer first. Each bucket's all-reduce is dispatched
    on the stream as soon as its backward program is, and nothing waits here: the stream sends
    bucket i while the compute device works on bucket i − 1."""
    g = progs.top(hs[-1], y)
    summed = []
    for i in reversed(range(len(ws))):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        summed.append(progs.all_reduce(move(grad, progs.stream)))
    return summed[::-1]


def serial_backward(progs: Programs, hs, ws, y) -> list:
    """The same gradients without overlap: the whole backward pass, then the all-reduces."""
    g, grads = progs.top(hs[-1], y), []
    for i in reversed(range(len(ws))):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        grads.append(grad)
    jax.block_until_ready(grads)
    return [progs.all_reduce(move(grad, progs.stream)) for grad in grads][::-1]


def one_program_backward(compute: Mesh, total_rows: int) -> Callable:
    """``(hs, ws, y) -> gradients`` as ONE jitted program on ``compute``, each layer's ``psum``
    written right after its gradient; XLA's all-reduce combiner merges them into one all-reduce
    at the end, so nothing is sent before the backward pass ends."""
    rows = P("host", None)

    def body(hs, ws, y):
        g, summed = (hs[-1] - y) / total_rows, []
        for i in reversed(range(len(ws))):
            grad, g = layer_backward(hs[i], hs[i + 1], g, ws[i])
            summed.append(jax.lax.psum(grad, "host"))
        return summed[::-1]

    return jax.jit(jax.shard_map(body, mesh=compute, in_specs=(rows, P(), rows),
                                 out_specs=P()))
