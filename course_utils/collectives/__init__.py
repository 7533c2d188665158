"""The shard-mapped kernels: the gradient kernels and per-device collectives (``kernels``), the
ring built from ``ppermute`` (``ring``), the two-level all-reduce, buckets, compressed exchanges.

Modules: ``bucketing``: gradients all-reduced as a few flat buckets; ``collective_matmul``: a matmul
whose blocks travel between the hosts; ``compression``: what each scheme of step 15 sends and how it
is rebuilt; ``doubling``: recursive doubling from ppermute; ``hierarchy``: the two-level
all-reduce; ``kernels``: the gradient kernels and per-device collectives; ``overlap``: one
bucket's all-reduce while the backward pass computes the next; ``ring``: reduce-scatter and
all-gather from ppermute.
"""
