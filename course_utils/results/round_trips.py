"""What round trips cost the algorithms: the latency run (``latency.json``) read against the
models, cell by cell (a link rate and a one-way delay), each figure the median over the runs.

- **All-reduces** (``allreduce_cells``): the ring and recursive doubling built from ``ppermute``
  against the α-β model (``models.latency.collective_time``) with the cell's measured α per
  message step (``LatencyResults.alpha_ms``) and the link's payload rate
  (``models.links.payload_bytes_per_s``). Two models of recursive doubling: the textbook's, in
  which each step's swap sends both ways at once, and gloo's, in which the two directions cross
  one after the other (``SWAP_FACTOR``). A cell is read against a model only where every
  message is at least ``MIN_BDPS`` bandwidth-delay products (``bdp``: the payload rate times the
  idle round trip): below that TCP's window, not the link, can set the time.
- **The crossover** (``crossover``): the vector size at which the ring starts to beat recursive
  doubling, measured (between the two sizes where the order flips, geometrically) and modelled
  (``models.latency.crossover_bytes``).
- **One connection** (``connection``): a clamped window's rate against window / round trip, several
  connections against k windows, an open window against the link, and a sync's seconds fresh,
  back to back and after an idle gap against ``models.window.slow_start_s``.
- **DiLoCo at a delay** (``saved_delayed_diloco``): the diloco measurement's rounds at a 50 ms
  one-way delay. The saved latency run: ``saved_latency_results`` (``results.latency``).

Why gloo's swap takes twice its bytes: XLA's CPU ``ppermute`` on gloo posts its send, then its
receive (``GlooCommunicator::CollectivePermute``, xla/backends/cpu/collectives/
gloo_communicator.cc); each pair of processes has one TCP connection, on which gloo writes the
pair's messages in the order they were posted (``Pair::sendAsyncMode``, gloo/transport/tcp/
pair.cc), and a sender waits for its receiver's ready notice (``NOTIFY_RECV_READY``). A host that
reaches a swap after its partner finds the partner's notice there: its S bytes go at once, and
its own notice, posted by its receive just after, follows them on the same connection. The
partner's S bytes start only once they have crossed: the two directions take turns. A ring step
sends on one connection and receives on another. The run's ``swap`` (one recursive-doubling step
alone) shows the factor directly. ``psum`` is gloo's own ring all-reduce (the same file sets
``Algorithm::RING``).
"""

from __future__ import annotations

import math
import statistics
from typing import NamedTuple

from course_utils.models.latency import collective_time, crossover_bytes
from course_utils.models.links import payload_bytes_per_s
from course_utils.models.window import slow_start_s, window_rate
from course_utils.results.cluster import Goal
from course_utils.results.latency import (  # noqa: F401  saved_latency_results: read here too
    LatencyResults,
    latency_lines,
    saved_latency_results,
)
from course_utils.results.overlap import Spread, spread

MIN_BDPS = 4  # a message read against a model is at least this many bandwidth-delay products
SHARE = 0.15  # a model holds a cell when it is within 15 % of the measured median
CROSSOVER_FACTOR = 2.0  # the measured crossover within a factor of 2 of the model's
SWAP_FACTOR = 2  # gloo: the two directions of a swap cross one after the other
MODELLED = {"ring": "ring", "doubling": "recursive_doubling"}  # the run's names: the model's
MODELS = ("textbook", "gloo")


class AllReduceCell(NamedTuple):
    """One all-reduce at one size in one cell: the measured ms over the runs, each model's ms,
    the bytes of one of its messages and the cell's bandwidth-delay product."""

    link_rate: str
    delay_ms: float
    algorithm: str
    size: int
    measured_ms: Spread
    textbook_ms: float
    gloo_ms: float
    message_bytes: float
    bdp_bytes: float

    def error(self, model: str) -> float:
        """``model``'s ms over the measured median, less 1."""
        return getattr(self, f"{model}_ms") / self.measured_ms.median - 1

    @property
    def long_messages(self) -> bool:
        """Whether every message is at least ``MIN_BDPS`` bandwidth-delay products."""
        return self.message_bytes >= MIN_BDPS * self.bdp_bytes


