"""The wire, sans-IO: framing, JSON-RPC envelopes, every message of every link as a frozen
msgspec Struct, the error catalogue, ids, causes and the tools' specifications.

It imports msgspec and the standard library only (no I/O library, nothing of ``runtime``
or ``host``), so both processes and every client stand on it; ``docs/protocol.md`` and
``docs/protocol.schema.json`` are generated from it.
"""
