"""Step 19's exercise check: the slowest link rate at which the overlapped backward pass still
hides every bucket's all-reduce but the last (each takes no longer than the compute between two
buckets), in the bucketed model of step 12."""

from __future__ import annotations

import math

from course_utils.checks.forbidden import public_name, uses_forbidden
from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.links import FRAME_SHARE

TOLERANCE = 0.02  # relative: every slip below is at least 4 % off in one case the check tries


def hidden_rate(compute_ms: float, bucket_bytes: float, buckets: int, hosts: int,
                alpha_s: float) -> float:
    """The slowest payload rate (bytes/s) at which one bucket's ring all-reduce over ``hosts``
    (2(h − 1) message steps of ``alpha_s``, 2(h − 1)/h of its bytes over each host's link) takes
    no longer than the compute between two buckets, ``compute_ms / buckets``: there the bucketed
    model's pass ends one bucket's all-reduce after the compute. ``math.inf`` where α alone
    takes that long.

    Examples:
        >>> round(hidden_rate(600.0, 2**20, 16, 2, 2.5e-4) / 1e6, 2)  # MB/s
        28.34
        >>> hidden_rate(100.0, 2**14, 64, 8, 2e-3)
        inf
    """
    return _with(compute_ms, bucket_bytes, buckets, hosts, alpha_s)


def _with(c, nbytes, n, h, alpha, *, alpha_steps=None, share=None, gaps=None, to_s=1e-3,
          per_byte=1.0):
    """``hidden_rate`` with one thing changed (a slip): α's message steps, the share of the
    bucket on the link, the number of gaps the compute is cut into, the unit of ``c`` and of the
    rate returned."""
    steps = 2 * (h - 1) if alpha_steps is None else alpha_steps
    part = 2 * (h - 1) / h if share is None else share
    left_s = c * to_s / (n if gaps is None else gaps) - steps * alpha
    return math.inf if left_s <= 0 else per_byte * part * nbytes / left_s


