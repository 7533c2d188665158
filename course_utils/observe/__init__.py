"""Looking at what ran: placements (who holds what), the collectives in a compiled program,
timing of completed calls, and the benchmark's measurements (``sweep``).

Modules: ``ir``: the collectives of a compiled program; ``placement``: shard shapes and placement
reports; ``sweep``: the benchmark's measurements; ``timing``: the sampler of completed calls.
"""
