"""What a model is told about each built-in tool: its description and its JSON schema.

The one owner of the built-in tools' specifications. A tool's parameters (names,
types, ranges, defaults, one description each) are its arguments Struct in
:mod:`protocol.tools`; its description is here. Providers receive
:func:`input_schema` of the Struct and the description as they are; the tool table
of ``docs/protocol.md`` is generated from the same specs (``protocol/docs.py``).

A description says what the tool does, when another tool fits better, its limits
(sizes, time-outs, what is truncated, how paths are resolved) and what a stop
does to it. The limits quoted are the built-in defaults (``protocol.tools``); an
operator may change some of them in the host's configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.sandbox import SandboxPolicy
from protocol.toolclass import ToolClass
from protocol.tools import (
    BASH_DEFAULT_TIMEOUT_MS,
    BASH_MAX_TIMEOUT_MS,
    IMAGES_MAX_COUNT,
    LIST_MAX_RESULTS,
    OUTPUT_MAX_BYTES,
    READ_DEFAULT_LINES,
    READ_MAX_BYTES,
    READ_MAX_LINE_CHARS,
    BashArgs,
    EditArgs,
    GenerateImagesArgs,
    GlobArgs,
    GrepArgs,
    ReadArgs,
    TaskArgs,
    WriteArgs,
)

__all__ = ["TOOL_SPECS", "ToolSpec", "bash_description", "input_schema"]

_KIB = 1024

READ = f"""\
Read a UTF-8 text file from the workspace. The result is numbered like `cat -n` \
(line number, a tab, the line); the numbers are not part of the file, so leave \
them out of Edit's old_string. Reads {READ_DEFAULT_LINES} lines from the start by \
default; pass offset and limit to read a part of a long file. A line longer than \
{READ_MAX_LINE_CHARS} characters is cut and marked [line truncated]; a result over \
{READ_MAX_BYTES // _KIB} KiB stops early and says which offset to continue from. \
Binary files and text that is not UTF-8 are refused. Read a file before you Edit \
it. To find files use Glob; to find text in many files use Grep, not Read one by \
one. Read only reads: a stop ends it at once."""

GLOB = f"""\
List the files whose paths match a glob pattern, sorted, as workspace-relative \
paths; at most {LIST_MAX_RESULTS} (the result says when there were more: narrow \
the pattern or the directory). Use it to find files by name or extension \
("**/*.py", "src/**/*.test.ts"); to find files by what they contain use Grep. \
Directories named .git are not searched, symbolic links to directories are not \
followed, and only files inside the workspace are listed. Glob only reads: a \
stop ends it at once."""

GREP = f"""\
Search file contents for a regular expression, in one file or under a directory \
(default: the whole workspace). Each match is one line of output, \
`path:line:text`, with the path relative to the workspace. Narrow the search \
with path and glob (for example glob "*.py"); ignoreCase matches letters \
regardless of case. Binary files, .git directories and symbolic links are \
skipped. The output stops after {LIST_MAX_RESULTS} matching lines or \
{OUTPUT_MAX_BYTES // _KIB} KiB and says so; long lines are shortened. Prefer Grep \
to running grep or rg through Bash. Grep only reads: a stop ends it at once."""

WRITE = """\
Create a file, or replace a whole file, with the given content; missing parent \
directories are created. The file is replaced atomically: a reader sees the old \
content or the new, never a mix. To change part of an existing file use Edit \
instead (Read it first); Write only when creating a file or rewriting it \
completely. The result says whether the file was created and how many bytes \
were written. Depending on the session's permission mode, the user may be asked \
first; a denied call does nothing, so do not retry it unchanged. Once a write \
has started, a stop lets it finish (atomically) and the result says what was \
done."""

EDIT = """\
Replace an exact piece of text in an existing UTF-8 file. old_string must match \
the file character for character (indentation, line breaks; without the line \
numbers Read shows) and occur exactly once, or pass replace_all to replace \
every occurrence. If it occurs zero or several times, nothing is written and \
the error says so: Read the file again and give more surrounding lines. The \
file is written atomically, and only if it has not changed since the tool read \
it. Files over 16 MiB cannot be edited. Prefer Edit to Write for changes to \
existing files, and to sed or shell redirection through Bash. Depending on the \
session's permission mode, the user may be asked first; a denied edit does \
nothing. Once started, a stop lets the edit finish (atomically) and the result \
says what was done."""

BASH = f"""\
Run a shell command with bash -c in the workspace root and return its exit \
status and output (stdout and stderr together, in order). Use it for builds, \
tests, git, package managers and programs; for reading, finding and editing \
files use Read, Glob, Grep, Edit and Write, which are faster and safer. Each \
call starts a fresh shell: no working directory or variables carry over, so \
chain dependent steps with && (for example `cd sub && make`). There is no \
terminal and no input: never run interactive programs, editors or pagers (use \
flags such as --yes, --no-pager, git --no-edit). The command has \
{BASH_DEFAULT_TIMEOUT_MS // 1000} s unless timeoutMs says otherwise (at most \
{BASH_MAX_TIMEOUT_MS // 60000} min); at the limit its whole process tree is killed \
and the call fails with the output so far. A long build or test run: give it a \
larger timeoutMs, and a narrower target if it can take longer than that. \
Processes the command starts in the background (&, nohup, daemons) are stopped \
when the command exits: nothing outlives the call, so do not start servers to \
use in a later call. Output beyond {OUTPUT_MAX_BYTES // _KIB} KiB keeps its \
beginning and end with the middle cut; redirect big output to a file and Grep \
or Read it. Depending on the permission mode, the user may be asked first. A \
stop kills the command's whole process tree and returns the output collected \
until then."""


