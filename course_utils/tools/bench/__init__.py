"""``course bench``: plan, worker processes, combining their reports, the report, and
``--strategies``."""
