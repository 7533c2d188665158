"""Saved runs read back: ``course bench`` (``bench``), the strategies of part three
(``strategies``), ``course cluster`` (``cluster``, ``training``, ``overlap``, ``links``,
``latency``), part five's sweep
(``diloco``), the held-out curves of all of them (``curves``); every one through one reader and
writer (``records``) with one record of how it was made (``meta``).

Modules: ``accelerator``: part four's step timed on a TPU chip; ``bench``: course bench;
``cluster``: course cluster's collectives; ``compiled``: step 19's program compiled for a TPU
topology; ``curves``: held-out
curves, their one runner and readers; ``diloco``: part five's saved sweep; ``diloco_cluster``: part
five's timed runs; ``diloco_figures``: the sweep's figure; ``latency``: what the delay line's
one-way delay costs a message; ``links``: the links' rates and ceiling; ``meta``: how a run was
made;
``overlap``: step 19's measurements; ``records``: the one reader and writer; ``round_trips``:
the latency run against the models (step 23); ``strategies``: part
three's strategies; ``streaming``: Streaming DiLoCo's held-out curves; ``training``: part four's
measurements; ``training_figures``: part four's figures.
"""
