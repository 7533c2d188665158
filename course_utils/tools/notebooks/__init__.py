"""The commands that work on notebooks: ``course run``, ``course student``,
``course check-submission`` and ``course book``.

Modules: ``book``: course book; ``chapters``: the site's chapters; ``outline``: the outline;
``outline_five``: part five's outline entries; ``outline_four``: part four's outline entries;
``outline_six``: part six's outline entries;
``outline_three``: part three's outline entries;
``pages``: the pages written from the outline; ``records``: the outline's records; ``run``: course
run; ``site``: what the site shows of a notebook; ``student``: course student; ``submission``:
course check-submission.
"""