_SLIPS = {
    "a ring all-reduce sends 2(h − 1)/h of the bucket over each host's link (a reduce-scatter "
    "and an all-gather, one chunk of bucket_bytes / h per step), not the whole bucket once":
        lambda *a: _with(*a, share=1.0),
    "each of the 2(h − 1) message steps sends one chunk, bucket_bytes / h, not the whole "
    "bucket: the ring's factor is 2(h − 1)/h, not 2(h − 1)":
        lambda *a: _with(*a, share=2.0 * (a[3] - 1)),
    "a host never sends its own chunk: the ring moves 2(h − 1)/h of the bucket, not 2 copies":
        lambda *a: _with(*a, share=2.0),
    "one chunk, bucket_bytes / h, is what one message step sends: over the all-reduce's "
    "2(h − 1) steps each host's link carries 2(h − 1) chunks": lambda *a: _with(*a, share=1 / a[3]),
    "only one bucket crosses the link in each gap: bucket_bytes, not buckets × bucket_bytes "
    "(the gap is one bucket's share of the compute)":
        lambda *a: _with(*a, per_byte=a[2]),
    "α is missing: each all-reduce pays α at each of its 2(h − 1) message steps, and that time "
    "must fit in the gap too": lambda *a: _with(*a, alpha_steps=0),
    "α counts 1000× too little: alpha_s is in seconds, so beside the compute's milliseconds it "
    "is alpha_s × 1000 (and in seconds it is alpha_s as given)":
        lambda *a: _with(*a[:4], a[4] / 1e3),
    "α is paid per message step: 2(h − 1) per all-reduce, not once":
        lambda *a: _with(*a, alpha_steps=1),
    "α is paid at each of the all-reduce's 2(h − 1) message steps, not h − 1 (that is one pass "
    "of the ring: the reduce-scatter or the all-gather, and an all-reduce is both)":
        lambda *a: _with(*a, alpha_steps=a[3] - 1),
    "a ring all-reduce over h hosts has 2(h − 1) message steps, not h: α is paid at each of "
    "the h − 1 steps of the reduce-scatter and of the all-gather":
        lambda *a: _with(*a, alpha_steps=a[3]),
    "a ring all-reduce over h hosts has 2(h − 1) message steps, not 2h (a host never sends to "
    "itself): α is paid 2(h − 1) times": lambda *a: _with(*a, alpha_steps=2 * a[3]),
    "a ring over h ranks has 2(h − 1) message steps, not 2h: h − 1, not h, in both α's steps "
    "and the bytes' share": lambda *a: _with(*a, alpha_steps=2 * a[3], share=2.0),
    "that is one pass of the ring (h − 1 steps, (h − 1)/h of the bucket): an all-reduce is two, "
    "a reduce-scatter then an all-gather":
        lambda *a: _with(*a, alpha_steps=a[3] - 1, share=(a[3] - 1) / a[3]),
    "compute_ms is in milliseconds: divide it by 1000 before α and the rate, which are in "
    "seconds": lambda *a: _with(*a, to_s=1.0),
    "that is bytes per millisecond: return bytes per second":
        lambda *a: hidden_rate(*a) / 1e3,
    "that is megabits per second (the unit the page gives link rates in): return bytes per "
    "second, without the × 8 / 10⁶": lambda *a: hidden_rate(*a) * 8e-6,
    "that is megabytes per second (MB/s): return bytes per second, without the / 10⁶":
        lambda *a: hidden_rate(*a) / 1e6,
    "that is MiB per second: return bytes per second, without the / 2²⁰":
        lambda *a: hidden_rate(*a) / 2**20,
    "that is bits per second: bucket_bytes is in bytes, and the rate asked is in bytes per "
    "second": lambda *a: hidden_rate(*a) * 8,
    "bucket_bytes is already in bytes and the rate is asked in bytes per second: do not divide "
    "by 8": lambda *a: hidden_rate(*a) / 8,
    "the buckets are ready every compute_ms / buckets (the first after its own layers' compute), "
    "so the gap is compute_ms / buckets, not compute_ms / (buckets − 1)":
        lambda *a: _with(*a, gaps=a[2] - 1),
    "each all-reduce must fit in the compute between two buckets, compute_ms / buckets, not in "
    "the whole backward pass": lambda *a: _with(*a, gaps=1),
    "α's time is taken from the gap, not added to it: the bytes get what the 2(h − 1) α leave "
    "of the compute between two buckets, gap − 2(h − 1)·α":  # with or without the inf test
        lambda *a: (_with(*a[:4], -a[4]),) + ((math.inf,) if math.isinf(hidden_rate(*a)) else ()),
    "that divides by FRAME_SHARE, which turns a payload rate into tbf's rate with the headers "
    "(the check cell does that after): the rate asked is of payload, bucket_bytes per second, "
    "so leave FRAME_SHARE out": lambda *a: hidden_rate(*a) / FRAME_SHARE,
    "that multiplies by FRAME_SHARE: bucket_bytes is already payload, with no headers to take "
    "off: the rate asked is of payload, so leave FRAME_SHARE out":
        lambda *a: hidden_rate(*a) * FRAME_SHARE,
    "that is a ring over every device (2 per host): the all-reduce is a psum over \"host\" on "
    "the stream mesh, one stream device per host, so its ring has h = hosts ranks":
        lambda *a: _with(*a[:3], 2 * a[3], a[4]),
}

# (compute ms, bucket bytes, buckets, hosts, α) the page never shows: 3, 4 and 8 hosts (so that
# h, h − 1 and the ring's share tell apart), bound by the link, and two bound by α alone (inf)
_CASES = ((600.0, 2**20, 16, 4, 1e-4),  # the link limits: α is a few % of the gap
          (200.0, 4 * 2**20, 8, 3, 5e-4),
          (900.0, 2**18, 32, 8, 5e-5),
          (120.0, 2**16, 12, 3, 1.5e-3),  # α is most of the gap
          (100.0, 2**14, 64, 8, 2e-3),  # bound by α: many tiny buckets
          (50.0, 2**16, 10, 2, 3e-3))  # bound by α on 2 hosts


