"""The daemon's session side: the client link and its lifetime, the sessions and their
requests in wire order, the socket link for renderers, the ops server, trust and the
configuration file.

It is imported by the command (``runtime.cli``) and its clients, never by the layers below
(the agent, the host's supervision, the link, process control), which it drives.
"""
