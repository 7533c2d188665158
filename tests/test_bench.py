"""``course bench``: the models on synthetic data, the worker's pieces on 4 devices, one quick run.

No test asserts a time: timings depend on the machine and its load.
"""

import json
import subprocess
import sys
from dataclasses import replace
from importlib.metadata import version

import pytest

from course_utils.figures.data import validate_figure_data
from course_utils.models.cost import algbw_gbps, busbw_gbps
from course_utils.models.fit import fit_alpha_beta, fit_from_json, fit_to_json
from course_utils.models.traffic import PAGE_FAULT_BYTES, traffic_bytes
from course_utils.observe.sweep import VARIANTS, ZERO1_STEPS
from course_utils.results.bench import (
    BenchRun,
    figure_data,
    load_bench_run,
    saved_results,
    steps_figure_data,
)
from course_utils.results.records import to_json
from course_utils.tools.bench.combine import (
    collective_rows,
    combine_repeats,
    fit_rows,
    rs_ag_against_psum,
    zero1_goal,
    zero1_rows,
)
from course_utils.tools.bench.plan import make_plan
from course_utils.tools.cli import main


def alpha_beta_us(alpha_us: float, gbps: float, nbytes: float) -> float:
    return alpha_us + nbytes / gbps / 1e3


def _fit_us(nbytes, times_us):
    """``fit_alpha_beta`` of times in µs, read back in µs and GB/s."""
    return fit_to_json(fit_alpha_beta(nbytes, [t * 1e-6 for t in times_us]))


def summary(t_us: float) -> dict:
    return {
        "median_us": t_us,
        "iqr_us": 0.1 * t_us,
        "min_us": 0.9 * t_us,
        "compile_us": 2e4,
        "n_samples": 50,
    }


def synthetic_report(p: int, elements: list[int], scale: float = 1.0, repeat: int = 0) -> dict:
    """A worker report: variant v takes exactly (50·p + 10·i) + S/(p + i) µs, times ``scale``."""
    collectives = [
        {
            "elements": n,
            "variants": {
                v: summary(scale * alpha_beta_us(50 * p + 10 * i, p + i, 4 * n))
                for i, v in enumerate(VARIANTS)
            },
        }
        for n in elements
    ]
    zero1 = [
        {
            "params": n,
            "steps": {
                s: summary(scale * alpha_beta_us(100 * (i + 1), 2.0, 4 * n))
                for i, s in enumerate(ZERO1_STEPS)
            },
            "state_bytes_device0": {
                "dp": 4 * n,
                "zero1_fused": 4 * n // p,
                "zero1_calls": 4 * n // p,
            },
            "agree": True,
        }
        for n in (2**10, 2**20)
    ]
    return {
        "devices": p,
        "repeat": repeat,
        "jax_version": "0",
        "collectives": collectives,
        "zero1": zero1,
        "memcpy": [{"bytes": 2**26, "best_s": 0.01}],
    }


SIZES = [2**k for k in range(3, 25)]  # up to 64 MiB: the largest reach the page-fault regime


def test_fit_recovers_alpha_and_bandwidth_from_exact_points():
    for alpha, gbps in ((370.0, 5.5), (15.0, 0.8), (1e4, 40.0)):
        fit = _fit_us(
            [4 * n for n in SIZES], [alpha_beta_us(alpha, gbps, 4 * n) for n in SIZES]
        )
        assert fit["alpha_us"] == pytest.approx(alpha, rel=1e-9)
        assert fit["bandwidth_gbps"] == pytest.approx(gbps, rel=1e-9)
        assert fit["max_rel_error"] < 1e-9 and fit["n_points"] == len(SIZES)
        assert fit_from_json(fit).time_s(2**20) * 1e6 == pytest.approx(
            alpha_beta_us(alpha, gbps, 2**20))


def test_fit_of_flat_times_has_no_bandwidth_and_bad_input_says_what_is_needed():
    fit = _fit_us([8, 64, 512], [100.0, 100.0, 100.0])
    assert fit["alpha_us"] == pytest.approx(100.0) and fit["bandwidth_gbps"] is None
    assert fit_from_json(fit).time_s(1e9) * 1e6 == pytest.approx(100.0)
    with pytest.raises(ValueError, match="at least two distinct sizes"):
        fit_alpha_beta([8, 8], [1.0, 2.0])


