"""The course tools: everything behind the ``course`` command (run, student, check-submission,
launch, bench, book, cluster). They import the teaching core (``course_utils``); the core never
imports them.

Modules: ``cli``: the course command's registry of subcommands; ``errors``: its one error type and
printer; ``processes``: worker processes under one deadline.
"""
