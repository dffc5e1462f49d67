"""Bash (process): a shell command in the workspace, in its own session.

stdout and stderr stream through ``ctx.emit_output`` as they arrive (bounded
by ``config.max_output_bytes``; the result says when the live stream was cut).
The result carries the exit status and bounded output (head and tail). A stop
kills the whole process tree and returns ``ABORTED`` with the output collected
before termination; the timeout (``timeoutMs`` or the configured default)
does the same with ``TOOL_TIMEOUT``. Background jobs still running when the
shell exits are killed too: no process outlives its call.
"""

from __future__ import annotations

import logging
import shutil

from host import limits
from host.sandbox import watch
from host.sandbox.refusal import refusal
from host.tools.context import ToolContext, confined, run_abandonable
from host.tools.output import BoundedOutput, TextSink
from host.tools.process import TreeResult, run_tree
from protocol.errors import ErrorCode
from protocol.tools import BashArgs, ToolResult, aborted_result, error_result, ok_result

log = logging.getLogger(__name__)

DETAILS_TAIL_BYTES = 4096


def shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def _details(tree: TreeResult, out: BoundedOutput) -> dict[str, object]:
    return {
        **tree.details(),
        "output": out.tail(DETAILS_TAIL_BYTES),
        "outputBytes": out.total,
        "truncated": out.truncated,
        "streamTruncated": out.stream_truncated,
    }


def _notes(tree: TreeResult, out: BoundedOutput) -> str:
    notes: list[str] = []
    if out.stream_truncated:
        notes.append(f"[live output stopped after {out.emitted} bytes]")
    if tree.outcome == "exited" and tree.kill.found:
        notes.append(f"[{tree.kill.found} background processes were still running "
                     "and were terminated]")
    if not tree.drained:
        notes.append("[output pipes were still held open; output may be incomplete]")
    under = limits.ran_under()
    if tree.outcome == "exited" and tree.returncode and under and not tree.limit_hit:
        # A process past an rlimit fails inside itself: the host cannot tell that from
        # another failure, so a failed call names the limits it ran under.
        notes.append(f"[this call's processes ran limited to {under}]")
    return "\n".join(notes)


def _join(*parts: str) -> str:
    return "\n".join(part.rstrip("\n") for part in parts if part)


async def run(args: BashArgs, ctx: ToolContext) -> ToolResult:
    config = ctx.config
    timeout_ms = args.timeout_ms if args.timeout_ms is not None else config.bash_default_timeout_ms
    if ctx.stop.is_set():
        return aborted_result(before_dispatch=False, details={"started": False})
    out = BoundedOutput(config.max_output_bytes, ctx.emit_output)
    sandbox, env = await confined(ctx)
    if args.sandbox == "off" and sandbox is not None:
        log.warning("Bash call runs outside the sandbox (the user allowed it): %r",
                    args.command[:200])
        sandbox, env = None, {}
    root = str(ctx.workspace.root)
    before = await run_abandonable(lambda _: watch.snapshot(root)) if sandbox else None
    tree = await run_tree(
        [shell(), "-c", args.command], cwd=ctx.workspace.root, stop=ctx.stop,
        limit=timeout_ms / 1000, grace=config.kill_grace, marker=ctx.marker,
        env_extra={**ctx.env_marker, **env}, stdout=TextSink("stdout", out),
        stderr=TextSink("stderr", out), cgroup_name=ctx.cgroup_name, on_stop=ctx.on_stop,
        confine=sandbox)
    details = _details(tree, out)
    output = out.text()
    notes = _notes(tree, out)
    if before is not None:
        touched = watch.changed(before, await run_abandonable(lambda _: watch.snapshot(root)))
        if touched:
            details["controlFiles"] = touched
            notes = _join(notes, "[files that control later runs were changed: "
                          f"{', '.join(touched[:10])}{' ...' if len(touched) > 10 else ''}]")
    if tree.outcome == "stopped":
        return aborted_result(before_dispatch=False, details=details, extra_text=_join(
            "Output before the stop:" if output else "No output before the stop.",
            output, notes))
    if tree.outcome == "timeout":
        message = f"command timed out after {timeout_ms / 1000:g} s"
        return error_result(
            ErrorCode.TOOL_TIMEOUT, message, body_invoked=True, details=details,
            text=_join(f"Error: {message}; its process tree was killed.", output, notes))
    if tree.limit_hit:
        message = f"command hit {tree.limit_hit}"
        return error_result(
            ErrorCode.TOOL_FAILED, message, body_invoked=True, details=details,
            text=_join(f"Error: {message}.", output, notes,
                       f"[exit status {tree.exit_status}]" if tree.exit_status else ""))
    status = (f"[exit status {tree.exit_status}]" if tree.exit_status
              else f"[killed by {tree.signal}]" if tree.signal else "")
    refused = (refusal(ctx.sandbox, output, bool(tree.exit_status or tree.signal))
               if sandbox is not None and ctx.sandbox is not None else None)
    if refused is not None:
        details["sandbox"], line = refused
        status = _join(status, line)
    text = _join(output, notes, status) or "(no output)"
    return ok_result(text, details=details)