@pytest.mark.parametrize(
    "p, all_reduce, one_pass", [(2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)]
)
def test_busbw_follows_nccl_tests(p, all_reduce, one_pass):
    algbw = algbw_gbps(2**30, 1e6)  # 1 GiB in one second
    assert algbw == pytest.approx(1.073741824)
    assert busbw_gbps(algbw, "all_reduce", p) == pytest.approx(algbw * all_reduce)
    assert busbw_gbps(algbw, "reduce_scatter", p) == pytest.approx(algbw * one_pass)
    assert busbw_gbps(algbw, "all_gather", p) == pytest.approx(algbw * one_pass)
    with pytest.raises(ValueError, match="kind must be one of"):
        busbw_gbps(algbw, "broadcast", p)


def test_traffic_model_and_the_sum_for_reduce_scatter_then_all_gather():
    for p in (2, 4, 8):
        assert traffic_bytes("psum", 1, p) == 3 * p - 1
        assert traffic_bytes("psum_scatter", 1, p) + traffic_bytes(
            "all_gather", 1, p
        ) == traffic_bytes("rs_ag_fused", 1, p)
    with pytest.raises(ValueError, match="variant must be one of"):
        traffic_bytes("all_to_all", 1, 4)


def test_combine_repeats_takes_the_median_of_medians():
    combined = combine_repeats([summary(100.0), summary(300.0), summary(110.0)])
    assert combined.median_us == 110.0 and combined.min_us == 90.0
    assert combined.spread == pytest.approx(200 / 110)
    assert combine_repeats([summary(100.0)]).spread == 0.0


def synthetic_results() -> BenchRun:
    """The saved run with its measured sections replaced by the synthetic reports'."""
    reports = [
        synthetic_report(p, SIZES, scale, repeat)
        for repeat, scale in enumerate((1.0, 1.2, 0.9))
        for p in (2, 4)
    ]
    rows = collective_rows(reports, memcpy_traffic_gbps=10.0)
    zero1 = zero1_rows(reports)
    saved = saved_results()
    return replace(
        saved,
        collectives=tuple(rows),
        fits=tuple(fit_rows(rows)),
        rs_ag_vs_psum=tuple(rs_ag_against_psum(rows)),
        zero1=tuple(zero1),
        zero1_goal=zero1_goal(zero1),
        plan=replace(saved.plan, repeats=3),
    )


def test_rows_fits_and_page_faults_from_synthetic_reports():
    results = synthetic_results()
    rows, fits = results.collectives, results.fits
    assert len(rows) == 2 * len(VARIANTS) * len(SIZES) and len(fits) == 2 * len(VARIANTS)
    for f in fits:  # the repeats' medians are the scale-1.0 times, so the fit is exact
        i = VARIANTS.index(f.variant)
        assert f.alpha_us == pytest.approx(50 * f.devices + 10 * i)
        assert f.bandwidth_gbps == pytest.approx(f.devices + i)
        assert f.max_spread == pytest.approx(0.3)
        largest = 4 * SIZES[-1]
        faults_from = PAGE_FAULT_BYTES * (
            f.devices if f.variant == "psum_scatter" else 1
        )  # output S/p
        if faults_from <= largest:
            assert (
                f.page_fault_from_bytes == faults_from and f.top.bytes == faults_from // 2
            )
        else:
            assert f.page_fault_from_bytes is None and f.top.bytes == largest
    psum = next(r for r in rows if r.devices == 4 and r.variant == "psum" and r.bytes == 2**22)
    assert psum.busbw_gbps == pytest.approx(1.5 * psum.algbw_gbps)
    assert psum.memcpy_fraction == pytest.approx(11 * 2**22 / psum.median_us / 1e3 / 10.0)
    faulting = {(r.variant, r.devices) for r in rows if r.page_fault}
    assert ("psum", 4) in faulting and (
        "psum_scatter",
        4,
    ) not in faulting  # psum_scatter outputs only S/p
    validate_figure_data(figure_data(results))
    validate_figure_data(steps_figure_data(results))


