"""What ``course cluster --measure links`` saw (``links.json``): the rate each host's link
delivered while every host sent to the next at once (the ring's pattern), at each configured
rate and with the links unshaped, and the one bucket rule read against it.

``LinkRow`` is one host at one rate in one run: the bytes per second its link counter saw
(data, acknowledgements, headers) and the payload the next host received. The counter and tbf
count a large TCP segment (GSO) differently: tbf charges every frame's headers, the counter one
set per segment, so above about 200 Mbit/s the counter reads about 1448/1514 of the rate while
the payload is exactly ``FRAME_SHARE`` of it. ``held`` therefore reads the payload: tbf held a
configured rate when every host received ``FRAME_SHARE`` of it within ``RATE_HELD`` (the median
over the runs). ``ceiling`` is the unshaped links' slowest host: a rate above it is not limited
by the link, whatever tbf is told.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from course_utils.models.links import payload_bytes_per_s, rate_bytes_per_s
from course_utils.results.cluster import ClusterSetup
from course_utils.results.meta import RunMeta
from course_utils.results.records import load_saved

UNSHAPED = "unshaped"  # the --link-rate that leaves the links as they are
RATE_HELD = 0.05  # a link holds its rate when it delivers it within 5 %


@dataclass(frozen=True)
class LinkRow:
    """One host's link at ``link_rate`` in run ``run`` (from 0): what its counter saw leave, in
    bytes per second, and the payload the next host received per second."""

    link_rate: str
    run: int
    host: int
    wire_bytes_per_s: float
    payload_bytes_per_s: float


@dataclass(frozen=True)
class LinkResults:
    """Every host at every rate of ``--link-rate`` in every run; ``bucket_bytes`` each shaped
    rate's tbf bucket (``links.bucket_bytes``)."""

    meta: RunMeta
    cluster: ClusterSetup
    bucket_bytes: dict[str, int]
    rows: tuple[LinkRow, ...]

    def rates(self) -> list[str]:
        """The rates measured, in the order of the run (``UNSHAPED`` among them, if measured)."""
        return list(dict.fromkeys(r.link_rate for r in self.rows))

    def delivered(self, rate: str, what: str = "wire_bytes_per_s") -> list[float]:
        """Each host's bytes per second at ``rate`` (``what``: a ``LinkRow`` field, the wire's
        or the payload's), the median over the runs."""
        hosts = sorted({r.host for r in self.rows if r.link_rate == rate})
        return [statistics.median(getattr(r, what) for r in self.rows
                                  if r.link_rate == rate and r.host == h) for h in hosts]

    def payload_share(self, rate: str) -> list[float]:
        """Each host's payload against the rate's share for TCP's data (rate · ``FRAME_SHARE``):
        1 when tbf holds the rate exactly and no acknowledgement shares the link."""
        want = payload_bytes_per_s(rate)
        return [d / want for d in self.delivered(rate, "payload_bytes_per_s")]

    def ceiling(self) -> float:
        """Bytes per second the slowest unshaped link delivered (the median over the runs).

        Raises:
            ValueError: the run did not measure the unshaped links.
        """
        if UNSHAPED not in self.rates():
            raise ValueError("this run has no unshaped links: measure them with "
                             f"--link-rate …,{UNSHAPED}")
        return min(self.delivered(UNSHAPED))

    def below_ceiling(self, rate: str) -> bool:
        """Whether the configured ``rate`` is below the unshaped ceiling."""
        return rate_bytes_per_s(rate) < self.ceiling()

    def held(self, rate: str) -> bool:
        """Whether every host's link held the configured ``rate`` within ``RATE_HELD``: the
        payload it carried was that share of the rate (``payload_share``)."""
        return all(abs(share - 1) <= RATE_HELD for share in self.payload_share(rate))


def saved_link_results() -> LinkResults:
    """The saved run of the links (``course_utils/saved/links.json``)."""
    return load_saved(LinkResults, "links.json",
                      "sudo course cluster --measure links --plan full --runs 3 --link-rate "
                      f"10mbit,50mbit,100mbit,200mbit,400mbit,1gbit,10gbit,{UNSHAPED}")
