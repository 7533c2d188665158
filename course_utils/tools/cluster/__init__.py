"""``course cluster``: hosts as network namespaces (``netns``), the command, the registered
measurements (``measurements``; ``collectives``, ``training``, ``overlap``, ``links``,
``diloco``, ``latency``, one module each), one host's process (``worker``) and what it times
with (``timing``).

Modules: ``collectives``: the default measurement, step 17's; ``command``: the command; ``delay``:
the delay line of ``--delay`` (netem, or TUN devices and a relay); ``diloco``: part five's syncs;
``diloco_rounds``: the programs the diloco measurement times; ``guard``: removes a cluster whose
command was killed; ``latency``: what a one-way delay costs a message, an all-reduce and a
connection; ``links``: the links' rates and ceiling; ``measurements``: the registry; ``netns``:
hosts as network namespaces; ``overlap``: step 19's backward pass and collective matmul; ``relay``:
the TUN delay line's relay; ``tcp``: the latency measurement's TCP connection (window, slow start,
idle gap); ``timing``: what a host times with; ``training``: part four's training steps; ``worker``:
one host's process.
"""
