"""What an MCP call's outcome becomes: one quiesce ``ToolResult``.

- a result: its content blocks (text kept, an embedded text resource's text too, up to
  ``RESOURCE_TEXT`` characters; images, audio, binary resources and resource links
  summarised in a line, since a plugin's bytes do not belong in the transcript);
  ``isError: true`` is ``TOOL_FAILED``;
- an error response: ``TOOL_FAILED``, or ``ABORTED`` after a stop (servers that
  answer a cancelled request answer it with an error);
- the server exiting under the call: ``TOOL_FAILED`` (the body ran);
- a stop the server read and then stayed silent about: ``ABORTED`` marked
  ``unconfirmed`` (``details.cancelRead``): MCP cannot confirm a tool stopped.
"""

from __future__ import annotations

from typing import Any

import msgspec

from host.plugins.request import CallOutcome
from protocol.errors import ErrorCode
from protocol.tools import Content, TextContent, ToolResult, aborted_result, error_result

MAX_TEXT = 256 * 1024
RESOURCE_TEXT = 32 * 1024
"""Characters of one embedded text resource shown; the rest is cut with a marker."""
UNCONFIRMED_TEXT = ("The plugin server acknowledged reading the cancel, but MCP gives no "
                    "confirmation that the tool stopped: it may still be running, and its "
                    "effects are unknown.")


def _summary(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind in ("image", "audio"):
        size = len(str(block.get("data", ""))) * 3 // 4
        return f"[{kind} {block.get('mimeType', '?')}, {size} bytes, not shown]"
    if kind == "resource":
        return _resource(block.get("resource"))
    if kind == "resource_link":
        return f"[resource link {block.get('uri', '?')}: {block.get('name', '')}]"
    return f"[{kind} content, not shown]"


def _resource(resource: object) -> str:
    """An embedded resource: a text one with its text (its first ``RESOURCE_TEXT``
    characters, then a marker), a binary one summarised (type and size, no bytes)."""
    if not isinstance(resource, dict):
        return "[resource, not shown]"
    uri, mime = resource.get("uri", "?"), resource.get("mimeType")
    label = f"{uri}, {mime}" if isinstance(mime, str) else str(uri)
    text = resource.get("text")
    if isinstance(text, str):
        if len(text) > RESOURCE_TEXT:
            text = (f"{text[:RESOURCE_TEXT]}\n[… {len(text) - RESOURCE_TEXT} more characters "
                    f"of {uri} cut]")
        return f"[resource {label}]\n{text}"
    blob = resource.get("blob")
    size = len(blob) * 3 // 4 - blob[-2:].count("=") if isinstance(blob, str) else 0
    return f"[resource {label}, {size} bytes, not shown]"


def _content(blocks: tuple[dict[str, Any], ...],
             structured: dict[str, Any] | None) -> tuple[Content, ...]:
    texts = [_summary(b) for b in blocks]
    if not texts and structured is not None:
        texts = [msgspec.json.encode(structured).decode()]
    text = "\n".join(texts)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + f"\n[… {len(text) - MAX_TEXT} more characters cut]"
    return (TextContent(text),)


def to_tool_result(outcome: CallOutcome, server: str, tool: str, quiet: float) -> ToolResult:
    where = {"plugin": {"server": server, "tool": tool}}
    if outcome.unconfirmed:
        return aborted_result(
            before_dispatch=False,
            details={**where, "unconfirmed": True, "cancelRead": True, "cancel": (
                f"sent; the server read it (answered a ping) and then sent nothing for the "
                f"call for {quiet:g} s; MCP gives no confirmation that the tool stopped")},
            extra_text=UNCONFIRMED_TEXT)
    if outcome.crashed is not None:
        return error_result(ErrorCode.TOOL_FAILED,
                            f"plugin server {server} ended during the call: {outcome.crashed}",
                            body_invoked=True, details={**where, "serverExited": True})
    if outcome.error is not None:
        if outcome.stopped:
            return aborted_result(before_dispatch=False, details={
                **where, "cancel": f"answered with an error: {outcome.error.message}"})
        return error_result(ErrorCode.TOOL_FAILED,
                            f"plugin server {server} refused the call: {outcome.error.message}",
                            body_invoked=True, details=where)
    result = outcome.result
    assert result is not None
    content = _content(result.content, result.structured_content)
    details: dict[str, Any] = dict(where)
    if result.structured_content is not None:
        details["structuredContent"] = result.structured_content
    if result.is_error:
        message = content[0].text if isinstance(content[0], TextContent) else "error"
        failed = error_result(ErrorCode.TOOL_FAILED, message[:500], body_invoked=True,
                              details=details)
        return msgspec.structs.replace(failed, content=content)
    return ToolResult(content=content, details=details, body_invoked=True)
