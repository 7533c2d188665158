"""What ``course cluster --measure latency`` saw (``latency.json``): at each link rate and one-way
delay of the delay line (``--delay``), the idle line's 64-byte round trip, a 64-byte ping-pong
built from ``ppermute``, and one ring message step (every host sends S bytes to the next with
``ppermute``) at several sizes, to which T = α + S/B is fitted as step 10 fits it.

``LatencyRow`` is one cell of one run; the readers take the median over the runs (the file keeps
every run). ``goals`` reads what the delay line is held to: the idle round trip within
``RTT_SHARE`` + ``RTT_SLACK_MS`` of twice the delay, and each message's cost growing with the
delay at the slope its protocol gives, within ``SLOPE_SHARE`` (the smallest delay's subtracted).

gloo sends a message only once the receiver has said it is ready (its TCP pair's
``NOTIFY_RECV_READY``; gloo/transport/tcp/pair.cc): a ring step whose receiver posts its receive
when the step starts waits for that notice to cross the link, then for the data, so its α grows
by ``STEP_DELAYS`` one-way delays per delay. In the ping-pong each receiver posted its receive
long before the data comes, so each of its two legs costs one delay.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from course_utils.models.fit import Fit, fit_alpha_beta
from course_utils.results.cluster import ClusterSetup, Goal
from course_utils.results.meta import RunMeta
from course_utils.results.overlap import Spread, spread
from course_utils.results.records import load_saved

RTT_SHARE, RTT_SLACK_MS = 0.10, 0.3  # the idle round trip: within 10 % + 0.3 ms of 2 × delay
SLOPE_SHARE = 0.15  # a cost against the delay: its protocol's slope within 15 %
STEP_DELAYS = 2  # one-way delays a ring step waits for: the receiver's ready notice, the data


@dataclass(frozen=True)
class TcpRow:
    """What one TCP connection carried from host 0 to host 1 in one cell: the bytes per second
    arriving after the warm-up (``warm_up_s``) of one connection whose receiver clamps its
    window with ``window`` bytes (the window it advertised, as its sender saw it at the end:
    ``window_seen``), of ``connections`` such connections together, and of one whose
    window may open to twice the bandwidth-delay product; and the seconds of each sync of
    ``sync_bytes`` from ``connect()`` to the receiver's one-byte reply on a fresh connection
    (``fresh_s``), and on one open connection back to back (``warm_s``) and after
    ``idle_gap_s`` of silence (``idle_s``)."""

    window: int
    window_seen: int
    connections: int
    sync_bytes: int
    idle_gap_s: float
    warm_up_s: float
    one_clamped: float
    several_clamped: float
    one_open: float
    fresh_s: tuple[float, ...]
    warm_s: tuple[float, ...]
    idle_s: tuple[float, ...]


@dataclass(frozen=True)
class LatencyRow:
    """One rate and one-way delay in run ``run`` (from 0): the idle line's 64-byte UDP round
    trips between host 0 and host 1 (ms, each probe), the median of the ``ppermute`` ping-pong
    (host 0 → host 1 → host 0, ms), the median ms of one ring message step at each of ``sizes``
    (bytes each host sends), the median ms of each all-reduce of ``allreduce_ms`` (``ring``,
    ``doubling``, ``psum``) at each of ``allreduce_sizes`` (the vector's bytes), and the TCP
    connection's figures (``tcp``)."""

    link_rate: str
    delay_ms: float | None
    run: int
    udp_round_trips_ms: tuple[float, ...]
    pingpong_ms: float
    sizes: tuple[int, ...]
    step_ms: tuple[float, ...]
    allreduce_sizes: tuple[int, ...]
    allreduce_ms: dict[str, tuple[float, ...]]
    tcp: TcpRow

    def fit(self) -> Fit:
        """T = α + S/B fitted to this row's message steps (``fit.fit_alpha_beta``)."""
        return fit_alpha_beta(self.sizes, [t / 1e3 for t in self.step_ms])


@dataclass(frozen=True)
class LatencyResults:
    """Every rate and delay of one ``course cluster --measure latency`` in every run."""

    meta: RunMeta
    cluster: ClusterSetup
    rows: tuple[LatencyRow, ...]

    def rates(self) -> list[str]:
        """The link rates, in the order of the run."""
        return list(dict.fromkeys(r.link_rate for r in self.rows))

    def delays(self) -> list[float | None]:
        """The one-way delays, in the order of the run (``None``: no delay line)."""
        return list(dict.fromkeys(r.delay_ms for r in self.rows))

    def line_delays(self) -> list[float]:
        """The one-way delays the delay line made, in the order of the run (no ``None``)."""
        return [d for d in self.delays() if d is not None]

    def cell(self, rate: str, delay_ms: float | None) -> list[LatencyRow]:
        """The rows of every run at ``rate`` and ``delay_ms``.

        Raises:
            ValueError: the run has no such cell.
        """
        rows = [r for r in self.rows if r.link_rate == rate and r.delay_ms == delay_ms]
        if not rows:
            raise ValueError(f"this run has no cell at {rate} and {delay_ms} ms")
        return rows

    def round_trip_ms(self, rate: str, delay_ms: float | None) -> Spread:
        """Each run's median idle UDP round trip: their median, smallest and largest."""
        return spread([statistics.median(r.udp_round_trips_ms)
                       for r in self.cell(rate, delay_ms)])

    def pingpong_ms(self, rate: str, delay_ms: float | None) -> Spread:
        """The ``ppermute`` ping-pong over the runs."""
        return spread([r.pingpong_ms for r in self.cell(rate, delay_ms)])

    def alpha_ms(self, rate: str, delay_ms: float | None) -> Spread:
        """α of each run's fitted message step, in ms, over the runs."""
        return spread([r.fit().alpha_s * 1e3 for r in self.cell(rate, delay_ms)])

    def alpha_slope(self, rate: str) -> float:
        """The slope of a ring step's α (median over the runs) against the configured delay:
        ``STEP_DELAYS`` when each millisecond of one-way delay adds that many to each step
        (``slope``)."""
        return self._slope(rate, lambda d: self.alpha_ms(rate, d).median)

    def pingpong_slope(self, rate: str) -> float:
        """The slope of one leg of the ping-pong (half its median) against the configured
        delay: 1 when each leg pays the delay once."""
        return self._slope(rate, lambda d: self.pingpong_ms(rate, d).median / 2)

    def _slope(self, rate: str, figure) -> float:
        """``figure(delay)`` against the delays, through the origin once the smallest delay's
        figure and delay are subtracted.

        Raises:
            ValueError: fewer than two delays at ``rate``.
        """
        delays = sorted(self.line_delays())
        if len(delays) < 2:
            raise ValueError("the slope needs at least two delays (--delay 1,25)")
        values = np.array([figure(d) for d in delays])
        x, y = np.array(delays) - delays[0], values - values[0]
        return float(x @ y / (x @ x))


def round_trip_held(measured_ms: float, delay_ms: float) -> bool:
    """Whether an idle round trip is within ``RTT_SHARE`` + ``RTT_SLACK_MS`` of twice the
    one-way delay.

    Examples:
        >>> round_trip_held(50.6, 25.0), round_trip_held(57.0, 25.0)
        (True, False)
    """
    want = 2 * delay_ms
    return abs(measured_ms - want) <= RTT_SHARE * want + RTT_SLACK_MS


def goals(results: LatencyResults) -> list[tuple[str, Goal]]:
    """The delay line's goals, each named: the idle round trip at every rate and delay, and
    at every rate (where there are two delays) the slopes against the delay of a ring step's α
    (``STEP_DELAYS``) and of a ping-pong leg (1)."""
    found = []
    delays = results.line_delays()
    for rate in results.rates():
        for delay_ms in delays:
            rtt = results.round_trip_ms(rate, delay_ms)
            found.append((f"round trip at {rate}, {delay_ms:g} ms",
                          Goal(rtt.median, f"{2 * delay_ms:g} ms ± {RTT_SHARE:.0%} + "
                               f"{RTT_SLACK_MS} ms", round_trip_held(rtt.median, delay_ms))))
        if len(delays) >= 2:
            for name, slope, want in (("α slope", results.alpha_slope(rate), STEP_DELAYS),
                                      ("ping-pong leg slope", results.pingpong_slope(rate), 1)):
                found.append((f"{name} at {rate}", Goal(
                    slope, f"{want} ± {SLOPE_SHARE:.0%}", abs(slope / want - 1) <= SLOPE_SHARE)))
    return found


def latency_lines(results: LatencyResults) -> list[str]:
    """Each cell: the round trip against twice the delay, the ping-pong, α and B of a message
    step (medians over the runs, with their range); then the goals."""
    lines = [f"line: {results.cluster.delay_line}; medians of {results.meta.runs} run(s), "
             "range in brackets"]
    for rate in results.rates():
        for delay_ms in results.delays():
            rtt, ping = results.round_trip_ms(rate, delay_ms), results.pingpong_ms(rate, delay_ms)
            alpha = results.alpha_ms(rate, delay_ms)
            label = "no delay" if delay_ms is None else f"{delay_ms:g} ms one way"
            lines.append(f"{rate:>8s}, {label:>14s}: UDP round trip {_shown(rtt)} ms, ppermute "
                         f"ping-pong {_shown(ping)} ms, message step α {_shown(alpha)} ms")
    for name, goal in goals(results):
        lines.append(f"goal {name}: {goal.value:.3f} against {goal.target}: "
                     + ("met" if goal.met else "NOT met"))
    return lines


def _shown(s: Spread) -> str:
    return f"{s.median:.2f} [{s.low:.2f}–{s.high:.2f}]"


def rows_from_runs(cells: Sequence[tuple[int, str, float | None, dict]]) -> list[dict]:
    """The rows of ``latency.json`` from host 0's reports: (run, rate, delay, report)."""
    return [{"link_rate": rate, "delay_ms": delay_ms, "run": run,
             **{key: report[key] for key in ("udp_round_trips_ms", "pingpong_ms", "sizes",
                                             "step_ms", "allreduce_sizes", "allreduce_ms",
                                             "tcp")}} for run, rate, delay_ms, report in cells]


def saved_latency_results() -> LatencyResults:
    """The saved run of the delay line (``course_utils/saved/latency.json``)."""
    return load_saved(LatencyResults, "latency.json", SAVED_COMMAND)


SAVED_COMMAND = ("sudo course cluster --measure latency --plan full --runs 3 --hosts 4 "
                 "--devices-per-host 1 --delay 1,5,25,50 --link-rate 50mbit,200mbit")
