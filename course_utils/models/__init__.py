"""The cost models the measurements are read against: the ring / α-β model, latency and
buckets, what crosses a host's link."""
