"""Tool arguments and the tool result shape shared by runtime and host.

Argument names are the ones models already know. Every args Struct forbids
unknown fields, so a mistyped or unknown argument is an ``INVALID_PARAMS`` tool
error with the offending path, never a crash.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from protocol.errors import ErrorCode

ABORTED_TEXT = "Error: tool call aborted"
ABORTED_BEFORE_DISPATCH_TEXT = "Error: tool call aborted before dispatch"
ABORT_ERROR_NAME = "AbortError"

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Positive = Annotated[int, msgspec.Meta(ge=1)]


class _Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class ReadArgs(_Args, frozen=True):
    path: str
    offset: NonNegative = 0
    limit: Positive | None = None


class GlobArgs(_Args, frozen=True, rename={"include_ignored": "includeIgnored"}):
    pattern: str
    path: str | None = None
    include_ignored: bool = False
    """Also list files ignore files name and hidden ones (``.git`` is always skipped)."""


class GrepArgs(_Args, frozen=True, rename={"ignore_case": "ignoreCase",
                                          "include_ignored": "includeIgnored"}):
    pattern: str
    path: str | None = None
    glob: str | None = None
    ignore_case: bool = False
    include_ignored: bool = False
    """Also search files ignore files name and hidden ones (``.git`` is always skipped)."""


class WriteArgs(_Args, frozen=True):
    path: str
    content: str


class EditArgs(_Args, frozen=True):
    path: str
    old_string: str
    new_string: str
    replace_all: bool = False


class BashArgs(_Args, frozen=True, rename={"timeout_ms": "timeoutMs"}):
    command: str
    timeout_ms: Positive | None = None


class GenerateImagesArgs(_Args, frozen=True):
    prompt: str
    count: Annotated[int, msgspec.Meta(ge=1, le=16)] = 1
    size: Annotated[str, msgspec.Meta(pattern=r"^[1-9][0-9]{0,3}x[1-9][0-9]{0,3}$")] = "256x256"


TOOL_ARGS: dict[str, type[_Args]] = {
    "Read": ReadArgs,
    "Glob": GlobArgs,
    "Grep": GrepArgs,
    "Write": WriteArgs,
    "Edit": EditArgs,
    "Bash": BashArgs,
    "GenerateImages": GenerateImagesArgs,
}


class TextContent(msgspec.Struct, frozen=True, tag_field="type", tag="text"):
    text: str


class ImageContent(msgspec.Struct, frozen=True, tag_field="type", tag="image",
                   rename={"mime_type": "mimeType"}):
    path: str
    mime_type: str = "image/png"


Content = TextContent | ImageContent


class ErrorInfo(msgspec.Struct, frozen=True):
    name: str
    code: str


class ToolError(msgspec.Struct, frozen=True):
    message: str
    info: ErrorInfo


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True,
                 rename={"is_error": "isError", "body_invoked": "bodyInvoked"}):
    """One authoritative result of one tool call.

    ``body_invoked`` is recorded by whoever calls the tool body (the host for host
    tools), immediately before the call; it is what separates ``ABORTED`` from
    ``ABORTED_BEFORE_DISPATCH``. ``details`` carries tool-specific facts (exit
    status, what a mutating operation actually did, ``unconfirmed``, ``forced``).
    """

    content: tuple[Content, ...]
    is_error: bool = False
    error: ToolError | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)
    body_invoked: bool = False

    @property
    def code(self) -> str | None:
        return self.error.info.code if self.error is not None else None


def ok_result(text: str, *, details: dict[str, Any] | None = None,
              extra: tuple[Content, ...] = ()) -> ToolResult:
    return ToolResult(content=(TextContent(text), *extra), details=details or {},
                      body_invoked=True)


def error_result(code: ErrorCode, message: str, *, name: str = "ToolError",
                 body_invoked: bool, details: dict[str, Any] | None = None,
                 text: str | None = None) -> ToolResult:
    return ToolResult(
        content=(TextContent(text if text is not None else f"Error: {message}"),),
        is_error=True,
        error=ToolError(message=message, info=ErrorInfo(name=name, code=code.name)),
        details=details or {},
        body_invoked=body_invoked,
    )


def aborted_result(*, before_dispatch: bool, details: dict[str, Any] | None = None,
                   extra_text: str = "") -> ToolResult:
    """The two abort results, with their exact model texts and error name."""
    if before_dispatch:
        text, code = ABORTED_BEFORE_DISPATCH_TEXT, ErrorCode.ABORTED_BEFORE_DISPATCH
    else:
        text, code = ABORTED_TEXT, ErrorCode.ABORTED
    content: tuple[Content, ...] = (TextContent(text),)
    if extra_text:
        content = (*content, TextContent(extra_text))
    return ToolResult(
        content=content,
        is_error=True,
        error=ToolError(message=text.removeprefix("Error: "),
                        info=ErrorInfo(name=ABORT_ERROR_NAME, code=code.name)),
        details=details or {},
        body_invoked=not before_dispatch,
    )


Decision = Literal["allow-once", "allow-session", "deny", "deny-session"]
