"""Training, parts three to five: every strategy one description in one registry (``strategies``),
built from its family's steps (``exact``, ``compressed``, ``local``, ``hsdp``, ``diloco``: part
five's mesh of replicas), the state they share (``state``) and the optimizer they apply
(``optimizers``); the rows each step sees (``batches``), its compiled programs (``programs``),
one run (``train``), the records it returns (``run``) and part four's rows (``part_four``).

Modules: ``batches``: the rows each step sees; ``compressed``: the compression schemes; ``diloco``:
DiLoCo and its baselines; ``exact``: data parallelism and the ZeRO stages; ``hsdp``: HSDP;
``layers``: ZeRO-3's layout; ``local``: local SGD; ``optimizers``: the inner optimizer;
``part_four``: part four's rows; ``programs``: a strategy's compiled programs; ``quantize``:
quantized outer gradients; ``run``: the records a run returns; ``state``: what every strategy
shares; ``strategies``: the registry; ``strategy_spec``: the registry's records; ``streaming``:
Streaming DiLoCo's schedule; ``streaming_diloco``: Streaming DiLoCo; ``traffic``: a strategy's
modelled traffic; ``train``: one run.
"""
