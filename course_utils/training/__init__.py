"""Part three's training: every strategy as ``init`` and ``step`` (``strategies``), the rows each
step sees (``batches``), ``train``, one run (``train``), and the records it returns (``run``)."""
