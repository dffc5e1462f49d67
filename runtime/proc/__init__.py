"""What the runtime and the host processes share: the JSON-RPC transport (``rpc``), the
JSON-lines logging (``logs``), the stdout guard (``stdio``) and process-tree handling
(``proctree``: the child subreaper, finding and killing marked trees and adopted orphans).

A leaf: it imports ``protocol`` and libraries, never the rest of ``runtime`` nor ``host``
(``[tool.importlinter]`` in pyproject.toml, run by ``lint-imports`` in ./scripts/check).
It lives under ``runtime/`` because the top level is fixed (``runtime``, ``host``,
``protocol``) and ``protocol`` is sans-IO; see docs/architecture.md.
"""