def test_zero1_goal_reads_ratio_and_state_fraction():
    goal = synthetic_results().zero1_goal
    assert goal.state_fraction == 0.25 and goal.ratio == pytest.approx(
        alpha_beta_us(200, 2, 2**22) / alpha_beta_us(100, 2, 2**22)
    )
    assert goal.met is (goal.ratio <= 1.1)
    assert zero1_goal([]) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"repeats": 0}, "--repeats must be a positive integer"),
        ({"repeats": True}, "--repeats must be a positive integer"),
        ({"max_log2": 30}, "--max-log2 must be an integer from 10 to 24"),
        ({"quick": True, "max_log2": 23}, "drop --quick or --max-log2"),
    ],
)
def test_bad_plans_say_what_to_do(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_plan(**kwargs)


def test_full_plan_follows_the_protocol():
    plan = make_plan()
    assert plan.devices == (2, 4, 8) and plan.sizes[0] == 2**3 and plan.sizes[-1] == 2**22
    assert (
        plan.repeats >= 3
        and plan.warmup >= 3
        and plan.samples_fast >= 50
        and plan.samples_slow >= 10
    )
    assert (
        2**20 in plan.zero1_sizes and plan.zero1_sizes[0] == 2**10 and plan.zero1_sizes[-1] == 2**22
    )


def test_cli_errors_exit_2_with_a_message(capsys):
    assert main(["bench", "--repeats", "0"]) == 2
    assert "course bench: error: --repeats must be a positive integer" in capsys.readouterr().err
    assert main(["bench", "--strategies", "--quick"]) == 2
    assert "course bench: error: --strategies takes no --quick or --repeats" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--no-such-option"])
    assert (
        exited.value.code == 2
        and "unrecognized arguments: --no-such-option" in capsys.readouterr().err
    )


def test_slow_calls_get_fewer_samples():
    import time

    from course_utils.observe.sweep import SLOW_CALL_US, time_interleaved

    def slow():
        time.sleep(2 * SLOW_CALL_US / 1e6)

    assert (
        time_interleaved({"fast": lambda: 0}, n_fast=4, n_slow=2, n_warmup=1)["fast"]["n_samples"]
        == 4
    )
    assert (
        time_interleaved({"slow": slow}, n_fast=4, n_slow=2, n_warmup=1)["slow"]["n_samples"] == 2
    )


def test_worker_pieces_on_four_devices():
    from course_utils.devices.setup import data_mesh
    from course_utils.observe.sweep import (
        collective_runs,
        compiled_collectives,
        time_interleaved,
        zero1_facts,
        zero1_runs,
    )
    from course_utils.tools.bench.worker import parse_args

    mesh = data_mesh()
    timed = time_interleaved(collective_runs(mesh, 64), n_fast=3, n_slow=3, n_warmup=1)
    assert list(timed) == list(VARIANTS) and all(t["n_samples"] == 3 for t in timed.values())
    facts = zero1_facts(zero1_runs(mesh, 1024))
    assert facts == {
        "state_bytes_device0": {"dp": 4096, "zero1_fused": 1024, "zero1_calls": 1024},
        "agree": True,
    }
    ops = compiled_collectives(mesh)
    assert ops["rs_ag_fused"] == ["reduce-scatter", "all-gather"] and ops["dp"] == ["all-reduce"]
    assert ops["zero1_fused"] == ["reduce-scatter", "all-gather"]  # with the vma check on
    with pytest.raises(SystemExit):
        parse_args(["--devices", "4", "--sizes", "6"])


def test_course_bench_quick_writes_json_and_png(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_utils.tools.cli",
            "bench",
            "--quick",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "ZeRO-1 goal" in done.stdout and "memcpy" in done.stdout
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "bench-steps.png").read_bytes()[:4] == b"\x89PNG"
    results = json.loads((tmp_path / "bench.json").read_text())
    assert {
        "meta",
        "load_average_before",
        "plan",
        "size_definition",
        "protocol",
        "memcpy",
        "collectives",
        "fits",
        "rs_ag_vs_psum",
        "zero1",
        "zero1_goal",
        "compiled_collectives",
    } <= set(results)
    assert {"cores", "jax"} <= set(results["meta"]["machine"])
    assert results["meta"]["command_line"] == f"course bench --quick --out {tmp_path}"
    assert results["meta"]["package"] == version("course-utils")
    assert len(results["collectives"]) == 2 * len(VARIANTS) * 4 and len(results["fits"]) == 2 * len(
        VARIANTS
    )
    row = results["collectives"][0]
    assert {
        "devices",
        "variant",
        "bytes",
        "median_us",
        "iqr_us",
        "min_us",
        "repeat_medians_us",
        "spread",
        "algbw_gbps",
        "busbw_gbps",
        "memcpy_fraction",
        "page_fault",
        "compile_us",
    } <= set(row)
    assert {"alpha_us", "bandwidth_gbps"} <= set(results["fits"][0])
    assert [(r["devices"], r["params"]) for r in results["zero1"]] == [
        (2, 2**10),
        (2, 2**20),
        (4, 2**10),
        (4, 2**20),
    ]
    assert all(r["agree"] for r in results["zero1"])
    assert results["zero1_goal"]["state_fraction"] == 0.25
    run = load_bench_run(tmp_path / "bench.json")  # the file's records give back the file
    assert run.zero1_goal.state_fraction == 0.25 and to_json(run) == results
    validate_figure_data(figure_data(run))
    validate_figure_data(steps_figure_data(run))
