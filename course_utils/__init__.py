"""The teaching core of the course unit "Communication-efficient algorithms" (distributed-03).

What the notebooks import. Importing this package configures nothing: call ``use_cpu_devices(n)``
first, in a fresh kernel. The tools behind the ``course`` command live in ``course_utils.tools``,
which this package never imports.

The names below load on first use (PEP 562), so that `course launch` and other commands that need
only a constant or two do not pay for importing JAX.
"""

import importlib

# public name: (module in this package, name there)
_API = {
    "bench_figure_data": ("bench_results", "figure_data"),
    "bench_steps_figure_data": ("bench_results", "steps_figure_data"),
    "saved_bench_results": ("bench_results", "saved_results"),
    "algbw_gbps": ("cost", "algbw_gbps"),
    "busbw_gbps": ("cost", "busbw_gbps"),
    "communication_budget": ("cost", "communication_budget"),
    "divisible_size": ("cost", "divisible_size"),
    "fit_alpha_beta": ("cost", "fit_alpha_beta"),
    "model_time_us": ("cost", "model_time_us"),
    "ring_bytes": ("cost", "ring_bytes"),
    "ring_steps": ("cost", "ring_steps"),
    "ring_time_us": ("cost", "ring_time_us"),
    "traffic_bytes": ("cost", "traffic_bytes"),
    "check_regression_shapes": ("data", "check_regression_shapes"),
    "reference_gradient": ("data", "reference_gradient"),
    "toy_regression": ("data", "toy_regression"),
    "Placements": ("devices", "Placements"),
    "data_mesh": ("devices", "data_mesh"),
    "placements": ("devices", "placements"),
    "use_cpu_devices": ("devices", "use_cpu_devices"),
    "format_bytes": ("display", "format_bytes"),
    "format_gbps": ("display", "format_gbps"),
    "format_values": ("display", "format_values"),
    "array_holdings": ("figures", "array_holdings"),
    "grid_panel": ("figures", "grid_panel"),
    "holdings": ("figures", "holdings"),
    "placement_figure_data": ("figures", "placement_figure_data"),
    "plot_figure": ("plotting", "plot_figure"),
    "validate_figure_data": ("figures", "validate_figure_data"),
    "collectives_in": ("ir", "collectives_in"),
    "COLLECTIVES": ("kernels", "COLLECTIVES"),
    "Kernel": ("kernels", "Kernel"),
    "all_gather_shards": ("kernels", "all_gather_shards"),
    "all_reduce_gradient": ("kernels", "all_reduce_gradient"),
    "block_collective": ("kernels", "block_collective"),
    "local_contribution": ("kernels", "local_contribution"),
    "momentum_update": ("kernels", "momentum_update"),
    "reduce_scatter_gradient": ("kernels", "reduce_scatter_gradient"),
    "sharded_momentum_step": ("kernels", "sharded_momentum_step"),
    "global_inputs": ("multiprocess", "global_inputs"),
    "host_problem": ("multiprocess", "host_problem"),
    "join_runtime": ("multiprocess", "join_runtime"),
    "shard_error": ("multiprocess", "shard_error"),
    "placement_report": ("placement", "placement_report"),
    "shard_shapes": ("placement", "shard_shapes"),
    "ALGORITHMS": ("latency", "ALGORITHMS"),
    "hierarchical_all_reduce": ("hierarchy", "hierarchical_all_reduce"),
    "hierarchical_time": ("hierarchy", "hierarchical_time"),
    "node_local_mesh": ("devices", "node_local_mesh"),
    "bucketed_all_reduce": ("bucketing", "bucketed_all_reduce"),
    "bucketed_step_time": ("latency", "bucketed_step_time"),
    "collective_time": ("latency", "collective_time"),
    "plan_buckets": ("latency", "plan_buckets"),
    "reduce_scatter_step": ("ring", "reduce_scatter_step"),
    "ring_all_gather": ("ring", "ring_all_gather"),
    "ring_chunk": ("ring", "ring_chunk"),
    "ring_permutation": ("ring", "ring_permutation"),
    "ring_reduce_scatter": ("ring", "ring_reduce_scatter"),
    "values_per_device": ("placement", "values_per_device"),
    "sample_blocked": ("timing", "sample_blocked"),
    "summarize": ("timing", "summarize"),
    "time_completed_calls": ("timing", "time_completed_calls"),
    "STRATEGIES": ("strategies", "STRATEGIES"),
    "train": ("training", "train"),
    "saved_strategy_results": ("strategy_results", "saved_strategy_results"),
    "find_run": ("strategy_results", "find_run"),
    "loss_at": ("strategy_results", "loss_at"),
    "sent_bytes": ("strategy_results", "sent_bytes"),
    "tradeoff_figure_data": ("strategy_results", "tradeoff_figure_data"),
    "ring_payload": ("ir", "ring_payload"),
    "classification_task": ("task", "classification_task"),
    "padded_size": ("task", "padded_size"),
    "N_PARAMS": ("task", "N_PARAMS"),
    "bf16_all_reduce": ("compression", "bf16_all_reduce"),
    "int8_all_reduce": ("compression", "int8_all_reduce"),
    "topk_select": ("compression", "topk_select"),
    "sparse_all_gather": ("compression", "sparse_all_gather"),
    "powersgd_round": ("compression", "powersgd_round"),
}

__all__ = sorted(_API)


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    module, attribute = _API[name]
    value = getattr(importlib.import_module(f"course_utils.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
