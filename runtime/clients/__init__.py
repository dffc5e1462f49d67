"""The clients the daemon never imports: ``quiesce chat``, ``quiesce acp``'s ACP server,
``quiesce ops`` and ``quiesce demo``, with what they share (the daemon as a subprocess,
the one renderer of session events).

Only ``runtime.cli`` imports this layer; it may import the daemon and everything below it
(``acp`` runs a daemon in-process), but talks to it as a client does, over the client link.
"""
