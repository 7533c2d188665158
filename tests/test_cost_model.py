"""The cost model's table, each derived quantity built a second way: by simulating who sends
what to whom, from the closed formulas, and from a compiled program's messages."""

import numpy as np
import pytest

from course_utils import (
    ALGORITHMS,
    Topology,
    bus_factor,
    bytes_sent,
    collectives_in,
    data_mesh,
    link_bytes_sent,
    message_steps,
    modelled_time,
    ring_all_gather,
    ring_payload,
    ring_reduce_scatter,
)
from course_utils.models.cost_model import schedule
from course_utils.models.links import link_bytes


def _ring(p, passes):
    return [[(r, (r + 1) % p, 1 / p) for r in range(p)]] * (passes * (p - 1))


def _butterfly(p, distances, fractions):
    return [[(r, r ^ d, f) for r in range(p)] for d, f in zip(distances, fractions)]


def _binomial(p, distances, up):
    # reduce: r sends to r - d when r % 2d == d; broadcast: r sends to r + d when r % 2d == 0
    return [[(r, r - d if up else r + d, 1.0) for r in range(p) if r % (2 * d) == (d if up else 0)]
            for d in distances]


def _messages(collective, algorithm, hosts, devices):
    """Every step's messages (sender, receiver, fraction of N), ranks numbered host by host."""
    p = hosts * devices
    up = [2**k for k in range(int(np.log2(p)))]
    if algorithm == "ring":
        return _ring(p, 2 if collective == "all_reduce" else 1)
    if algorithm == "recursive_doubling":
        fractions = [1.0] * len(up) if collective == "all_reduce" else [d / p for d in up]
        return _butterfly(p, up, fractions)
    if algorithm == "halving_doubling":
        halve = _butterfly(p, up[::-1], [d / p for d in up[::-1]])
        double = _butterfly(p, up, [d / p for d in up])
        return {"reduce_scatter": halve, "all_gather": double, "all_reduce": halve + double}[
            collective]
    if algorithm == "tree":
        return _binomial(p, up, True) + _binomial(p, up[::-1], False)
    # two_level: rings inside each host, then rings across the hosts of each local index
    inside = [[(h * devices + i, h * devices + (i + 1) % devices, 1 / devices)
               for h in range(hosts) for i in range(devices)]] * (devices - 1)
    across = [[(h * devices + i, ((h + 1) % hosts) * devices + i, 1 / p)
               for h in range(hosts) for i in range(devices)]] * (
                   (2 if collective == "all_reduce" else 1) * (hosts - 1))
    return {"reduce_scatter": inside + across, "all_gather": across + inside,
            "all_reduce": inside + across + inside}[collective]


CASES = [
    (c, a)
    for c in ("all_reduce", "reduce_scatter", "all_gather")
    for a in ("ring", "recursive_doubling", "halving_doubling", "tree", "two_level")
    if (c, a) not in {("reduce_scatter", "recursive_doubling"), ("reduce_scatter", "tree"),
                      ("all_gather", "tree")}
]


