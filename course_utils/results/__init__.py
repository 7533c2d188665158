"""Saved runs read back: ``course bench`` (``bench``), the strategies of part three
(``strategies``), ``course cluster`` (``cluster``, ``training``, ``overlap``), part five's sweep
(``diloco``); every one through
one reader and writer (``records``) with one record of how it was made (``meta``)."""
