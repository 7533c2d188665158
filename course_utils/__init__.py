"""The teaching core of the course unit "Communication-efficient algorithms" (distributed-03).

What the notebooks use, read at the call site: ``import course_utils as cu`` and
``from course_utils import checks`` (``cu.data_mesh()``, ``checks.check_pmean_weights(...)``).
Importing this package configures nothing: call ``cu.use_cpu_devices(n)`` first, in a fresh
kernel. The tools behind the ``course`` command live in ``course_utils.tools``, which this
package never imports.

Sub-packages, in layer order (each imports only those before it): ``constants``, ``display``,
``validate``, ``problems``, ``models``, ``devices``, ``collectives``, ``observe``, ``training``,
``figures``, ``results``, ``checks``; ``tools`` (the ``course`` command) above them all.

The names below load on first use (PEP 562), so that `course launch` and other commands that need
only a constant or two do not pay for importing JAX. A group of names that belongs together is
one module namespace (``cu.diloco_cluster.step``, ``cu.optimizers.adamw``), listed in
``_NAMESPACES``.
"""

import importlib

# public name: (module in this package, name there)
_API = {
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
    "Fit": ("models.fit", "Fit"),
    "fit_alpha_beta": ("models.fit", "fit_alpha_beta"),
    "traffic_bytes": ("models.traffic", "traffic_bytes"),
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
    "schedule_figure_data": ("figures.streaming", "schedule_figure_data"),
    "wall_clock_figure_data": ("figures.streaming", "wall_clock_figure_data"),
    "Collective": ("observe.ir", "Collective"),
    "ProgramCollectives": ("observe.ir", "ProgramCollectives"),
    "collectives_in": ("observe.ir", "collectives_in"),
    "collective_schedule": ("observe.ir", "collective_schedule"),
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
    "recursive_doubling_all_reduce": ("collectives.doubling", "recursive_doubling_all_reduce"),
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
    "ring_payload": ("observe.ir", "ring_payload"),
    "classification_task": ("problems.classification", "classification_task"),
    "padded_size": ("problems.classification", "padded_size"),
    "N_PARAMS": ("problems.classification", "N_PARAMS"),
    "bf16_all_reduce": ("collectives.compression", "bf16_all_reduce"),
    "int8_all_reduce": ("collectives.compression", "int8_all_reduce"),
    "topk_select": ("collectives.compression", "topk_select"),
    "sparse_all_gather": ("collectives.compression", "sparse_all_gather"),
    "powersgd_round": ("collectives.compression", "powersgd_round"),
    "MATMUL_COLUMNS": ("collectives.collective_matmul", "MATMUL_COLUMNS"),
    "MATMUL_ROWS": ("collectives.collective_matmul", "MATMUL_ROWS"),
    "by_hand_matmul": ("collectives.collective_matmul", "by_hand_matmul"),
    "by_hand_programs": ("collectives.collective_matmul", "by_hand_programs"),
    "gathered_matmul": ("collectives.collective_matmul", "gathered_matmul"),
    "TOWER": ("collectives.overlap", "TOWER"),
    "Tower": ("collectives.overlap", "Tower"),
    "one_program_backward": ("collectives.overlap", "one_program_backward"),
    "overlapped_backward": ("collectives.overlap", "overlapped_backward"),
    "overlap_programs": ("collectives.overlap", "programs"),
    "tower_loss": ("collectives.overlap", "tower_loss"),
    "tower_problem": ("collectives.overlap", "tower_problem"),
    "ATOL": ("constants", "ATOL"),
    "BETA": ("constants", "BETA"),
    "LR": ("constants", "LR"),
    "RTOL": ("constants", "RTOL"),
    "bars_figure_data": ("figures.builders", "bars_figure_data"),
    "model_figure_data": ("figures.builders", "model_figure_data"),
    "timing_figure_data": ("figures.builders", "timing_figure_data"),
    "ring_reduce_scatter_figure_data": ("figures.data", "ring_reduce_scatter_figure_data"),
    "ring_reduce_scatter_steps": ("figures.data", "ring_reduce_scatter_steps"),
    "FRAME_SHARE": ("models.links", "FRAME_SHARE"),
    "link_bytes": ("models.links", "link_bytes"),
    "link_time_s": ("models.links", "link_time_s"),
    "rate_bytes_per_s": ("models.links", "rate_bytes_per_s"),
    "rate_label": ("models.links", "rate_label"),
    "balanced_rows": ("models.step", "balanced_rows"),
    "break_even_bits": ("models.step", "break_even_bits"),
    "mlp_flops": ("models.step", "mlp_flops"),
    "step_time": ("models.step", "step_time"),
    "strategy_traffic": ("training.traffic", "strategy_traffic"),
    "hlo_collectives": ("observe.ir", "hlo_collectives"),
    "load_tpu_compiled": ("results.compiled", "load_tpu_compiled"),
    "load_accelerator_step": ("results.accelerator", "load_accelerator_step"),
    "stablehlo_signatures": ("observe.ir", "stablehlo_signatures"),
    "COLLECTIVE_KINDS": ("observe.sweep", "KIND"),
    "COLLECTIVE_LABELS": ("observe.sweep", "LABELS"),
    "SIZE_DEFINITION": ("observe.sweep", "SIZE_DEFINITION"),
    "collective_runs": ("observe.sweep", "collective_runs"),
    "time_interleaved": ("observe.sweep", "time_interleaved"),
    "LAYERS": ("problems.classification", "LAYERS"),
    "PART_FOUR_MLP": ("problems.classification", "PART_FOUR_MLP"),
    "cross_entropy_sum": ("problems.classification", "cross_entropy_sum"),
    "init_params": ("problems.classification", "init_params"),
    "loss_sum": ("problems.classification", "loss_sum"),
    "step_figure_data": ("results.training_figures", "step_figure_data"),
    "diloco_figure_data": ("results.diloco_figures", "diloco_figure_data"),
    "micro_batch_rows": ("training.batches", "micro_batch_rows"),
    "split_task": ("training.batches", "split_task"),
    "hsdp_program": ("training.hsdp", "hsdp_program"),
    "quantized_all_reduce": ("training.quantize", "quantized_all_reduce"),
    "quantization_error_bound": ("training.quantize", "error_bound"),
    "replica_mesh": ("training.diloco", "replica_mesh"),
    "replica_step": ("training.diloco", "replica_step"),
    "outer_step": ("training.diloco", "outer_step"),
    "layer_chunks": ("training.layers", "layer_chunks"),
    "COMPRESSED": ("training.part_four", "COMPRESSED"),
    "LOCAL_STEPS": ("training.part_four", "LOCAL_STEPS"),
    "ACCUMULATION": ("training.part_four", "ACCUMULATION"),
    "TOPK_FRACTION": ("training.part_four", "TOPK_FRACTION"),
    "Context": ("training.state", "Context"),
    "state_specs": ("training.state", "state_specs"),
    "StrategySpec": ("training.strategies", "StrategySpec"),
    "STRATEGY_SPECS": ("training.strategies", "SPECS"),
    "strategy_spec": ("training.strategies", "spec"),
    "zero_peak_bytes": ("training.strategies", "zero_peak_bytes"),
}

# public name: module in this package, read as a namespace (``cu.diloco_sweep.pick_lr``)
_NAMESPACES = {
    "bench_runs": "results.bench",
    "cluster_runs": "results.cluster",
    "curves": "results.curves",
    "diloco_cluster": "results.diloco_cluster",
    "diloco_sweep": "results.diloco",
    "optimizers": "training.optimizers",
    "overlap_runs": "results.overlap",
    "round_trips": "results.round_trips",
    "strategy_runs": "results.strategies",
    "streaming": "training.streaming",
    "streaming_curves": "results.streaming",
    "training_runs": "results.training",
}

__all__ = sorted([*_API, *_NAMESPACES])


def __getattr__(name: str):
    if name in _NAMESPACES:
        value = importlib.import_module(f"course_utils.{_NAMESPACES[name]}")
    elif name in _API:
        module, attribute = _API[name]
        value = getattr(importlib.import_module(f"course_utils.{module}"), attribute)
    else:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
