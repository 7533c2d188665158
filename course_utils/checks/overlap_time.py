"""Step 19's exercise check: the overlapped backward pass's time predicted from its compute, its
buckets' bytes, the link's rate and α (the table's overlap column, before the table is read)."""

from __future__ import annotations

import numpy as np

from course_utils.checks.forbidden import public_name, uses_forbidden
from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed

TOLERANCE = 0.02  # relative: the slips below are at least 4 % off in one case of each


def overlap_model_ms(compute_ms: float, bucket_bytes: float, buckets: int, hosts: int,
                     bytes_per_s: float, alpha_s: float) -> float:
    """The bucketed model: ``buckets`` equal buckets ready at equal steps over ``compute_ms``, each
    a ring all-reduce over ``hosts`` (2(h-1) steps of α, 2(h-1)/h of its bytes), sent one at a
    time as soon as it is ready and the previous one has ended: ms from the backward pass's start
    to the last bucket's end."""
    send_ms = 2 * (hosts - 1) * (alpha_s + bucket_bytes / hosts / bytes_per_s) * 1e3
    return max(compute_ms + send_ms, compute_ms / buckets + buckets * send_ms)


# (compute ms, bucket bytes, buckets, hosts, payload bytes/s, α): compute- and link-bound cases
_CASES = ((600.0, 2**20, 16, 2, 2.5e7 * 0.9564, 4.5e-4),  # about the saved run at 200 Mbit/s
          (600.0, 2**20, 16, 2, 1.25e8, 4.5e-4),  # compute-bound: the link is fast
          (200.0, 4 * 2**20, 8, 4, 1.25e7, 1e-3),  # link-bound, 4 hosts
          (900.0, 2**18, 32, 8, 1.25e9, 5e-5),  # compute-bound, 8 hosts, small buckets
          (100.0, 2**14, 64, 8, 1.25e9, 2e-3))  # bound by α: many tiny buckets


def check_overlap_prediction(fn, *, compute_ms: float, bucket_bytes: float, buckets: int,
                             hosts: int, bytes_per_s: float, alpha_s: float) -> None:
    """Exercise 19: ``fn(compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s)`` → the
    overlapped backward pass's modelled time in ms (``overlap_model_ms``, a loop over the buckets
    or its closed form), within ``TOLERANCE`` at the exercise's numbers and at cases bound by the
    compute and by the link that the notebook never shows. The package's models are refused."""
    from course_utils.models.cost_model import modelled_time, ring_time
    from course_utils.models.latency import bucketed_step_time, collective_time, hierarchical_time
    from course_utils.models.links import link_time_s
    from course_utils.results.overlap import modelled

    exercise = "the overlap column predicted"
    function_given(exercise, "my_overlap_ms", fn)
    forbidden = (bucketed_step_time, collective_time, hierarchical_time, modelled,
                 overlap_model_ms, modelled_time, ring_time, link_time_s)
    if (name := uses_forbidden(fn, forbidden)) is not None:
        fail(exercise, f"my_overlap_ms uses the package's {_public_name(name, forbidden)}, one of "
                       "the models this exercise refuses: write a bucket's ring all-reduce time "
                       "from the arguments and follow the buckets yourself")
    first = (compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s)
    answers = []
    for case in (first, *_CASES):
        call = "my_overlap_ms({:g}, {:g}, {}, {}, {:.4g}, {:g})".format(*case)
        got = number(call_without(exercise, fn, case, forbidden=(), call=call, refusal=""))
        if got is None or not np.isfinite(got):
            fail(exercise, f"{call} must return one finite number of milliseconds")
        answers.append((case, call, got))
    for case, call, got in answers:
        if not np.isclose(got, overlap_model_ms(*case), rtol=TOLERANCE):
            where = "" if case is first else f" (a case the page never shows: {call})"
            fail(exercise, f"{off_by(got, overlap_model_ms(*case))}{where}; {_slip(answers)}")
    passed(exercise, f"{overlap_model_ms(*first):.0f} ms at the exercise's numbers; and "
                     f"{len(_CASES)} cases bound by the compute, the link or α")


def _public_name(name: str, forbidden: tuple) -> str:
    """``name`` (a forbidden function's own name) as a notebook spells it after ``cu.``."""
    return next((public_name(f) for f in forbidden if f.__name__ == name), name)


