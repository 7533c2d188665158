"""Saved runs read back: ``course bench`` (``bench``), the strategies of part three
(``strategies``), ``course cluster`` (``cluster``)."""
