"""The shard-mapped kernels: the gradient kernels and per-device collectives (``kernels``), the
ring built from ``ppermute`` (``ring``), the two-level all-reduce, buckets, compressed exchanges."""