def _slip(answers: list) -> str:
    """The slip that explains the answers in every case (each candidate is the right model with
    one thing changed), a factor of about 1000 (ms and s mixed), an answer right only at the
    notebook's numbers (its globals used), else a hint that does not give the model away."""
    for why in _SLIPS:
        if all(np.isclose(got, _SLIPS[why](*case), rtol=TOLERANCE / 2) for case, _, got in answers):
            return why
    for hosts in range(1, 9):  # the same number of hosts in every case: typed in
        if all(np.isclose(got, overlap_model_ms(*case[:3], hosts, *case[4:]),
                          rtol=TOLERANCE / 2) for case, _, got in answers):
            return f"that is the model for {hosts} hosts in every case: use the argument hosts"
    ratios = [abs(got / overlap_model_ms(*case)) for case, _, got in answers]
    if any(500 < r < 2000 or 1 / 2000 < r < 1 / 500 for r in ratios):
        return ("milliseconds and seconds mixed: compute_ms is in ms, alpha_s and "
                "bytes / bytes_per_s in s; return ms")
    if np.isclose(ratios[0], 1, rtol=TOLERANCE):
        return ("right at this notebook's numbers only: use the function's arguments, not the "
                "notebook's variables")
    return ("follow the buckets one by one, from when each is ready to when its all-reduce ends, "
            "in ms and from the arguments only")


def _with(c, nbytes, n, h, rate, alpha, *, alpha_steps=None, share=None, first=1.0,
          to_ms=1e3):
    """The model with one thing changed: α's steps, the bucket's share sent, the first bucket,
    the all-reduce's seconds left unconverted (``to_ms=1``)."""
    steps = 2 * (h - 1) if alpha_steps is None else alpha_steps
    part = 2 * (h - 1) / h if share is None else share
    t = (steps * alpha + part * nbytes / rate) * to_ms
    return max(c + t, first * c / n + n * t)


def _send_ms(c, nbytes, n, h, rate, alpha):
    return 2 * (h - 1) * (alpha + nbytes / h / rate) * 1e3


_SLIPS = {
    "that is one after the other (compute + communication): a bucket is sent while the layers "
    "below it are still computed": lambda *a: a[0] + a[2] * _send_ms(*a),
    "max(compute, communication) leaves out the start and the end: the first bucket is ready "
    "only after its layer's compute, and the last one is sent after all compute":
        lambda *a: max(a[0], a[2] * _send_ms(*a)),
    "give milliseconds, not seconds": lambda *a: overlap_model_ms(*a) / 1e3,
    "α is missing or left in seconds: each bucket's ring pays α, in ms, at each of its 2(h-1) "
    "message steps": lambda *a: _with(*a, alpha_steps=0),
    "each all-reduce's time is in seconds: convert it to ms before adding it to compute_ms":
        lambda *a: _with(*a, to_ms=1.0),
    "the ring sends 2(h-1)/h of each bucket over the link, not the bucket once":
        lambda *a: _with(*a, share=1.0),
    "α is paid per message step: 2(h-1) per all-reduce": lambda *a: _with(*a, alpha_steps=1),
    "an all-reduce is two passes of the ring: 2(h-1)/h of the bucket, not (h-1)/h":
        lambda *a: _with(*a, share=(a[3] - 1) / a[3]),
    "each of the 2(h-1) message steps sends one chunk, bucket_bytes / h, not the whole bucket":
        lambda *a: _with(*a, share=2 * (a[3] - 1)),
    "bucket_bytes is one bucket's bytes already: do not divide it by the buckets":
        lambda *a: overlap_model_ms(a[0], a[1] / a[2], *a[2:]),
    "a rank never sends its own chunk: the ring moves 2(h-1)/h of the bucket":
        lambda *a: _with(*a, share=2),
    "a ring over h ranks has 2(h-1) message steps, not 2h: p − 1, not p, in both α's steps "
    "and the bytes' share": lambda *a: _with(*a, alpha_steps=2 * a[3], share=2.0),
    "that is one pass of the ring (h − 1 steps, (h − 1)/h of the bucket): an all-reduce is two, "
    "a reduce-scatter then an all-gather": lambda *a: _with(*a, alpha_steps=a[3] - 1,
                                                            share=(a[3] - 1) / a[3]),
    "the buckets queue on the stream: each starts when it is ready AND the previous one has "
    "ended, so a slow link piles them up": lambda *a: a[0] + _send_ms(*a),
    "the first bucket is ready only after its layer's compute": lambda *a: _with(*a, first=0.0),
    "bytes_per_s is already in bytes per second: do not divide it by 8":
        lambda *a: overlap_model_ms(*a[:4], a[4] / 8, a[5]),
    "a bucket is ready when its layers' compute ends (bucket i at i/buckets of compute_ms), not "
    "when it starts ((i − 1)/buckets)":
        lambda *a: max(a[0] * (a[2] - 1) / a[2] + _send_ms(*a), a[2] * _send_ms(*a)),
    "one all-reduce per bucket, buckets of them: yours sends buckets − 1 (the last bucket, ready "
    "when the compute ends, is sent too)":
        lambda *a: max(a[0] * (a[2] - 1) / a[2] + _send_ms(*a), a[0] / a[2]
                       + (a[2] - 1) * _send_ms(*a)),
    "that holds while the link limits; on a fast link the last bucket is ready only when the "
    "compute ends, and then it is sent: take the later of the two ends":
        lambda *a: a[0] / a[2] + a[2] * _send_ms(*a),
}