def check_overlap_rate(fn, *, compute_ms: float, bucket_bytes: float, buckets: int, hosts: int,
                       alpha_s: float) -> None:
    """Exercise 19: ``fn(compute_ms, bucket_bytes, buckets, hosts, alpha_s)`` → the slowest
    payload rate in bytes/s at which the overlapped pass hides every all-reduce but the last
    (``hidden_rate``: where the bucketed recurrence's end leaves compute + one all-reduce), within
    ``TOLERANCE``, ``math.inf`` where α alone is too slow, at the page's numbers and at cases the
    page never shows. The package's time models (the bucketed model among them) and the check's
    own answer are refused."""
    from course_utils.models.cost_model import modelled_time, ring_time
    from course_utils.models.latency import bucketed_step_time, collective_time, hierarchical_time
    from course_utils.models.links import link_time_s
    from course_utils.results.overlap import modelled

    exercise = "the slowest rate the overlap still hides"
    function_given(exercise, "slowest_hidden_rate", fn)
    if uses_forbidden(fn, (hidden_rate,)) is not None:
        fail(exercise, "slowest_hidden_rate uses the check's own hidden_rate, which computes the "
                       "answer: write one bucket's all-reduce time and solve for the rate")
    models = (bucketed_step_time, modelled, collective_time, hierarchical_time, modelled_time,
              ring_time, link_time_s)
    if (name := uses_forbidden(fn, models)) is not None:
        name = next((public_name(f) for f in models if f.__name__ == name), name)
        fail(exercise, f"slowest_hidden_rate uses the package's {name}, one of the time models "
                       "this exercise refuses: write one bucket's ring all-reduce time from the "
                       "arguments and solve for the rate")
    first = (compute_ms, bucket_bytes, buckets, hosts, alpha_s)
    answers = []
    for case in (first, *_CASES):
        call = "slowest_hidden_rate({:g}, {:g}, {}, {}, {:g})".format(*case)
        raw = call_without(exercise, fn, case, forbidden=(), call=call, refusal="")
        got = number(raw)
        if got is None or math.isnan(got):
            fail(exercise, f"{call} must return one number of bytes per second (math.inf where "
                           f"no rate hides the buckets), got {raw!r}")
        answers.append((case, call, got))
    for case, call, got in answers:
        want = hidden_rate(*case)
        if _close(got, want):
            continue
        where = "" if case is first else f" (a case the page never shows: {call})"
        slip = _slip(fn, answers)
        alone = ("α alone takes longer than the compute between two buckets: no rate hides "
                 "them; return math.inf")
        if not slip and got <= 0:
            fail(exercise, f"{call} gives {got:g}: a rate is positive"
                           + (f"; there {alone}" if math.isinf(want) else ""))
        if not slip and math.isinf(want):
            fail(exercise, f"{call} gives {got:g}, but there {alone}")
        if not slip and math.isinf(got):
            fail(exercise, f"{call} gives inf, but there a finite rate hides the buckets{where}")
        fail(exercise, f"{off_by(got, want)}{where}; "
                       f"{slip or _hint(fn, answers)}")
    page = hidden_rate(*first)
    passed(exercise, f"{page / 1e6:.1f} MB/s at the page's numbers; and at {len(_CASES)} cases "
                     "more, bound by the link or by α")


def _close(got: float, want: float, rtol: float = TOLERANCE) -> bool:
    if math.isinf(got) or math.isinf(want):
        return math.isinf(got) and math.isinf(want) and got > 0
    return math.isclose(got, want, rel_tol=rtol)


_ALPHA_MISSING = next(why for why in _SLIPS if why.startswith("α is missing"))


