"""Looking at what ran: placements (who holds what), the collectives in a compiled program,
timing of completed calls, and the benchmark's measurements (``sweep``)."""
