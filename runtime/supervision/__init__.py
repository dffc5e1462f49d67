"""The runtime's supervision of its host process: the link to it, the succession of hosts
(started on demand, pinged, replaced after a crash), a turn's lease on one, and what a dead
host leaves behind, killed and reaped.

The agent and the daemon import it; it imports only ``runtime.link``, ``runtime.proc`` and
``protocol`` below it, and never ``host`` (the host is a program it starts).
"""
