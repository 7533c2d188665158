"""The course tools: everything behind the ``course`` command (run, student, check-submission,
launch, bench). They import the teaching core (``course_utils``); the core never imports them."""
