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
    "bench_figure_data": ("results.bench", "figure_data"),
    "bench_steps_figure_data": ("results.bench", "steps_figure_data"),
    "saved_bench_results": ("results.bench", "saved_results"),
    "algbw_gbps": ("models.cost", "algbw_gbps"),
    "busbw_gbps": ("models.cost", "busbw_gbps"),
    "communication_budget": ("models.cost", "communication_budget"),
    "divisible_size": ("models.cost", "divisible_size"),
    "Phase": ("models.cost_model", "Phase"),
    "PerCollective": ("models.cost_model", "PerCollective"),
    "Topology": ("models.cost_model", "Topology"),
    "bus_factor": ("models.cost_model", "bus_factor"),
    "bytes_sent": ("models.cost_model", "bytes_sent"),
    "link_bytes_sent": ("models.cost_model", "link_bytes_sent"),
    "message_steps": ("models.cost_model", "message_steps"),
    "modelled_time": ("models.cost_model", "modelled_time"),
    "ring_bytes": ("models.cost_model", "ring_bytes"),
    "ring_steps": ("models.cost_model", "ring_steps"),
    "ring_time": ("models.cost_model", "ring_time"),
    "schedule": ("models.cost_model", "schedule"),
    "Fit": ("models.fit", "Fit"),
    "fit_alpha_beta": ("models.fit", "fit_alpha_beta"),
    "fit_from_json": ("models.fit", "fit_from_json"),
    "traffic_bytes": ("models.traffic", "traffic_bytes"),
    "check_regression_shapes": ("problems.regression", "check_regression_shapes"),
    "reference_gradient": ("problems.regression", "reference_gradient"),
    "toy_regression": ("problems.regression", "toy_regression"),
    "Placements": ("devices.setup", "Placements"),
    "data_mesh": ("devices.setup", "data_mesh"),
    "placements": ("devices.setup", "placements"),
    "use_cpu_devices": ("devices.setup", "use_cpu_devices"),
    "format_bytes": ("display", "format_bytes"),
    "format_gbps": ("display", "format_gbps"),
    "format_values": ("display", "format_values"),
    "array_holdings": ("figures.data", "array_holdings"),
    "grid_panel": ("figures.data", "grid_panel"),
    "holdings": ("figures.data", "holdings"),
    "placement_figure_data": ("figures.data", "placement_figure_data"),
    "plot_figure": ("figures.plot", "plot_figure"),
    "validate_figure_data": ("figures.data", "validate_figure_data"),
    "Collective": ("observe.ir", "Collective"),
    "ProgramCollectives": ("observe.ir", "ProgramCollectives"),
    "collectives_in": ("observe.ir", "collectives_in"),
    "COLLECTIVES": ("collectives.kernels", "COLLECTIVES"),
    "Kernel": ("collectives.kernels", "Kernel"),
    "all_gather_shards": ("collectives.kernels", "all_gather_shards"),
    "all_reduce_gradient": ("collectives.kernels", "all_reduce_gradient"),
    "block_collective": ("collectives.kernels", "block_collective"),
    "local_contribution": ("collectives.kernels", "local_contribution"),
    "momentum_update": ("collectives.kernels", "momentum_update"),
    "reduce_scatter_gradient": ("collectives.kernels", "reduce_scatter_gradient"),
    "sharded_momentum_step": ("collectives.kernels", "sharded_momentum_step"),
    "global_inputs": ("devices.multiprocess", "global_inputs"),
    "host_problem": ("devices.multiprocess", "host_problem"),
    "join_runtime": ("devices.multiprocess", "join_runtime"),
    "shard_error": ("devices.multiprocess", "shard_error"),
    "placement_report": ("observe.placement", "placement_report"),
    "shard_shapes": ("observe.placement", "shard_shapes"),
    "ALGORITHMS": ("models.cost_model", "ALGORITHMS"),
    "hierarchical_all_reduce": ("collectives.hierarchy", "hierarchical_all_reduce"),
    "TwoLevelTime": ("models.latency", "TwoLevelTime"),
    "hierarchical_time": ("models.latency", "hierarchical_time"),
    "node_local_mesh": ("devices.setup", "node_local_mesh"),
    "bucketed_all_reduce": ("collectives.bucketing", "bucketed_all_reduce"),
    "bucketed_step_time": ("models.latency", "bucketed_step_time"),
    "collective_time": ("models.latency", "collective_time"),
    "plan_buckets": ("models.latency", "plan_buckets"),
    "reduce_scatter_step": ("collectives.ring", "reduce_scatter_step"),
    "ring_all_reduce": ("collectives.ring", "ring_all_reduce"),
    "ring_scatter_sum": ("collectives.ring", "ring_scatter_sum"),
    "ring_all_gather": ("collectives.ring", "ring_all_gather"),
    "ring_chunk": ("collectives.ring", "ring_chunk"),
    "ring_permutation": ("collectives.ring", "ring_permutation"),
    "ring_reduce_scatter": ("collectives.ring", "ring_reduce_scatter"),
    "values_per_device": ("observe.placement", "values_per_device"),
    "sample_blocked": ("observe.timing", "sample_blocked"),
    "summarize": ("observe.timing", "summarize"),
    "time_completed_calls": ("observe.timing", "time_completed_calls"),
    "STRATEGIES": ("training.strategies", "STRATEGIES"),
    "STRATEGY_STEPS": ("training.strategies", "STRATEGY_STEPS"),
    "Strategy": ("training.state", "Strategy"),
    "TrainState": ("training.state", "TrainState"),
    "StepInfo": ("training.state", "StepInfo"),
    "train": ("training.train", "train"),
    "TrainingRun": ("training.run", "TrainingRun"),
    "Memory": ("training.run", "Memory"),
    "saved_strategy_results": ("results.strategies", "saved_strategy_results"),
    "StrategyRun": ("results.strategies", "StrategyRun"),
    "StrategyResults": ("results.strategies", "StrategyResults"),
    "find_run": ("results.strategies", "find_run"),
    "heldout_at": ("results.strategies", "heldout_at"),
    "loss_at": ("results.strategies", "loss_at"),
    "sent_bytes": ("results.strategies", "sent_bytes"),
    "tradeoff_figure_data": ("results.strategies", "tradeoff_figure_data"),
    "ring_payload": ("observe.ir", "ring_payload"),
    "classification_task": ("problems.classification", "classification_task"),
    "padded_size": ("problems.classification", "padded_size"),
    "N_PARAMS": ("problems.classification", "N_PARAMS"),
    "bf16_all_reduce": ("collectives.compression", "bf16_all_reduce"),
    "int8_all_reduce": ("collectives.compression", "int8_all_reduce"),
    "topk_select": ("collectives.compression", "topk_select"),
    "sparse_all_gather": ("collectives.compression", "sparse_all_gather"),
    "powersgd_round": ("collectives.compression", "powersgd_round"),
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
