"""The Agent Client Protocol (ACP v1) dialect: ``quiesce acp``.

A translation layer over the native client link, not a second agent: the ACP
server is a native client of an in-process :class:`runtime.daemon.daemon.Daemon`, so
turns, the host and the stop policy are the daemon's own.
"""
