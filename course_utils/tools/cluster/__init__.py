"""``course cluster``: hosts as network namespaces (``netns``), the command, the registered
measurements (``measurements``; ``collectives``, ``training``, ``overlap``, one module each),
one host's process (``worker``) and what it times with (``timing``)."""
