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

# Limits the tool specifications state (protocol/toolspecs.py); the host's defaults are
# these numbers (a test checks that they agree).
READ_DEFAULT_LINES = 2000
READ_MAX_LINE_CHARS = 2000
READ_MAX_BYTES = 256 * 1024
LIST_MAX_RESULTS = 1000  # Glob paths, Grep matching lines
OUTPUT_MAX_BYTES = 64 * 1024  # Bash output kept, Grep output
BASH_DEFAULT_TIMEOUT_MS = 120_000
BASH_MAX_TIMEOUT_MS = 1_800_000
IMAGES_MAX_COUNT = 16


WorkspacePath = Annotated[str, msgspec.Meta(description=
    "Path relative to the workspace root, with / separators (for example "
    "\"src/app.py\"). Absolute paths, .. above the root and symlinks leading out of "
    "the workspace are refused.")]


class _Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class ReadArgs(_Args, frozen=True):
    path: WorkspacePath
    offset: Annotated[int, msgspec.Meta(description=
        "Lines to skip from the start of the file (0 reads from line 1). Use the offset "
        "a truncated result names to read on.", ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(description=
        f"Most lines to return (default {READ_DEFAULT_LINES}).", ge=1)] | None = None


class GlobArgs(_Args, frozen=True, rename={"include_ignored": "includeIgnored"}):
    pattern: Annotated[str, msgspec.Meta(description=
        "Glob matched against each file's path relative to path (default: the "
        "workspace root): * and ? stay within one path component, ** spans any number "
        "of directories, [abc] is a set, {a,b} alternatives (for example \"**/*.py\", "
        "\"src/**/test_*.{ts,tsx}\").")]
    path: Annotated[str, msgspec.Meta(description=
        "Directory to search under, relative to the workspace root (default: the "
        "root).")] | None = None
    include_ignored: Annotated[bool, msgspec.Meta(description=
        "Also list files that .gitignore/.ignore files exclude, and hidden ones (.git is "
        "always skipped).")] = False


class GrepArgs(_Args, frozen=True, rename={"ignore_case": "ignoreCase",
                                          "include_ignored": "includeIgnored"}):
    pattern: Annotated[str, msgspec.Meta(description=
        "Regular expression searched for in each line (for example "
        "\"def \\w+_handler\", \"TODO|FIXME\"). Rust regex syntax (ripgrep): "
        "classes, alternation, quantifiers, anchors, \\b, no look-around or "
        "backreferences; escape regex characters to match "
        "them literally.")]
    path: Annotated[str, msgspec.Meta(description=
        "File or directory to search, relative to the workspace root (default: the "
        "root).")] | None = None
    glob: Annotated[str, msgspec.Meta(description=
        "Only search files whose name (or, with a /, whose workspace-relative path) "
        "matches this glob, for example \"*.py\" or \"src/**/*.rs\".")] | None = None
    ignore_case: Annotated[bool, msgspec.Meta(
        description="Match letters regardless of case.")] = False
    include_ignored: Annotated[bool, msgspec.Meta(description=
        "Also search files that .gitignore/.ignore files exclude, and hidden ones (.git is "
        "always skipped).")] = False


class WriteArgs(_Args, frozen=True):
    path: WorkspacePath
    content: Annotated[str, msgspec.Meta(description=
        "The complete new content of the file, written as UTF-8.")]


class EditArgs(_Args, frozen=True):
    path: WorkspacePath
    old_string: Annotated[str, msgspec.Meta(description=
        "Exact text to replace, character for character, including indentation and "
        "line breaks; without replace_all it must occur exactly once in the file, so "
        "include enough surrounding lines to make it unique. Not empty.")]
    new_string: Annotated[str, msgspec.Meta(description=
        "The text that replaces old_string; must differ from it.")]
    replace_all: Annotated[bool, msgspec.Meta(description=
        "Replace every occurrence of old_string instead of requiring exactly one.")] = False


class BashArgs(_Args, frozen=True, rename={"timeout_ms": "timeoutMs"}):
    command: Annotated[str, msgspec.Meta(description=
        "Shell command line, run by bash -c in the workspace root. Chain steps with && "
        "and quote paths with spaces.")]
    timeout_ms: Annotated[int, msgspec.Meta(description=
        f"Time limit in milliseconds (default {BASH_DEFAULT_TIMEOUT_MS}, at most "
        f"{BASH_MAX_TIMEOUT_MS}); when it passes, the command's whole process tree is "
        "killed and the call fails with TOOL_TIMEOUT.",
        ge=1, le=BASH_MAX_TIMEOUT_MS)] | None = None
    sandbox: Annotated[str, msgspec.Meta(pattern="^(on|off)$", description=
        "Set to \"off\" only when the sandbox refused something the task needs (a write "
        "outside the workspace, the network): the user is always asked first, and the "
        "command then runs unconfined (\"on\", the default, runs it sandboxed).")] | None = None


class GenerateImagesArgs(_Args, frozen=True):
    prompt: Annotated[str, msgspec.Meta(description="What the images should show.")]
    count: Annotated[int, msgspec.Meta(description=
        f"How many images to render (1 to {IMAGES_MAX_COUNT}).",
        ge=1, le=IMAGES_MAX_COUNT)] = 1
    size: Annotated[str, msgspec.Meta(description=
        "Width x height in pixels, like \"512x512\".",
        pattern=r"^[1-9][0-9]{0,3}x[1-9][0-9]{0,3}$")] = "256x256"


class TaskArgs(_Args, frozen=True):
    """The runtime-local Task tool's arguments (it never crosses to the host)."""

    prompt: Annotated[str, msgspec.Meta(description=
        "The whole task for the subagent: what to do, where, what is already known, "
        "and what to report back. The subagent sees nothing of this conversation "
        "but this text.")]
    description: Annotated[str, msgspec.Meta(description=
        "A short label for the task (3 to 6 words), shown to the user.")] = ""


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
