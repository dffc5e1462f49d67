"""What a model is told before the conversation: the system prompt and the workspace's
instructions.

The system prompt is :data:`DEFAULT_SYSTEM_PROMPT` unless the daemon's configuration
(``system_prompt`` / ``system_prompt_file``) or the session (``session.new``'s
``systemPrompt``) replaces it. To it, every turn adds the workspace's instructions:
the file ``AGENTS.md`` at the workspace root (the convention several coding agents
share), re-read when the turn starts so an edit takes effect at the next prompt.

``AGENTS.md`` is read by the runtime itself, the one file it reads in a workspace:
read-only, at most :data:`AGENTS_MAX_BYTES` (the rest is cut at a character boundary
and a marker says so), only when it is a regular file whose real path lies inside the
workspace (a symlink to a file in the workspace is followed; a FIFO never blocks the
read). Missing: nothing is added. Unreadable (permissions, not UTF-8, outside the
workspace, not a regular file): a one-line note saying why takes its place, and the
daemon logs a warning, so neither the model nor the operator is left guessing.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from dataclasses import dataclass

import trio

log = logging.getLogger(__name__)

AGENTS_FILE = "AGENTS.md"
AGENTS_MAX_BYTES = 32 * 1024

DEFAULT_SYSTEM_PROMPT = """\
You are a coding agent working in the user's workspace, a directory on their machine. \
You run inside quiesce, an agent runtime: you act only through the tools you are given, \
and every tool call runs in a separate host process that enforces the workspace's \
boundaries and the user's permissions.

# How to work
- Understand before you change: find the relevant files with Glob and Grep, Read them, \
and follow the conventions the code already has (style, libraries, tests).
- Make the smallest change that does the job well. Edit existing files rather than \
rewriting them; create files only when they are needed.
- Check your work: run the project's tests, linters or build with Bash when they exist, \
and fix what you broke. Do not claim success you have not seen.
- Independent read-only calls (Read, Glob, Grep) made in one step run in parallel; \
Write, Edit, Bash, GenerateImages and Task calls run one at a time, in order.
- Paths are relative to the workspace root. You cannot reach files outside it.
- Use Task for a self-contained piece of research or work whose details would crowd \
this conversation; give it everything it needs in its prompt.

# Permissions and stops
- Depending on the session's permission mode, the user may be asked before a Write, \
Edit or Bash call runs. A denied call did nothing: do not repeat it unchanged; adjust, \
or ask the user.
- The user can stop you at any moment. A stopped tool call says so in its result \
("Error: tool call aborted"; "aborted before dispatch" when it never started). Its \
process trees are gone; a Write or Edit that had started finished and its result \
says what it did. After a stop, do not redo the stopped work unasked: wait for the \
user's next message and take it into account.
- Nothing you start outlives its tool call: background processes end with the Bash \
call that started them.

# Reporting
- Be brief and concrete. When you finish, say what you changed (files, behaviour), \
how you checked it, and anything left undone or uncertain.
- Ask when a request is ambiguous and a wrong guess would be costly; otherwise make a \
reasonable choice and say which.
- Never invent file contents, command output or results you have not seen."""


@dataclass(frozen=True)
class WorkspaceInstructions:
    text: str = ""
    """What the prompt gets: the file's text (cut, with a marker), a note, or nothing."""
    problem: str = ""
    """Why the file could not be used, when it could not."""


def _note(problem: str) -> WorkspaceInstructions:
    return WorkspaceInstructions(
        f"({AGENTS_FILE} exists at the workspace root but could not be read: {problem}.)",
        problem)


def read_agents_file(workspace: str, max_bytes: int = AGENTS_MAX_BYTES
                     ) -> WorkspaceInstructions:
    """``AGENTS.md`` at the root of ``workspace`` (a real path), bounded (see the module
    docstring). Blocking: call it from a thread."""
    path = os.path.join(workspace, AGENTS_FILE)
    try:
        real = os.path.realpath(path)
        if os.path.commonpath([real, workspace]) != workspace:
            return _note("it leads outside the workspace")
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return WorkspaceInstructions()
    except OSError as exc:
        if exc.errno == errno.ENOENT:  # a dangling symlink
            return WorkspaceInstructions()
        return _note(exc.strerror or type(exc).__name__)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return _note("it is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        return _note(exc.strerror or type(exc).__name__)
    finally:
        os.close(fd)
    cut = len(data) > max_bytes
    data = data[:max_bytes]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if not cut or exc.start < len(data) - 3:  # not just a character split by the cut
            return _note("it is not UTF-8 text")
        text = data[:exc.start].decode("utf-8")
    text = text.strip()
    if not text:
        return WorkspaceInstructions()
    if cut:
        text += (f"\n\n[{AGENTS_FILE} is longer than {max_bytes} bytes ({info.st_size} "
                 f"bytes); the rest was cut]")
    return WorkspaceInstructions(text)


def compose(system_prompt: str, workspace: WorkspaceInstructions) -> str:
    """The system message: the prompt, then the workspace's instructions if any."""
    if not workspace.text:
        return system_prompt
    return (f"{system_prompt}\n\n# Workspace instructions ({AGENTS_FILE})\n"
            f"The workspace root has an {AGENTS_FILE} for agents working here. Follow it "
            f"unless the user says otherwise.\n\n{workspace.text}")


async def system_message(system_prompt: str, workspace: str | None) -> str:
    """A turn's system message, ``AGENTS.md`` read afresh (in a worker thread, so a slow
    file system never holds up the event loop; a stop abandons the read)."""
    if workspace is None:
        return system_prompt
    found = await trio.to_thread.run_sync(read_agents_file, workspace,
                                          abandon_on_cancel=True)
    if found.problem:
        log.warning("%s in %s not used: %s", AGENTS_FILE, workspace, found.problem)
    return compose(system_prompt, found)
