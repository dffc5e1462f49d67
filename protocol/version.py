"""Protocol version and the compatibility rule of the ``initialize`` handshake."""

from __future__ import annotations

from protocol.errors import ErrorCode, RpcError

PROTOCOL_VERSION = "1.0"


def parse_version(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    def numeric(part: str) -> bool:  # ASCII digits only: "²".isdigit() is True
        return part.isascii() and part.isdigit()

    if not numeric(major) or (minor and not numeric(minor)):
        raise RpcError(ErrorCode.PROTOCOL_MISMATCH, f"malformed protocol version {version!r}",
                       {"supported": PROTOCOL_VERSION})
    return int(major), int(minor or 0)


def check_compatible(peer_version: str) -> None:
    """Raise PROTOCOL_MISMATCH unless the peer speaks our major version."""
    ours, _ = parse_version(PROTOCOL_VERSION)
    theirs, _ = parse_version(peer_version)
    if ours != theirs:
        raise RpcError(
            ErrorCode.PROTOCOL_MISMATCH,
            f"protocol major version {theirs} is not supported (this side speaks "
            f"{PROTOCOL_VERSION})",
            {"supported": PROTOCOL_VERSION, "requested": peer_version},
        )
