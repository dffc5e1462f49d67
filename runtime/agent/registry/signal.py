"""Cancellation signals: a caller-owned, read-only ``AbortSignal`` and its controller.

An ``AbortController`` owns a signal and aborts it with a typed ``Cause``; the
first cause wins and later ``abort()`` calls are no-ops. Everyone else holds the
``AbortSignal``, which can only be observed: ``aborted``, ``cause``,
``await wait()`` and ``raise_if_aborted()`` (raising ``AbortError`` carrying the
cause). ``fuse(a, b)`` derives a signal that aborts when either parent does, for
as long as its ``with`` block lasts. There is no public way to make a signal
that no controller owns, so there is no "never aborts" default to fall back on.

Signals and trio cancel scopes
------------------------------
A signal is plain state plus synchronous listeners, not a task.
``AbortController.abort(cause)`` records the cause, wakes every ``wait()`` and
runs every listener *before it returns*, in the aborting task. Fused signals and
cancel scopes are such listeners, so once ``abort()`` has returned every derived
signal is aborted and every scope opened with ``cancel_on_abort`` is cancelled.
This is what makes the registry's last check ("is the body's signal aborted?"),
made immediately before it invokes a tool body, exact: a stop already issued can
never be missed, and there is no watcher task that could lag behind the stop,
leak, or need a nursery. The bridge into trio goes one way:
``with cancel_on_abort(signal) as scope:`` opens a ``trio.CancelScope`` whose
``cancel()`` is a listener of the signal; code inside gets ``trio.Cancelled`` at
its next checkpoint, the scope absorbs it, and afterwards
``scope.cancelled_caught`` and ``signal.cause`` say what happened. The listener
is removed when the block exits, so a long-lived signal accumulates no dead
scopes, and a signal already aborted on entry cancels the scope at once. There
is deliberately no bridge the other way: a stop is a typed, durable decision of
the signal's owner, while the cancellation of an enclosing trio scope (a
shutdown deadline, a failing sibling) is a different event that the registry
does not reinterpret as a stop. The registry never applies a cancel scope to a
tool body: the body receives the signal and decides how to stop, typically with
``cancel_on_abort`` around its own waits, and the registry awaits it.

Signals are trio-thread objects, like ``trio.Event``: abort them from the trio
thread (from another thread: ``trio.from_thread.run_sync(controller.abort, c)``).
Listeners must not raise; the ones this package installs cannot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trio

from runtime.agent.registry.causes import Cause

__all__ = ["AbortController", "AbortError", "AbortSignal", "cancel_on_abort", "fuse", "on_abort"]

Listener = Callable[[Cause], object]

_PRIVATE = object()


class AbortError(Exception):
    """Raised by ``raise_if_aborted``; carries the typed cause of the stop."""

    def __init__(self, cause: Cause) -> None:
        super().__init__(f"aborted ({cause.kind})")
        self.cause = cause


def _noop() -> None:
    return None


class AbortSignal:
    """A read-only view of one cancellation: observe it, never abort it.

    Made only by ``AbortController`` and ``fuse``.
    """

    __slots__ = ("_cause", "_event", "_listeners", "_next_key")

    def __init__(self, _token: object) -> None:
        if _token is not _PRIVATE:
            raise TypeError("AbortSignal is made by AbortController or fuse(), not directly")
        self._cause: Cause | None = None
        self._event = trio.Event()
        self._listeners: dict[int, Listener] = {}
        self._next_key = 0

    @property
    def aborted(self) -> bool:
        return self._cause is not None

    @property
    def cause(self) -> Cause | None:
        """The first cause, or ``None`` while not aborted."""
        return self._cause

    @property
    def listener_count(self) -> int:
        """How many listeners (fused children, cancel scopes) are attached now."""
        return len(self._listeners)

    async def wait(self) -> Cause:
        """Wait until the signal is aborted; return the cause."""
        await self._event.wait()
        assert self._cause is not None
        return self._cause

    def raise_if_aborted(self) -> None:
        if self._cause is not None:
            raise AbortError(self._cause)

    def __repr__(self) -> str:
        state = f"aborted={self._cause!r}" if self._cause is not None else "live"
        return f"<AbortSignal {state} listeners={len(self._listeners)}>"

    # -- package-private: listeners and aborting --------------------------------------

    def _subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(cause)`` when aborted (at once if already); return a remover."""
        if self._cause is not None:
            listener(self._cause)
            return _noop
        key = self._next_key
        self._next_key += 1
        self._listeners[key] = listener

        def remove() -> None:
            self._listeners.pop(key, None)

        return remove

    def _abort(self, cause: Cause) -> bool:
        if self._cause is not None:
            return False
        self._cause = cause
        listeners = list(self._listeners.values())
        self._listeners.clear()
        self._event.set()
        for listener in listeners:
            listener(cause)
        return True


class AbortController:
    """Owns one signal; ``abort(cause)`` aborts it, and the first cause wins."""

    __slots__ = ("_signal",)

    def __init__(self) -> None:
        self._signal = AbortSignal(_PRIVATE)

    @property
    def signal(self) -> AbortSignal:
        return self._signal

    def abort(self, cause: Cause) -> bool:
        """Abort the signal; ``False`` (and no effect) if it already was."""
        return self._signal._abort(cause)


@contextmanager
def fuse(first: AbortSignal, second: AbortSignal, *more: AbortSignal) -> Iterator[AbortSignal]:
    """A signal that aborts when any parent does, with the first parent's cause.

    A parent already aborted on entry aborts the fused signal at once (parents are
    consulted in argument order). On exit the fused signal's listeners are removed
    from every parent: afterwards it no longer follows them, and nothing of it is
    left attached to a long-lived signal.
    """
    fused = AbortSignal(_PRIVATE)
    removers: list[Callable[[], None]] = []
    try:
        for parent in (first, second, *more):
            removers.append(parent._subscribe(fused._abort))
        yield fused
    finally:
        for remove in removers:
            remove()


@contextmanager
def cancel_on_abort(signal: AbortSignal) -> Iterator[trio.CancelScope]:
    """A cancel scope that is cancelled when ``signal`` aborts (at once if it already is)."""
    with trio.CancelScope() as scope:
        remove = signal._subscribe(lambda _cause: scope.cancel())
        try:
            yield scope
        finally:
            remove()


@contextmanager
def on_abort(signal: AbortSignal, listener: Listener) -> Iterator[None]:
    """``listener(cause)`` runs when ``signal`` aborts (at once if it already has), in the
    aborting task, for as long as the block lasts; it must not raise. For a body whose
    stop must act before any task wakes (a host call's ``tools.abort`` starts then)."""
    remove = signal._subscribe(listener)
    try:
        yield
    finally:
        remove()
