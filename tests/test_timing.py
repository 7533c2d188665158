import jax
import pytest

from course_utils import summarize, time_completed_calls


def test_samples_and_statistics_are_consistent():
    calls = []

    def fn(a):
        calls.append(1)
        return a + 1

    result = time_completed_calls(fn, jax.numpy.ones(3), n_samples=9, n_warmup=2)
    assert len(calls) == 11
    assert len(result["samples_us"]) == 9 and all(s > 0 for s in result["samples_us"])
    assert result["min_us"] <= result["median_us"] and result["iqr_us"] >= 0
    assert result["compile_us"] is None


def test_jitted_functions_report_a_compile_time():
    result = time_completed_calls(jax.jit(lambda a: a * 3), jax.numpy.ones(5), n_samples=3)
    assert result["compile_us"] > 0


def test_many_collective_calls_complete_without_deadlock():
    from course_utils import all_reduce_gradient, data_mesh, toy_regression

    result = time_completed_calls(
        all_reduce_gradient(data_mesh()), *toy_regression(), n_samples=200, n_warmup=3
    )
    assert len(result["samples_us"]) == 200


def test_summarize_and_bad_arguments():
    assert summarize([5.0]) == {
        "median_us": 5.0, "iqr_us": 0.0, "min_us": 5.0, "q1_us": 5.0, "q3_us": 5.0
    }
    with pytest.raises(ValueError, match="no timing samples"):
        summarize([])
    with pytest.raises(ValueError, match="n_samples must be a positive integer"):
        time_completed_calls(lambda: 0, n_samples=0)
    with pytest.raises(ValueError, match="n_warmup"):
        time_completed_calls(lambda: 0, n_warmup=-1)