def round_trip_s(results: LatencyResults, rate: str, delay_ms: float) -> float:
    """The idle line's round trip in the cell (the median over the runs), in seconds."""
    return results.round_trip_ms(rate, delay_ms).median / 1e3


def bdp(results: LatencyResults, rate: str, delay_ms: float) -> float:
    """The cell's bandwidth-delay product: the payload rate times the idle round trip, bytes."""
    return payload_bytes_per_s(rate) * round_trip_s(results, rate, delay_ms)


def measured_ms(results: LatencyResults, rate: str, delay_ms: float, name: str) -> list[Spread]:
    """All-reduce ``name`` (``ring``, ``doubling``, ``psum`` or ``swap``) at each of the run's
    sizes: its ms over the runs."""
    runs = results.cell(rate, delay_ms)
    return [spread([r.allreduce_ms[name][i] for r in runs])
            for i in range(len(runs[0].allreduce_sizes))]


def modelled_ms(results: LatencyResults, rate: str, delay_ms: float, algorithm: str,
                size: float, model: str = "gloo") -> float:
    """The α-β model's ms for ``algorithm`` (``ring`` or ``doubling``) of ``size`` bytes over
    the run's hosts: the cell's α per message step and the link's payload rate; in ``gloo``'s
    model each recursive-doubling step's bytes take ``SWAP_FACTOR`` times as long."""
    alpha_s = results.alpha_ms(rate, delay_ms).median / 1e3
    factor = SWAP_FACTOR if model == "gloo" and algorithm == "doubling" else 1
    return 1e3 * collective_time(factor * size, results.cluster.hosts, alpha_s=alpha_s,
                                 bandwidth_bytes_per_s=payload_bytes_per_s(rate),
                                 algorithm=MODELLED[algorithm])


def allreduce_cells(results: LatencyResults) -> list[AllReduceCell]:
    """Every rate, delay, algorithm (ring, recursive doubling) and size of the run."""
    p, cells = results.cluster.hosts, []
    for rate in results.rates():
        for delay_ms in results.line_delays():
            sizes = results.cell(rate, delay_ms)[0].allreduce_sizes
            for name in MODELLED:
                for size, measured in zip(sizes, measured_ms(results, rate, delay_ms, name)):
                    cells.append(AllReduceCell(
                        rate, delay_ms, name, size, measured,
                        modelled_ms(results, rate, delay_ms, name, size, "textbook"),
                        modelled_ms(results, rate, delay_ms, name, size, "gloo"),
                        size / p if name == "ring" else size, bdp(results, rate, delay_ms)))
    return cells


def share_within(cells: list[AllReduceCell], model: str) -> float:
    """The share of ``cells`` whose ``model`` is within ``SHARE`` of the measured median."""
    return sum(abs(c.error(model)) <= SHARE for c in cells) / len(cells)


class Crossover(NamedTuple):
    """Where the ring starts to beat recursive doubling in one cell: measured (``None`` where
    the order never flips within the sizes; ``side`` says which way; ``between``: the two sizes
    it lies between) and each model's."""

    measured: float | None
    side: str  # "within", "below" (the ring faster at every size) or "above" (never)
    textbook: float
    gloo: float
    between: tuple[int, int] | None = None

    def within(self, model: str) -> bool | None:
        """Whether the measured crossover is within ``CROSSOVER_FACTOR`` of ``model``'s;
        ``None`` where none was measured."""
        if self.measured is None:
            return None
        return 1 / CROSSOVER_FACTOR <= self.measured / getattr(self, model) <= CROSSOVER_FACTOR