def _slip(fn, answers: list) -> str:
    """The slip that explains the answers in every case, or ``""``."""
    for why, model in _SLIPS.items():  # a model gives one value, or a tuple of the slip's forms
        if all(any(_close(got, m, TOLERANCE / 2) for m in _forms(model(*case)))
               for case, _, got in answers):
            return _alpha_scaled(fn, answers) if why == _ALPHA_MISSING else why
    for hosts in range(1, 9):  # the same number of hosts in every case: typed in
        if all(_close(got, hidden_rate(*case[:3], hosts, case[4]), TOLERANCE / 2)
               for case, _, got in answers):
            return f"that is the rate for {hosts} hosts in every case: use the argument hosts"
    return ""


def _forms(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _alpha_scaled(fn, answers: list) -> str:
    """α missing, or read as microseconds (× 1e-6: too small to show in any case): told apart by
    calling ``fn`` with ``alpha_s`` a million times larger, where a scaled α shows."""
    (case, _, got), *_ = answers
    again = _probe(fn, (*case[:4], case[4] * 1e6))
    if again is None or _close(again, got, 1e-9):
        return _ALPHA_MISSING  # the answer does not move with alpha_s: α is not in it
    if _close(again, hidden_rate(*case), TOLERANCE / 2):
        return ("alpha_s is already in seconds: yours scales it by 1e-6, as if it were in "
                "microseconds, so α hardly counts")
    return ("your α counts far too little: alpha_s is in seconds, paid at each of the "
            "all-reduce's message steps")


def _probe(fn, args: tuple) -> float | None:
    """``fn(*args)`` as a number, or ``None`` where it fails (a probe names nothing then)."""
    try:  # a probe only: the calls with the cases' own arguments already ran
        got = number(fn(*args))
    except Exception:  # noqa: BLE001 - a probe that fails names nothing
        return None
    return None if got is None or math.isnan(got) else got


# the arguments a student may leave for the notebook's own numbers, and how a probe changes them
_ARGUMENTS = ((0, "compute_ms", "compute_ms", lambda v: 2 * v),
              (1, "bucket_bytes", "BUCKET_BYTES", lambda v: 2 * v),
              (2, "buckets", "BUCKETS", lambda v: 2 * v),
              (3, "hosts", "HOSTS", lambda v: v + 2),
              (4, "alpha_s", "alpha", lambda v: 2 * v))


def _unread(fn, case: tuple, got: float) -> str:
    """The arguments ``fn``'s answer does not move with (changed one at a time at ``case``, where
    the right answer moves), or ``""`` where it moves with each of them."""
    unread = []
    for index, name, notebook, change in _ARGUMENTS:
        other = tuple(change(v) if k == index else v for k, v in enumerate(case))
        if _close(hidden_rate(*other), hidden_rate(*case), 1e-9):
            continue  # the right answer does not show this argument here either
        again = _probe(fn, other)
        if again is not None and _close(again, got, 1e-9):
            unread.append((name, notebook))
    if not unread:
        return ""
    if len(unread) == len(_ARGUMENTS):
        return "your rate stays the same whatever the arguments: compute it from them"
    names = " and ".join(name for name, _ in unread)
    notebook = " and ".join(notebook for _, notebook in unread)
    return (f"your rate does not change with the argument{'s' if len(unread) > 1 else ''} "
            f"{names}: use the function's arguments, not the notebook's {notebook} (nor "
            "its value typed in)")


def _hint(fn, answers: list) -> str:
    """A hint that does not give the model away: an argument left unread (probed), else what the
    page's numbers hide (2 hosts, a small α), else how to set the rate up."""
    (case, _, got), *_ = answers
    if unread := _unread(fn, case, got):
        return unread
    if _close(got, hidden_rate(*case)):
        alpha_share = 2 * (case[3] - 1) * case[4] / (case[0] / 1e3 / case[2])
        return (f"right at the page's numbers only, and your rate moves with every argument: "
                f"there h = {case[3]} and α is {100 * alpha_share:.0f} % of the gap between two "
                f"buckets, "
                "so a slip in α's count of message steps, or in the ring's share of the bucket "
                "for h hosts, hardly shows: count both for h hosts")
    return ("write one bucket's ring all-reduce time at a rate B (α per message step, the ring's "
            "share of the bucket over B), set it equal to the compute between two buckets and "
            "solve for B")
