"""``course cluster``: hosts as network namespaces (``netns``), the command, one host's process
(``worker``)."""
