"""Reading a ``course cluster`` run against the link models (``links``): the table, the goals and
the figure that ``course cluster`` prints and step 17 shows."""

from __future__ import annotations

from course_utils.display import format_bytes
from course_utils.links import fitted_link_rate, link_time_s, rate_bytes_per_s, ring_time_s

# the goals of the cluster measurements (issue: "a cluster on one machine")
RATE_TOLERANCE = 0.15  # fitted rate within 15 % of the configured one
RATIO_TOLERANCE = 0.15  # all-reduce / reduce-scatter within 15 % of 2 at the largest size
HIERARCHY_GOAL = 1.4  # two-level ≥ 1.4× faster than flat (at 4 MiB per device)


def _shape(results: dict) -> tuple[int, int, float]:
    return (results["hosts"], results["devices_per_host"],
            rate_bytes_per_s(results["link_rate"]))


def fits(results: dict) -> dict:
    """Per collective, the link rate fitted from the measured times and its gap to the
    configured rate (a fraction)."""
    hosts, devices, rate = _shape(results)
    rows = results["collectives"]
    sizes = [r["bytes"] for r in rows]
    out = {}
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        fit = fitted_link_rate(kind, sizes, [r[kind] for r in rows], hosts, devices)
        gap = None if fit["bytes_per_s"] is None else fit["bytes_per_s"] / rate - 1
        out[kind] = {**fit, "gap": gap}
    return out


def goals(results: dict) -> dict:
    """Each goal's measured figure and whether it is met."""
    largest = results["collectives"][-1]
    ratio = largest["all_reduce"] / largest["reduce_scatter"]
    gaps = {k: f["gap"] for k, f in fits(results).items()}
    target = min(results["hierarchy"], key=lambda r: abs(r["bytes"] - 4 * 2**20))
    speedup = target["flat"] / target["hierarchical"]
    rings = results["ring16"][-1]
    return {
        "fitted rates": {"value": gaps, "met": all(
            g is not None and abs(g) <= RATE_TOLERANCE for g in gaps.values())},
        "all-reduce / reduce-scatter": {"value": ratio,
                                        "met": abs(ratio / 2 - 1) <= RATIO_TOLERANCE},
        "hierarchical speed-up": {"value": speedup, "bytes": target["bytes"],
                                  "met": speedup >= HIERARCHY_GOAL},
        "u16 ring / f32 ring": {"value": rings["u16"] / rings["f32"],
                                "met": abs(rings["u16"] / rings["f32"] - 0.5) <= 0.1},
    }


def summary_lines(results: dict) -> list[str]:
    """The measured times beside the models, then the goals."""
    hosts, devices, rate = _shape(results)
    lines = [f"{hosts} hosts × {devices} devices, each host's link {results['link_rate']} "
             f"({rate / 1e6:.1f} MB/s); times in ms, measured / model"]
    for row, hier, ring in zip(results["collectives"], results["hierarchy"], results["ring16"]):
        n = row["bytes"]
        cells = [f"{k} {row[k] * 1e3:.1f}/{link_time_s(k, n, hosts, devices, rate) * 1e3:.1f}"
                 for k in ("all_reduce", "reduce_scatter", "all_gather")]
        model = link_time_s("hierarchical", n, hosts, devices, rate)
        lines.append(f"{format_bytes(n):>8s}: " + ", ".join(cells)
                     + f"; two-level {hier['hierarchical'] * 1e3:.1f}/{model * 1e3:.1f}"
                     + f"; ring f32 {ring['f32'] * 1e3:.1f}, u16 {ring['u16'] * 1e3:.1f}"
                     + f" (collective_time ring {ring_time_s(n, hosts, devices, rate) * 1e3:.1f})")
    b = results["buckets"]
    lines.append(f"bucketing: {b['count']} all-reduces of {format_bytes(b['bytes'])} "
                 f"{b['separate'] * 1e3:.1f} ms, one bucket {b['one_bucket'] * 1e3:.1f} ms")
    for name, goal in goals(results).items():
        value = goal["value"]
        shown = (", ".join(f"{k} {v:+.0%}" if v is not None else f"{k} none"
                           for k, v in value.items()) if isinstance(value, dict)
                 else f"{value:.2f}")
        lines.append(f"goal {name}: {shown} — {'MET' if goal['met'] else 'NOT MET'}")
    return lines


def figure_data(results: dict) -> dict:
    """Three panels: the collectives, flat against two-level, and the two rings; measured
    (markers) against the link model (dashed)."""
    hosts, devices, rate = _shape(results)
    sizes = [r["bytes"] for r in results["collectives"]]

    def model(kind):
        return [link_time_s(kind, n, hosts, devices, rate) * 1e3 for n in sizes]

    def panel(title, series):
        return {"kind": "line", "title": title, "x": sizes, "xscale": "log", "yscale": "log",
                "xunit": "bytes", "xlabel": "vector per device", "ylabel": "time (ms)",
                "series": series}

    kinds = ("all_reduce", "reduce_scatter", "all_gather")
    collectives = [{"label": k, "y": [r[k] * 1e3 for r in results["collectives"]],
                    "color": f"C{i}"} for i, k in enumerate(kinds)]
    collectives += [{"label": f"{k} (model)", "y": model(k), "style": "model",
                     "color": f"C{i}"} for i, k in enumerate(kinds)]
    hierarchy = [
        {"label": "flat", "y": [r["flat"] * 1e3 for r in results["hierarchy"]], "color": "C0"},
        {"label": "two-level", "y": [r["hierarchical"] * 1e3 for r in results["hierarchy"]],
         "color": "C1"},
        {"label": "flat (model)", "y": model("all_reduce"), "style": "model", "color": "C0"},
        {"label": "two-level (model)", "y": model("hierarchical"), "style": "model",
         "color": "C1"},
    ]
    rings = [{"label": f"ring, {k} messages", "y": [r[k] * 1e3 for r in results["ring16"]]}
             for k in ("f32", "u16")]
    rings.append({"label": "f32 ring (model)", "y": model("all_reduce"), "style": "model"})
    where = f"{hosts} hosts × {devices}, {results['link_rate']}"
    return {"panels": [panel(f"collectives, {where}", collectives),
                       panel("flat against two-level all-reduce", hierarchy),
                       panel("hand-built ring: 32 against 16 bits", rings)]}
