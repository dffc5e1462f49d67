"""The chat's session controller: the trio side, talking to ``quiesce serve``.

It owns the daemon link, the current session and the view's state. Commands
arrive from the terminal through :meth:`Controller.post` (synchronous, called on
trio's thread via ``TrioToken.run_sync_soon``); what to show goes out through the
:class:`Screen` port (committed lines above the input, and "redraw the live part").
A stop is sent as ``agent.abort`` and its timeline drawn from the events that
arrive until the answer, which comes only once the turn is settled; until then
every line is held, and the stop's block is printed whole, in time order, when the
answer comes (:mod:`runtime.clients.chat.timeline`). The host's permission prompts wait
for the user in :mod:`runtime.clients.chat.permission_asks`, the workspace trust
question in :mod:`runtime.clients.chat.trust`.

Failures are mapped here, in :meth:`Controller._guarded`: a daemon's error answer is
a red line (its message, not its wire code) and the chat goes on; a closed link ends the
chat with :class:`ChatError`, and so does a session that cannot open (in ``_start``).
"""

from __future__ import annotations

import functools
import math
import pathlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import trio
from rich.text import Text

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    PermissionMode,
    ProviderConfig,
    SessionCompactParams,
    SessionCompactResult,
    SessionEventParams,
    SessionListResult,
    SessionLoadParams,
    SessionLoadResult,
    SessionNewParams,
)
from protocol.messages.common import Empty, PluginServerStatus
from runtime.clients.chat.commands import (
    HELP,
    Answer,
    Command,
    Compact,
    Help,
    ListSessions,
    Load,
    Prompt,
    Quit,
    Stop,
    Tools,
    TrustAnswer,
    Unknown,
    Usage,
)
from runtime.clients.chat.link import open_daemon, still_alive, tool_processes
from runtime.clients.chat.permission_asks import PermissionAsks
from runtime.clients.chat.plugins import server_lines
from runtime.clients.chat.session_list import session_lines
from runtime.clients.chat.trust import TrustQuestion, open_answering_trust
from runtime.clients.chat.view import ChatView
from runtime.clients.daemon_client import DaemonClient
from runtime.link import ConnectionClosed, answers_later

_C = TypeVar("_C", bound=Command)

FRAME_S = 0.1  # spinner frames while something runs; nothing ticks when idle


class ChatError(Exception):
    """The chat cannot go on (the daemon failed or went away); the message says why."""


class Screen(Protocol):
    def commit(self, lines: Sequence[Text]) -> None:
        """Print lines once, above the live part and the input."""

    def refresh(self) -> None:
        """The live part changed: redraw it."""


@dataclass(frozen=True)
class ChatOptions:
    workspace: str
    permission_mode: PermissionMode
    provider: ProviderConfig | None
    log_path: pathlib.Path
    env: dict[str, str] | None = None
    serve_args: tuple[str, ...] = ()  # --data-dir and --config, as the chat was given them
    provider_hint: str | None = None  # said at start-up: no model is configured