DEFAULT_SANDBOX = SandboxPolicy("workspace-write", "off", ("the workspace", "$TMPDIR", "/tmp"))
"""The built-in default (what ``docs/protocol.md`` shows; a session's own is stated)."""

_ASK_MORE = (
    'the result then says it may have been the sandbox. If the task truly needs more, '
    'call Bash again with sandbox: "off": the user is always asked first.')


def _network(policy: SandboxPolicy) -> str:
    if policy.network == "on":
        return "has the network"
    if policy.network == "proxy":
        domains = ", ".join(policy.allow_domains) or "none"
        return ("reaches the network only through an HTTP proxy ($HTTPS_PROXY, already "
                f"set) that admits these domains only: {domains} (other connections fail)")
    return "has no network (at most a loopback of its own; other connections fail)"


def bash_description(policy: SandboxPolicy | None = None) -> str:
    """Bash's description stating a session's sandbox ``policy`` (default: the built-in
    default policy)."""
    policy = policy or DEFAULT_SANDBOX
    if policy.unavailable is not None or policy.mode == "off":
        why = ("the kernel offers no sandbox here, so every call asks the user first"
               if policy.unavailable is not None and policy.mode != "off"
               else "the operator turned the sandbox off")
        return f"{BASH} The command is not sandboxed: {why}."
    mode = ("read-only: it may write nowhere but $TMPDIR (its own temporary directory, "
            "where caches go too)" if policy.mode == "read-only" else
            f"workspace-write: it may write only beneath {', '.join(policy.writable)} "
            "($TMPDIR is its own temporary directory, where caches go too)")
    return (f"{BASH} This session's command runs in a sandbox, mode {mode}; it "
            f"{_network(policy)}, and cannot signal or trace processes it did not start; "
            'a refused operation fails with "Permission denied" or "Operation not '
            'permitted"' + (" (a refused domain: the proxy's 403 naming it)"
                            if policy.network == "proxy" else "") + f" and {_ASK_MORE}")


GENERATE_IMAGES = f"""\
Render PNG images with the host's image backend and save them in the \
workspace's images/ folder; the result lists the files. The backend is the \
operator's choice: unless one is configured, the built-in renderer draws a \
placeholder (a colour gradient, simple shapes and the prompt's text), not a \
picture of what the prompt describes. Use this tool only when the user asks for \
images, never to make diagrams or mock-ups a file format such as SVG would \
serve better. count is 1 to {IMAGES_MAX_COUNT}; size is WIDTHxHEIGHT. A stop \
kills the backend and returns the images already written."""

TASK = """\
Hand a self-contained task to a subagent: a fresh agent with the same tools \
(but Task) in the same workspace, which works until it has an answer and \
returns its final message as this tool's result. Use it for work that needs \
many searches or reads whose details would crowd this conversation, for \
example "find every caller of parse_config and say which pass a path", or for \
an independent part of a larger job. The subagent sees nothing of this \
conversation: the prompt must say everything it needs (goal, where to look, \
what is known, what to report). It cannot ask questions, and it cannot start \
subagents of its own. Task calls run one at a time. Its result is only its \
final text; check what matters. A stop of this turn stops the subagent too."""


@dataclass(frozen=True)
class ToolSpec:
    name: str
    tool_class: ToolClass
    description: str
    args_type: type[msgspec.Struct]

    def input_schema(self) -> dict[str, Any]:
        return input_schema(self.args_type)


TOOL_SPECS: dict[str, ToolSpec] = {spec.name: spec for spec in (
    ToolSpec("Read", ToolClass.READ_ONLY, READ, ReadArgs),
    ToolSpec("Glob", ToolClass.READ_ONLY, GLOB, GlobArgs),
    ToolSpec("Grep", ToolClass.READ_ONLY, GREP, GrepArgs),
    ToolSpec("Write", ToolClass.MUTATING, WRITE, WriteArgs),
    ToolSpec("Edit", ToolClass.MUTATING, EDIT, EditArgs),
    ToolSpec("Bash", ToolClass.PROCESS, bash_description(), BashArgs),
    ToolSpec("GenerateImages", ToolClass.PROCESS, GENERATE_IMAGES, GenerateImagesArgs),
    ToolSpec("Task", ToolClass.LOCAL, TASK, TaskArgs),
)}

_schemas: dict[type[Any], dict[str, Any]] = {}


def _optional(prop: dict[str, Any]) -> dict[str, Any]:
    """``anyOf [X, null]`` with default null (an optional argument) as plain ``X``."""
    options = prop.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or {"type": "null"} not in options:
        return prop
    [inner] = [o for o in options if o != {"type": "null"}]
    rest = {k: v for k, v in prop.items() if k != "anyOf"}
    if rest.get("default", ...) is None:
        del rest["default"]
    return {**inner, **rest}


def input_schema(args_type: type[Any]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments as a model gets it: one object, no
    ``$defs``, no titles, optional arguments without ``null`` alternatives.
    Computed once per type; callers must not change it."""
    cached = _schemas.get(args_type)
    if cached is None:
        schema: dict[str, Any] = msgspec.json.schema(args_type)
        defs = schema.pop("$defs", {})
        ref = schema.get("$ref", "")
        body = dict(defs.get(ref.rsplit("/", 1)[-1], schema))
        body.pop("title", None)
        if "properties" in body:
            body["properties"] = {name: _optional(prop)
                                  for name, prop in body["properties"].items()}
        cached = _schemas[args_type] = body
    return cached