def crossover(results: LatencyResults, rate: str, delay_ms: float,
              run: int | None = None) -> Crossover:
    """The cell's crossover: the first size from which the ring is faster at every larger size,
    placed between it and the size before where log(ring / doubling) crosses 0; of the medians
    over the runs, or of run ``run`` alone."""
    rows = results.cell(rate, delay_ms)
    sizes = rows[0].allreduce_sizes
    if run is None:
        ring, doubling = ([s.median for s in measured_ms(results, rate, delay_ms, name)]
                          for name in ("ring", "doubling"))
    else:
        row = next(r for r in rows if r.run == run)
        ring, doubling = row.allreduce_ms["ring"], row.allreduce_ms["doubling"]
    ratios = [math.log(r / d) for r, d in zip(ring, doubling)]
    alpha_s, p = results.alpha_ms(rate, delay_ms).median / 1e3, results.cluster.hosts
    models = [crossover_bytes(p, alpha_s=alpha_s, bandwidth_bytes_per_s=payload_bytes_per_s(rate),
                              swap_factor=f) for f in (1, SWAP_FACTOR)]
    first = next((i for i in range(len(sizes)) if all(x < 0 for x in ratios[i:])), None)
    if first is None:
        return Crossover(None, "above", *models)
    if first == 0:
        return Crossover(None, "below", *models)
    a, b = ratios[first - 1], ratios[first]
    at = math.log(sizes[first - 1]) + a / (a - b) * math.log(sizes[first] / sizes[first - 1])
    return Crossover(math.exp(at), "within", *models, (sizes[first - 1], sizes[first]))


def crossover_runs(results: LatencyResults, rate: str, delay_ms: float) -> list[Crossover]:
    """The cell's crossover in each run alone (``crossover`` with ``run``)."""
    return [crossover(results, rate, delay_ms, r.run) for r in results.cell(rate, delay_ms)]


class Connection(NamedTuple):
    """One cell's TCP connection: each figure over the runs (``Spread``) and its model.
    Rates in bytes per second, syncs in seconds."""

    one_clamped: Spread
    several_clamped: Spread
    one_open: Spread
    fresh: Spread
    warm: Spread
    idle: Spread
    window: float  # the window the receiver advertised (bytes, the median over the runs)
    window_model: float  # window / round trip, at most the link
    several_model: float  # k windows / round trip, at most the link
    link: float  # the payload rate
    fresh_model: float  # slow_start_s: handshake, slow start, the rest, the reply
    warm_model: float  # the bytes at the link's rate and one round trip
    idle_model: float  # slow start again, without the handshake


def connection(results: LatencyResults, rate: str, delay_ms: float) -> Connection:
    """The cell's connection figures (each run's median sync first) against their models."""
    rows = [r.tcp for r in results.cell(rate, delay_ms)]
    tcp, rtt, link = rows[0], round_trip_s(results, rate, delay_ms), payload_bytes_per_s(rate)
    fresh, window = slow_start_s(tcp.sync_bytes, link, rtt), statistics.median(
        r.window_seen for r in rows)

    def over_runs(key: str) -> Spread:
        values = [getattr(r, key) for r in rows]
        return spread([statistics.median(v) if isinstance(v, tuple) else v for v in values])

    return Connection(
        over_runs("one_clamped"), over_runs("several_clamped"), over_runs("one_open"),
        over_runs("fresh_s"), over_runs("warm_s"), over_runs("idle_s"),
        window, window_rate(window, rtt, link),
        window_rate(window, rtt, link, connections=tcp.connections),
        link, fresh, tcp.sync_bytes / link + rtt, fresh - rtt)


def algorithm_goals(results: LatencyResults) -> list[tuple[str, Goal]]:
    """The all-reduces' goals: for the ring and recursive doubling, the share of the cells with
    messages of at least ``MIN_BDPS`` BDPs within ``SHARE`` of each model (the ring's models are
    one); and in every cell where the order flips, the crossover within ``CROSSOVER_FACTOR``."""
    cells = [c for c in allreduce_cells(results) if c.long_messages]
    found = []
    for name in MODELLED:
        mine = [c for c in cells if c.algorithm == name]
        for model in MODELS if name == "doubling" else ("gloo",):
            if not mine:
                continue
            share = share_within(mine, model)
            label = f"{name} ({model}'s model)" if name == "doubling" else name
            found.append((f"{label} within {SHARE:.0%}, messages ≥ {MIN_BDPS} BDP",
                          Goal(share, f"the share of {len(mine)} cells", share == 1.0)))
    for rate in results.rates():
        for delay_ms in results.line_delays():
            seen = crossover(results, rate, delay_ms)
            for model in MODELS:
                held = seen.within(model)
                if held is not None:
                    found.append((f"crossover at {rate}, {delay_ms:g} ms, {model}'s model",
                                  Goal(seen.measured / getattr(seen, model),
                                       f"within {CROSSOVER_FACTOR:g}× of 1", held)))
    return found