@pytest.mark.parametrize("collective, algorithm", CASES)
@pytest.mark.parametrize("hosts, devices", [(1, 4), (2, 2), (2, 4), (4, 2), (4, 4)])
def test_the_table_counts_what_a_simulation_of_the_messages_counts(
    collective, algorithm, hosts, devices
):
    topology, n = Topology(hosts, devices), 2**20
    steps = _messages(collective, algorithm, hosts, devices)
    assert message_steps(collective, algorithm, topology) == len(steps)
    # the busiest rank's bytes, and the busiest host's bytes over its link, step by step
    busiest = sum(max(sum(f for s, _, f in step if s == r) for r in range(hosts * devices))
                  for step in steps)
    crossing = sum(max(sum(f for s, d, f in step if s // devices == h != d // devices)
                       for h in range(hosts)) for step in steps)
    assert bytes_sent(collective, algorithm, n, topology) == pytest.approx(busiest * n)
    assert link_bytes_sent(collective, algorithm, n, topology) == pytest.approx(crossing * n)


def test_the_table_has_no_entry_a_collective_does_not_have():
    with pytest.raises(ValueError, match="use halving_doubling"):
        schedule("reduce_scatter", "recursive_doubling", Topology(1, 4))
    with pytest.raises(ValueError, match="algorithm must be one of"):
        schedule("all_reduce", "star", Topology(1, 4))
    with pytest.raises(ValueError, match="collective must be one of"):
        schedule("broadcast", "ring", Topology(1, 4))
    with pytest.raises(ValueError, match="hosts must be a positive integer"):
        schedule("all_reduce", "ring", Topology(0, 4))


@pytest.mark.parametrize("p", [2, 4, 8, 64])
def test_the_time_is_the_closed_formula_of_each_algorithm(p):
    alpha, rate, n = 3e-6, 2e9, 5e7
    big_l = int(np.log2(p))
    closed = {
        "ring": 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / rate,
        "recursive_doubling": big_l * (alpha + n / rate),
        "halving_doubling": 2 * big_l * alpha + 2 * (p - 1) / p * n / rate,
        "tree": 2 * big_l * (alpha + n / rate),
    }
    for a in ALGORITHMS:
        got = modelled_time("all_reduce", a, n, Topology(1, p), alpha_s=alpha, bytes_per_s=rate)
        assert got == pytest.approx(closed[a])
    assert bus_factor("all_reduce", p) == pytest.approx(2 * (p - 1) / p)
    assert bus_factor("reduce_scatter", p) == bus_factor("all_gather", p) == pytest.approx(
        (p - 1) / p)


@pytest.mark.parametrize("hosts, devices", [(2, 2), (2, 8), (4, 4), (8, 2)])
def test_parallel_rings_against_the_two_level_schedule(hosts, devices):
    # l = devices rings, each host using its l adapters: the two-level schedule's gain over them
    # is at most ((p−1)/p) / ((n−1)/n), reached as the hosts' inside gets infinitely fast
    p, n = hosts * devices, 2**26
    topology = Topology(hosts, devices, adapters=devices)

    def time(algorithm, inside):  # the hosts' inside `inside` times faster than an adapter
        return modelled_time("all_reduce", algorithm, n, topology, alpha_s=0.0,
                             bytes_per_s=1e9, local_bytes_per_s=inside * 1e9)

    assert time("ring", 1e9) == pytest.approx(devices * time("parallel_rings", 1e9))
    bound = ((p - 1) / p) / ((hosts - 1) / hosts)
    gains = [time("parallel_rings", f) / time("two_level", f) for f in (1, 10, 1e9)]
    assert gains[-1] == pytest.approx(bound, rel=1e-6)
    assert all(g <= bound * (1 + 1e-9) for g in gains)
    # the same bytes leave each host; one ring per adapter only spreads them
    assert link_bytes_sent("all_reduce", "parallel_rings", n, topology) == pytest.approx(
        link_bytes("all_reduce", n, hosts, devices))


def _messages_on_adapters(algorithm, hosts, devices, adapters):
    """The all-reduce's steps as messages (sender, receiver, fraction of N, adapter): the ring
    on adapter 0; ``adapters`` rings (channels), each over all ranks with N/adapters, channel c
    leaving each host on adapter c; the two-level schedule's device i on adapter i % adapters."""
    p = hosts * devices
    if algorithm == "parallel_rings":
        return [[(r, (r + 1) % p, 1 / (adapters * p), c) for c in range(adapters)
                 for r in range(p)]] * (2 * (p - 1))
    return [[(s, d, f, (s % devices) % adapters) if algorithm == "two_level" else (s, d, f, 0)
             for s, d, f in step] for step in _messages("all_reduce", algorithm, hosts, devices)]


@pytest.mark.parametrize("algorithm", ["ring", "parallel_rings", "two_level"])
@pytest.mark.parametrize("hosts, devices, adapters", [(2, 2, 2), (2, 4, 4), (2, 4, 2), (4, 2, 1),
                                                      (3, 4, 4)])
def test_the_modelled_time_on_adapters_is_a_simulation_of_the_messages(
    algorithm, hosts, devices, adapters
):
    # per step: α plus the longer of the busiest rank's send (inside the host's links) and the
    # busiest adapter's bytes out of its host; the table's streams spread a host's bytes over
    # min(streams, adapters) adapters, the simulation puts every message on its own adapter
    alpha, link, inside, n = 2e-6, 1e9, 7e9, 2**24
    p = hosts * devices
    steps = _messages_on_adapters(algorithm, hosts, devices, adapters)
    simulated = 0.0
    for step in steps:
        rank = max(sum(f for s, _, f, _ in step if s == r) for r in range(p))
        adapter = max(sum(f for s, d, f, a in step if s // devices == h != d // devices and a == k)
                      for h in range(hosts) for k in range(adapters))
        simulated += alpha + max(rank * n / inside, adapter * n / link)
    topology = Topology(hosts, devices, adapters)
    assert message_steps("all_reduce", algorithm, topology) == len(steps)
    assert modelled_time("all_reduce", algorithm, n, topology, alpha_s=alpha, bytes_per_s=link,
                         local_bytes_per_s=inside) == pytest.approx(simulated, rel=1e-9)


def test_the_table_bytes_are_the_bytes_a_compiled_ring_sends():
    mesh = data_mesh()
    p, m = mesh.size, 8 * mesh.size
    blocks = np.zeros((p, m), np.float32)
    for kernel, collective, nbytes in ((ring_reduce_scatter, "reduce_scatter", 4 * m),
                                       (ring_all_gather, "all_gather", 4 * m * p)):
        ops = collectives_in(kernel(mesh), blocks).hlo
        assert {o.op for o in ops} == {"collective-permute"}
        # each permute is one message per device: their bytes add up to what a rank sends
        assert sum(o.bytes for o in ops) == bytes_sent(collective, "ring", nbytes, Topology(1, p))
        assert len(ops) == message_steps(collective, "ring", Topology(1, p))
    psum = collectives_in(ring_reduce_scatter(mesh), blocks).hlo
    assert ring_payload(psum, p) == sum(o.bytes for o in psum)
