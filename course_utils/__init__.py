"""The teaching core of the course unit "Communication-efficient algorithms" (distributed-03).

What the notebooks import. Importing this package configures nothing: call ``use_cpu_devices(n)``
first, in a fresh kernel. The tools behind the ``course`` command live in ``course_utils.tools``,
which this package never imports.
"""

from course_utils.bench_results import figure_data as bench_figure_data
from course_utils.bench_results import saved_results as saved_bench_results
from course_utils.cost import (
    algbw_gbps,
    busbw_gbps,
    communication_budget,
    divisible_size,
    fit_alpha_beta,
    model_time_us,
    ring_bytes,
    ring_steps,
    ring_time_us,
    traffic_bytes,
)
from course_utils.data import check_regression_shapes, reference_gradient, toy_regression
from course_utils.devices import Placements, data_mesh, placements, use_cpu_devices
from course_utils.display import format_bytes, format_gbps, format_values
from course_utils.figures import placement_figure_data, plot_figure, validate_figure_data
from course_utils.ir import collectives_in
from course_utils.kernels import (
    COLLECTIVES,
    Kernel,
    all_gather_shards,
    all_reduce_gradient,
    block_collective,
    local_contribution,
    momentum_update,
    reduce_scatter_gradient,
    sharded_momentum_step,
)
from course_utils.multiprocess import global_inputs, host_problem, join_runtime, shard_error
from course_utils.placement import placement_report, shard_shapes, values_per_device
from course_utils.timing import sample_blocked, summarize, time_completed_calls

__all__ = [
    "COLLECTIVES",
    "Kernel",
    "Placements",
    "algbw_gbps",
    "all_gather_shards",
    "all_reduce_gradient",
    "bench_figure_data",
    "block_collective",
    "busbw_gbps",
    "check_regression_shapes",
    "collectives_in",
    "communication_budget",
    "data_mesh",
    "divisible_size",
    "fit_alpha_beta",
    "format_bytes",
    "format_gbps",
    "format_values",
    "global_inputs",
    "host_problem",
    "join_runtime",
    "local_contribution",
    "model_time_us",
    "momentum_update",
    "placement_figure_data",
    "placement_report",
    "placements",
    "plot_figure",
    "reduce_scatter_gradient",
    "reference_gradient",
    "ring_bytes",
    "ring_steps",
    "ring_time_us",
    "sample_blocked",
    "saved_bench_results",
    "shard_error",
    "shard_shapes",
    "sharded_momentum_step",
    "summarize",
    "time_completed_calls",
    "toy_regression",
    "traffic_bytes",
    "use_cpu_devices",
    "validate_figure_data",
    "values_per_device",
]
