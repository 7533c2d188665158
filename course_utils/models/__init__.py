"""The models the measurements are read against. ``cost_model``: the one α-β table of the
collectives (steps and fraction of N per step, per collective and algorithm), from which
``cost`` (the budget, nccl-tests' bandwidths), ``latency`` (algorithms, buckets, the two-level
schedule) and ``links`` (what crosses a host's link) derive; ``fit``: fitting ``T = α + S/B``;
``traffic``: the separate in-process memory-traffic model.

Modules: ``cost``: the budget and nccl-tests' bandwidths; ``cost_model``: the α-β table of the
collectives; ``fit``: fitting T = α + S/B; ``latency``: algorithms, buckets and the two-level
schedule; ``link_traffic``: what one optimizer step sends over a host's link; ``links``: what
crosses a host's link; ``step``: a step's time as compute + communication; ``traffic``: the
in-process memory-traffic model; ``window``: one TCP connection: its window against the
bandwidth-delay product, slow start.
"""
