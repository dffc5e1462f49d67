"""One thread, two event loops: prompt_toolkit on asyncio, the controller on trio.

prompt_toolkit runs on asyncio; the daemon link is trio. The trio side runs in
trio's *guest mode* on the asyncio loop that prompt_toolkit uses
(``trio.lowlevel.start_guest_run``): trio's tasks run as callbacks of that loop,
on the same thread, and trio waits for I/O in a helper thread of its own. So
the controller can update the view and call the terminal directly (no locks,
no polling), while the key bindings, which run in asyncio callbacks, reach
trio through ``TrioToken.run_sync_soon``, the thread-safe door into a trio run.

Lifetime: the guest run starts once the application is running (so trio sees
prompt_toolkit's SIGINT handler and installs none of its own: Ctrl-C stays a
key) and ends when the controller has quit and the daemon has exited; its end
closes the application. If the application ends first (its input closed), the
controller is told to quit, and cancelled if the application failed; either
way the daemon is shut down (stdin closed, waited for, killed past a deadline)
before this returns.
"""

from __future__ import annotations

import asyncio
import time

import outcome
import trio
from rich.text import Text

from runtime.clients.chat.commands import Command, Quit
from runtime.clients.chat.controller import ChatOptions, Controller
from runtime.clients.chat.keys import ChatKeys
from runtime.clients.chat.terminal import Terminal


class _Bridge:
    """The asyncio side's handle on the trio run."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller
        self.token: trio.lowlevel.TrioToken | None = None
        self.scope: trio.CancelScope | None = None

    async def main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as self.scope:
            await self._controller.run()

    def post(self, command: Command) -> None:
        if self.token is None:
            return  # trio has not started yet: nothing could act on a key
        try:
            self.token.run_sync_soon(self._controller.post, command)
        except trio.RunFinishedError:
            pass  # the chat is already over

    def cancel(self) -> None:
        scope = self.scope
        if self.token is not None and scope is not None:
            try:
                self.token.run_sync_soon(scope.cancel)
            except trio.RunFinishedError:
                pass


async def run_chat(options: ChatOptions) -> None:
    """Run the chat until the user quits; raise what ended the trio side (ChatError)."""
    loop = asyncio.get_running_loop()
    controller: Controller
    terminal = Terminal(lambda: controller.view.live(time.monotonic()),
                        asking=lambda: bool(controller.view.permissions))
    controller = Controller(options, terminal)
    bridge = _Bridge(controller)
    done: asyncio.Future[outcome.Outcome[None]] = loop.create_future()

    def notice(text: str) -> None:
        terminal.commit([Text(text, style="dim")])

    keys = ChatKeys(terminal.buffer, bridge.post, controller.view.shown_permission, notice)
    terminal.key_bindings = keys.bindings

    def finished(result: outcome.Outcome[None]) -> None:
        done.set_result(result)
        app = terminal.app
        if app.is_running and app.future is not None and not app.future.done():
            app.exit()

    def start() -> None:
        trio.lowlevel.start_guest_run(
            bridge.main, run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=finished, host_uses_signal_set_wakeup_fd=True)

    try:
        await terminal.app.run_async(pre_run=start)
    except BaseException:
        bridge.cancel()
        raise
    finally:
        if not done.done():
            bridge.post(Quit())
        result = await asyncio.shield(done)
        terminal.print_leftovers()
    result.unwrap()

