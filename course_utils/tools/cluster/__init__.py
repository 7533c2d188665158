"""``course cluster``: hosts as network namespaces (``netns``), the command, the registered
measurements (``measurements``; ``collectives``, ``training``, ``overlap``, ``links``,
``diloco``, one module each), one host's process (``worker``) and what it times with (``timing``).

Modules: ``collectives``: the default measurement, step 17's; ``command``: the command; ``diloco``:
part five's syncs; ``diloco_rounds``: the programs the diloco measurement times; ``links``: the
links' rates and ceiling; ``measurements``: the registry; ``netns``: hosts as network
namespaces; ``overlap``: step 19's backward pass and collective matmul; ``timing``: what a
host times with; ``training``: part four's training steps; ``worker``: one host's process.
"""