class Controller:
    def __init__(self, options: ChatOptions, screen: Screen,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.view = ChatView()
        self.session_id: str | None = None
        self._screen = screen
        self._clock = clock
        self._commands, self._inbox = trio.open_memory_channel[Command](math.inf)
        self._daemon: DaemonClient | None = None
        self._stopping: trio.Event | None = None  # set when the stop in flight is answered
        self._prompts = 0  # agent.prompt requests not answered yet
        self._compacting = 0  # session.compact requests not answered yet
        self._animate = trio.Event()
        self._quitting = False
        self._trust = TrustQuestion(self._commit)  # the workspace.trust question
        self._permissions = PermissionAsks(self.view, show=screen.commit, commit=self._commit,
                                           refresh=screen.refresh, clock=clock)
        self.plugin_servers: tuple[PluginServerStatus, ...] = ()  # the session's, for /tools

    # -- the terminal's side ---------------------------------------------------------------

    def post(self, command: Command) -> None:
        """Queue a command (on trio's thread: the terminal calls it via the trio token)."""
        self._commands.send_nowait(command)

    @property
    def busy(self) -> bool:
        """A turn runs or a prompt waits: a stop has something to stop."""
        return self._prompts > 0 or self.view.turn_id is not None or self._compacting > 0

    # -- life ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Start the daemon, open a session, serve commands until quit, shut down."""
        options = self.options
        options.log_path.parent.mkdir(parents=True, exist_ok=True)
        with options.log_path.open("ab") as log_file:
            try:
                async with open_daemon(
                        log_file=log_file, env=options.env, serve_args=options.serve_args,
                        # Asked: waiting for the user must not hold up the link's reader.
                        handlers={"permission.request": answers_later(self._permissions.ask),
                                  "workspace.trust": answers_later(self._trust.ask)},
                        notification_handlers={"session.event": self._on_event,
                                               "permission.withdrawn": self._permissions.withdrawn},
                ) as daemon:
                    self._daemon = daemon
                    await self._start(daemon)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._watch_link, daemon)
                        nursery.start_soon(self._tick)
                        await self._serve(nursery)
                        nursery.cancel_scope.cancel()
            except* (ConnectionClosed, RemoteError, OSError) as group:
                raise ChatError(f"quiesce serve failed: {group.exceptions[0]} "
                                f"(its log: {options.log_path})") from group
        self._commit([Text(f"quiesce serve exited with status {daemon.process.returncode}",
                           style="dim")])

    async def _start(self, daemon: DaemonClient) -> None:
        info = await daemon.initialize()
        host = info.capabilities.get("host", {}) if isinstance(info.capabilities, dict) else {}
        try:
            result = await open_answering_trust(
                daemon, SessionNewParams(self.options.workspace, self.options.permission_mode,
                                         self.options.provider),
                self._trust, self._inbox, self._commands)
        except RemoteError as exc:  # said as the daemon words it, not as a wire code
            hint = (" (docs/providers.md says how to choose a model)"
                    if exc.code is ErrorCode.INVALID_PARAMS else "")
            raise ChatError(f"cannot open a session in {self.options.workspace}: "
                            f"{exc.message}{hint}") from exc
        self.session_id = result.session_id
        self._commit([Text.assemble(
            ("quiesce chat", "bold"),
            (f"  serve pid {daemon.process.pid}, host pid {host.get('pid', '?')}; "
             f"session {result.session_id} in {self.options.workspace} "
             f"({self.options.permission_mode})", "dim")),
            Text(f"sessions and the daemon's log in {self.options.log_path.parent}",
                 style="dim"),
            Text("Esc stops the turn · Ctrl-C twice quits · /help", style="dim")])
        if self.options.provider_hint is not None:
            self._commit([Text(self.options.provider_hint, style="yellow")])
        self.plugin_servers = result.plugin_servers
        if result.plugin_servers:
            self._commit(server_lines(result.plugin_servers))

    async def _watch_link(self, daemon: DaemonClient) -> None:
        await daemon.endpoint.closed.wait()
        if not self._quitting:
            raise ChatError("quiesce serve closed the link unexpectedly "
                            f"(its log: {self.options.log_path})")

    async def _serve(self, nursery: trio.Nursery) -> None:
        async for command in self._inbox:
            if isinstance(command, Quit):
                break
            if isinstance(command, Answer):
                self._permissions.answer(command)
            elif isinstance(command, TrustAnswer):
                self._trust.answer(command)
            elif isinstance(command, Tools):
                self._commit(server_lines(self.plugin_servers))
            elif isinstance(command, Prompt):
                self._prompts += 1
                self.view.queued = self._queued()
                nursery.start_soon(self._guarded, self._prompt, command)
            elif isinstance(command, Stop):
                # started once it has claimed the stop, so a Quit read next joins it
                await nursery.start(self._guarded_stop, command)
            elif isinstance(command, ListSessions):
                nursery.start_soon(self._guarded, self._list, command)
            elif isinstance(command, Load):
                nursery.start_soon(self._guarded, self._load, command)
            elif isinstance(command, Compact):
                nursery.start_soon(self._guarded, self._compact, command)
            elif isinstance(command, Help):
                self._commit([Text(HELP, style="dim")])
            elif isinstance(command, Usage):
                self._commit([Text(command.text, style="red")])
            elif isinstance(command, Unknown):
                self._commit([Text(f"unknown command {command.text!r}; /help lists them",
                                   style="red")])
        # Quit: a running turn is stopped and settled first (its timeline shown).
        if self.busy or self._stopping is not None:
            await self._guarded(self._stop, Stop(via="quit"))
        self._quitting = True

    async def _guarded(self, run: Callable[[_C], Awaitable[None]], command: _C) -> None:
        """The one place a command's failure is mapped: shown, or the end of the chat."""
        try:
            await run(command)
        except RemoteError as exc:
            self._commit([Text(f"✗ {exc.message}", style="red")])
        except ConnectionClosed as exc:
            raise ChatError(f"quiesce serve closed the link: {exc} "
                            f"(its log: {self.options.log_path})") from exc

    # -- commands --------------------------------------------------------------------------

    def _queued(self) -> int:
        return max(0, self._prompts - (1 if self.view.turn_id is not None else 0))

    async def _prompt(self, command: Prompt) -> None:
        assert self._daemon is not None and self.session_id is not None
        if self.view.turn_id is not None:
            self._commit([Text(f"  (queued) {command.text}", style="dim")])
        try:
            result: AgentPromptResult = await self._daemon.request(
                "agent.prompt", AgentPromptParams(self.session_id, command.text))
        finally:
            self._prompts -= 1
            self.view.queued = self._queued()
            self._screen.refresh()
        if result.turn_id is None and result.stop_reason == "cancelled":
            self._commit([Text(f"  queued prompt dropped by the stop: {command.text}",
                               style="yellow")])

    async def _guarded_stop(self, command: Stop,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
                            ) -> None:
        await self._guarded(functools.partial(self._stop, task_status=task_status), command)

    async def _stop(self, command: Stop,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert self._daemon is not None and self.session_id is not None
        if self._stopping is not None:  # join the stop in flight: one timeline
            task_status.started()
            await self._stopping.wait()
            return
        if not self.busy:
            task_status.started()
            self._commit([Text("nothing to stop", style="dim")])
            return
        self._stopping = trio.Event()
        task_status.started()
        try:
            before = tool_processes(self._daemon.process.pid)
            self._commit(self.view.stop_sent(self._clock(), keep_inbox=command.keep_inbox,
                                             via=command.via, processes_before=len(before)))
            self._wake()
            result: AgentAbortResult = await self._daemon.request("agent.abort", AgentAbortParams(
                self.session_id, keep_inbox=command.keep_inbox))
            self._commit(self.view.stop_answered(result, self._clock(),
                                                 processes_alive=still_alive(before)))
        finally:
            self._commit(self.view.stop_failed())  # nothing, unless the answer never came
            self._stopping.set()
            self._stopping = None

    async def _compact(self, command: Compact) -> None:
        """``/compact``: the daemon's events show its course; the answer, what came of it."""
        assert self._daemon is not None and self.session_id is not None
        self._compacting += 1
        try:
            result: SessionCompactResult = await self._daemon.request(
                "session.compact", SessionCompactParams(self.session_id))
        finally:
            self._compacting -= 1
        if result.outcome == "busy":
            self._commit([Text("a turn is running: /compact when it has ended", style="red")])

    async def _list(self, command: ListSessions) -> None:
        assert self._daemon is not None
        result: SessionListResult = await self._daemon.request("session.list", Empty())
        self._commit(session_lines(result.sessions, self.session_id,
                                   None if command.every_workspace else self.options.workspace))

    async def _load(self, command: Load) -> None:
        assert self._daemon is not None
        if self.busy:
            self._commit([Text("a turn is running: stop it before loading a session",
                               style="red")])
            return
        previous, self.session_id = self.session_id, command.session_id
        try:  # its replayed events arrive before the answer, and are shown
            result: SessionLoadResult = await self._daemon.request(
                "session.load", SessionLoadParams(command.session_id))
        except RemoteError as exc:
            self.session_id = previous
            self._commit([Text(f"✗ cannot load {command.session_id}: {exc.message} "
                               "(/sessions lists them)", style="red")])
            return
        note = ", its interrupted turn closed" if result.recovered else ""
        self._commit([Text(f"loaded session {result.session_id} ({result.events} events"
                           f"{note})", style="dim")])
        if result.plugin_servers:
            self.plugin_servers = result.plugin_servers
            self._commit(server_lines(result.plugin_servers))

    # -- from the daemon -------------------------------------------------------------------

    def _on_event(self, params: SessionEventParams) -> None:
        if params.session_id != self.session_id:
            return
        lines = self.view.event(params.event, self._clock())
        self.view.queued = self._queued()
        if lines:
            self._commit(lines)
        self._wake()

    # -- screen ----------------------------------------------------------------------------

    def _commit(self, lines: Sequence[Text]) -> None:
        """Print lines, or (while a stop settles) hold them for the stop's block."""
        held = self.view.hold(list(lines))
        if held:
            self._screen.commit(held)

    def _wake(self) -> None:
        self._animate.set()
        self._screen.refresh()

    async def _tick(self) -> None:
        """Redraw the spinners while something runs; sleep on an event when nothing does."""
        while True:
            if not (self.view.animating or self.view.permissions):
                self._animate = trio.Event()
                await self._animate.wait()
            self._screen.refresh()
            await trio.sleep(FRAME_S)
