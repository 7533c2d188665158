"""Helpers for the course unit "Communication-efficient algorithms" (distributed-03).

Importing this package configures nothing: call ``use_cpu_devices(n)`` first, in a fresh kernel.
"""
from course_utils.cost import communication_budget, ring_bytes
from course_utils.data import check_regression_shapes, reference_gradient, toy_regression
from course_utils.devices import Placements, data_mesh, placements, use_cpu_devices
from course_utils.display import format_values
from course_utils.figures import placement_figure_data, plot_figure, validate_figure_data
from course_utils.ir import collectives_in
from course_utils.kernels import (COLLECTIVES, all_gather_shards, all_reduce_gradient, block_collective,
                                  local_contribution, momentum_update, reduce_scatter_gradient,
                                  sharded_momentum_step)
from course_utils.placement import placement_report, shard_shapes, values_per_device
from course_utils.timing import summarize, time_completed_calls

__all__ = [
    "COLLECTIVES", "Placements", "all_gather_shards", "all_reduce_gradient", "block_collective",
    "check_regression_shapes", "collectives_in", "communication_budget", "data_mesh", "format_values",
    "local_contribution", "momentum_update", "placement_figure_data",
    "placement_report", "placements", "plot_figure", "reduce_scatter_gradient", "reference_gradient",
    "ring_bytes", "shard_shapes", "sharded_momentum_step", "summarize", "time_completed_calls",
    "toy_regression", "use_cpu_devices", "validate_figure_data", "values_per_device",
]
