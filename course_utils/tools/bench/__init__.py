"""``course bench``: plan, worker processes, combining their reports, the report, and
``--strategies``.

Modules: ``combine``: the workers' reports combined; ``command``: the command; ``plan``: what to
measure, one worker per device count; ``report``: tables, summary and files; ``strategies``:
--strategies; ``worker``: one device count's process.
"""