def round_trip_lines(results: LatencyResults) -> list[str]:
    """What ``course cluster --measure latency`` prints: the delay line's lines and goals
    (``latency.latency_lines``), each cell's crossover and connection, and the all-reduces'
    goals."""
    lines = latency_lines(results)
    for rate in results.rates():
        for delay_ms in results.line_delays():
            seen, tcp = crossover(results, rate, delay_ms), connection(results, rate, delay_ms)
            where = ("not within the sizes: the ring " + ("always" if seen.side == "below"
                                                          else "never") + " faster"
                     if seen.measured is None else f"{seen.measured / 2**10:,.0f} KiB")
            lines.append(
                f"{rate:>8s}, {delay_ms:5g} ms: crossover {where} (model {seen.gloo / 2**10:,.0f}"
                f" KiB gloo, {seen.textbook / 2**10:,.0f} KiB textbook); one connection, window "
                f"clamped {tcp.one_clamped.median / tcp.link:.2f} of the link (model "
                f"{tcp.window_model / tcp.link:.2f}), fresh sync {tcp.fresh.median * 1e3:.0f} ms "
                f"(model {tcp.fresh_model * 1e3:.0f})")
    for name, goal in algorithm_goals(results):
        lines.append(f"goal {name}: {goal.value:.3f} against {goal.target}: "
                     + ("met" if goal.met else "NOT met"))
    return lines


def allreduce_figure_data(results: LatencyResults, cells: list[tuple[str, float]]) -> dict:
    """One panel per ``(rate, delay)`` cell: the ring, recursive doubling and ``psum`` measured
    (median over the runs, the runs' range as a band) against the size, with the ring's model
    and both of recursive doubling's (dashed), on log axes."""
    panels = []
    for rate, delay_ms in cells:
        sizes = list(results.cell(rate, delay_ms)[0].allreduce_sizes)
        series = []
        for name, color in (("ring", "C0"), ("doubling", "C1"), ("psum", "C2")):
            ms = measured_ms(results, rate, delay_ms, name)
            series.append({"label": f"{name} measured", "color": color,
                           "y": [s.median for s in ms], "low": [s.low for s in ms],
                           "high": [s.high for s in ms]})
        for name, model, color in (("ring", "gloo", "C0"), ("doubling", "gloo", "C1"),
                                   ("doubling", "textbook", "0.5")):
            label = {"ring": "ring model", "doubling": "doubling model, in turn (gloo's)"
                     if model == "gloo" else "doubling model, at once (textbook's)"}[name]
            series.append({"label": label, "style": "model", "color": color,
                           "y": [modelled_ms(results, rate, delay_ms, name, s, model)
                                 for s in sizes]})
        panels.append({"kind": "line", "title": f"{rate}, {delay_ms:g} ms one way",
                       "x": sizes, "xlabel": "vector per host", "xunit": "bytes",
                       "ylabel": "ms per all-reduce", "xscale": "log", "yscale": "log",
                       "series": series})
    return {"panels": panels}


# DiLoCo's rounds at a one-way delay: the diloco measurement with --delay, 2 hosts of 2 devices
DELAYED_DILOCO = "diloco_cluster_delay.json"
DELAYED_COMMAND = ("course cluster --measure diloco --plan full --link-rate 50mbit --delay 50 "
                   "--runs 3")


def saved_delayed_diloco():
    """The saved DiLoCo rounds at a 50 ms one-way delay (``course_utils/saved/`` +
    ``DELAYED_DILOCO``), a ``results.diloco_cluster.DilocoClusterResults``."""
    from course_utils.results.diloco_cluster import DilocoClusterResults
    from course_utils.results.records import load_saved

    return load_saved(DilocoClusterResults, DELAYED_DILOCO, DELAYED_COMMAND)
