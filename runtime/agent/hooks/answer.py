"""A hook's protocol, sans-IO: the JSON object it reads, and what its exit says.

Input (one JSON object on stdin): ``event`` (``pre_tool_use`` / ``post_tool_use``),
``sessionId``, ``turnId``, ``callId``, ``tool``, ``args``, ``workspace``, and for a post
hook ``result`` (``code``, ``isError``, ``content``: the text the model would see).

The answer, by exit:

- 0: allow. Stdout, if not blank, must be one JSON object with only these keys:
  ``decision`` (``allow`` / ``deny`` / ``ask``; ``ask`` only before the call), ``reason``,
  ``additionalContext`` (text attached to the call's result, the model sees it) and
  ``stopTurn`` (true: the turn stops, cause ``{kind: hook, reason}``).
- 2: deny; stderr is the reason.
- anything else, a signal, output that is not such an object (a key given twice, as in
  ``{"decision": "deny", "decision": "allow"}``, is ambiguous: not such an object), the
  hook's time limit, a command that cannot start: deny, saying the hook failed (fail
  closed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from protocol.messages.host import HooksRunResult
from protocol.tools import TextContent, ToolResult
from runtime.agent.hooks.config import HookEventName

REASON_LIMIT = 4096
"""Characters of a reason (or stderr) kept in a denial and the log."""
CONTEXT_LIMIT = 16 * 1024
"""Characters of a hook's ``additionalContext`` attached to a result."""


class _Answer(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    decision: Literal["allow", "deny", "ask"] = "allow"
    reason: str = ""
    additional_context: str | None = None
    stop_turn: bool = False


_answer_decoder = msgspec.json.Decoder(_Answer)


@dataclass(frozen=True)
class Verdict:
    decision: Literal["allow", "deny", "ask"]
    reason: str = ""
    failed: bool = False
    """The hook did not answer properly: before the call, a denial because it failed (fail
    closed); after it, the call's result stands and the failure is added to it."""
    context: str | None = None
    stop_turn: str | None = None
    """The reason of a ``stopTurn``, if the hook asked for one."""


def hook_input(event: HookEventName, *, session_id: str, turn_id: str, call_id: str,
               tool: str, args: Any, workspace: str, result: ToolResult | None = None) -> str:
    payload: dict[str, Any] = {
        "event": event, "sessionId": session_id, "turnId": turn_id, "callId": call_id,
        "tool": tool, "args": args, "workspace": workspace,
    }
    if result is not None:
        payload["result"] = {
            "code": result.code, "isError": result.is_error,
            "content": "\n".join(c.text for c in result.content if isinstance(c, TextContent)),
        }
    return msgspec.json.encode(payload).decode()


def _cut(text: str, limit: int = REASON_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " [...]"


FAILED_PREFIX = "the hook failed: "


def _failed(why: str) -> Verdict:
    return Verdict("deny", f"{FAILED_PREFIX}{why}", failed=True)


def _duplicated_key(text: str) -> str | None:
    """A key some object of the JSON ``text`` gives twice, if any (``msgspec``, like most
    JSON readers, would take the last silently)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> None:
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            found.extend(key for key in keys if keys.count(key) > 1)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None  # not JSON: the decoder says so
    return found[0] if found else None


def verdict(event: HookEventName, result: HooksRunResult, timeout: float) -> Verdict:
    """What a hook that ran to an end (not stopped) answered."""
    if result.outcome == "timeout":
        return _failed(f"it did not finish within its {timeout:g} s time limit")
    if result.outcome == "failed":
        return _failed(result.error or "it could not start")
    if result.signal is not None:
        return _failed(f"it was killed by {result.signal}")
    if result.exit_status == 2:
        return Verdict("deny", _cut(result.stderr) or "denied by a hook (exit status 2)")
    if result.exit_status != 0:
        stderr = _cut(result.stderr)
        return _failed(f"exit status {result.exit_status}" + (f": {stderr}" if stderr else ""))
    if not result.stdout.strip():
        return Verdict("allow")
    try:
        answer = _answer_decoder.decode(result.stdout.strip())
    except msgspec.DecodeError as exc:
        return _failed(f"its output is not a valid answer ({exc})")
    if (twice := _duplicated_key(result.stdout)) is not None:
        return _failed(f"its output gives the key {twice!r} more than once (ambiguous)")
    if answer.decision == "ask" and event == "post_tool_use":
        return _failed("`ask` is only an answer before a call runs")
    stop = (_cut(answer.reason) or "a hook stopped the turn") if answer.stop_turn else None
    context = answer.additional_context
    if context is not None:
        context = context[:CONTEXT_LIMIT]
    reason = _cut(answer.reason)
    if answer.decision == "deny" and not reason:
        reason = "denied by a hook"
    return Verdict(answer.decision, reason, context=context or None, stop_turn=stop)
