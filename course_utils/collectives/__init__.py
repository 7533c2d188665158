"""The shard-mapped kernels, one module each: the gradient kernels and per-device collectives
(``kernels``), the ring built from ``ppermute`` (``ring``), the two-level all-reduce
(``hierarchy``), buckets (``bucketing``), compressed exchanges (``compression``), step 19's
backward pass overlapped with its all-reduce (``overlap``) and the collective matmul
(``collective_matmul``)."""
