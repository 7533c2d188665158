"""The commands that work on notebooks: ``course run``, ``course student``,
``course check-submission`` and ``course book``."""
