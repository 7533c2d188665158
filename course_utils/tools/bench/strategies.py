"""``course bench --strategies``: every training run of part three (``strategy_results.PLAN``),
in one worker process with ``strategy_results.DEVICES`` devices; writes ``strategies.json`` and
``strategies.png``.

Run as ``python -m course_utils.tools.bench.strategies`` it is that worker: it trains the plan
and prints one JSON line per run, then the results.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from course_utils.tools.bench.plan import run_worker
from course_utils.tools.bench.worker import emit

if TYPE_CHECKING:
    from course_utils.results.strategies import StrategyResults

# more than the plan takes on a busy 2-core machine (about a minute when idle)
TIMEOUT_S = 900.0


def run_strategies(out_dir: Path, on_run) -> StrategyResults:
    """Run the worker, passing each run's label to ``on_run``; write and return the results."""
    from course_utils.figures.plot import plot_figure
    from course_utils.results.records import from_json, save
    from course_utils.results.strategies import DEVICES, StrategyResults, tradeoff_figure_data

    command = [sys.executable, "-m", "course_utils.tools.bench.strategies", str(DEVICES)]
    event = run_worker(command, TIMEOUT_S, lambda event: on_run(event["label"]))
    event.pop("event")
    results = from_json(StrategyResults, event, "the strategies worker's result")
    out_dir.mkdir(parents=True, exist_ok=True)
    save(results, out_dir / "strategies.json")
    (out_dir / "strategies.png").write_bytes(plot_figure(tradeoff_figure_data(results)).png())
    return results


def main(argv: list[str]) -> int:
    """The worker: ``argv`` is the device count."""
    from course_utils.devices.setup import data_mesh, use_cpu_devices
    from course_utils.results.records import to_json
    from course_utils.results.strategies import run_plan

    use_cpu_devices(int(argv[0]))
    results = run_plan(data_mesh(), on_run=lambda label: emit("progress", label=label))
    emit("result", **to_json(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
