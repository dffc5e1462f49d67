"""The runtime process (``quiesce serve``): the daemon that runs agent turns and never
touches the workspace itself, in layers from the command down.

``cli`` (the ``quiesce`` command) > ``clients`` (chat, acp, ops, demo) > ``daemon`` (the
client link and the sessions) > ``agent`` (turns, the registry, providers) >
``supervision`` (the host process) > ``link`` | ``proc`` (what the host loads too). A layer
imports only the layers below it (``[tool.importlinter]`` in pyproject.toml, checked by
``lint-imports``); nothing here imports ``host``, but for ``quiesce host`` in ``cli``.
"""
