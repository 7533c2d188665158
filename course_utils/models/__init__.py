"""The models the measurements are read against. ``cost_model``: the one α-β table of the
collectives (steps and fraction of N per step, per collective and algorithm), from which
``cost`` (the budget, nccl-tests' bandwidths), ``latency`` (algorithms, buckets, the two-level
schedule) and ``links`` (what crosses a host's link) derive; ``fit``: fitting ``T = α + S/B``;
``traffic``: the separate in-process memory-traffic model."""
