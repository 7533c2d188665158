"""Part three's training: every strategy one description in one registry (``strategies``), built
from its family's steps (``exact``, ``compressed``, ``local``, ``hsdp``, ``diloco``: part five's
mesh of replicas), the state they share
(``state``) and the optimizer they apply (``optimizers``); the rows each step sees (``batches``),
one run (``train``), the records it returns (``run``) and part four's rows (``part_four``)."""
