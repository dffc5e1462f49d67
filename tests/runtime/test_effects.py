"""runtime.link.effects: when the link's reader reads on, as each handler's registration
declares it, on virtual time; and that nothing marks an effect but the declared way."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

from protocol.messages.common import Empty
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    SessionOpenParams,
    ToolsAbortParams,
    ToolsAbortResult,
)
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from runtime.link import Effect, Endpoint, Handler, answers_later, call_handler, marks_effect

ROOT = pathlib.Path(__file__).resolve().parents[2]


@asynccontextmanager
async def host_side(handlers: dict[str, Handler]) -> AsyncIterator[tuple[Endpoint, Endpoint]]:
    """(runtime, host): the host serves ``handlers``; the runtime answers permission
    requests at once (plain)."""
    async def allow(params: PermissionRequestParams) -> PermissionRequestResult:
        return PermissionRequestResult("allow-once")

    a, b = trio.testing.memory_stream_pair()
    runtime = Endpoint("runtime", a, a, incoming=HOST_TO_RUNTIME, outgoing=RUNTIME_TO_HOST,
                       handlers={"permission.request": allow})
    host = Endpoint("host", b, b, incoming=RUNTIME_TO_HOST, outgoing=HOST_TO_RUNTIME,
                    handlers=handlers)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await nursery.start(host.run)
        yield runtime, host
        nursery.cancel_scope.cancel()


async def open_then_abort(runtime: Endpoint, log: list[str]) -> None:
    """Pipeline a session.open and a tools.abort (the abort written right behind it),
    and wait for both answers."""
    async def open_() -> None:
        await runtime.request("session.open", SessionOpenParams("s", "/w"))
        log.append("open answered")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_)
        await trio.testing.wait_all_tasks_blocked()  # the open is on the wire first
        await runtime.request("tools.abort", ToolsAbortParams("s", "c", "Bash"))


def abort_handler(log: list[str]) -> Handler:
    async def abort(params: ToolsAbortParams) -> ToolsAbortResult:
        log.append("abort handled")
        return ToolsAbortResult(True, "running")
    return abort


async def test_a_plain_handler_holds_the_reader_until_it_answers(
        autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []

    async def open_(params: SessionOpenParams) -> Empty:
        await trio.sleep(1)  # its effect is its whole body
        log.append("open done")
        return Empty()

    async with host_side({"session.open": open_, "tools.abort": abort_handler(log)}) as (
            runtime, _):
        await open_then_abort(runtime, log)
    assert log.index("open done") < log.index("abort handled")


async def test_answers_later_lets_the_reader_read_on_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []

    async def open_(params: SessionOpenParams) -> Empty:
        log.append("open entered")
        await trio.sleep(1)
        log.append("open done")
        return Empty()

    async with host_side({"session.open": answers_later(open_),
                          "tools.abort": abort_handler(log)}) as (runtime, _):
        started = trio.current_time()
        await open_then_abort(runtime, log)
    assert log[:2] == ["open entered", "abort handled"]
    assert trio.current_time() - started >= 1  # the open's answer came after its wait


async def test_marks_effect_lets_the_reader_read_on_from_the_mark(
        autojump_clock: trio.testing.MockClock) -> None:
    log: list[str] = []

    async def open_(params: SessionOpenParams, effect: Effect) -> Empty:
        await trio.sleep(1)  # before its ordering point: the reader waits
        log.append("open took its effect")
        effect.take()
        await trio.sleep(1)  # after it: waiting holds nothing up
        log.append("open done")
        return Empty()

    async with host_side({"session.open": marks_effect(open_),
                          "tools.abort": abort_handler(log)}) as (runtime, _):
        await open_then_abort(runtime, log)
    assert log == ["open took its effect", "abort handled", "open done", "open answered"]


async def test_sending_a_request_takes_no_effect(
        autojump_clock: trio.testing.MockClock) -> None:
    """A plain handler asking its peer (and a task it spawned asking) has not taken its
    effect by that: only its declaration says when it is. (Waiting here for the answer
    would hang: the answer is read by the reader this handler holds.)"""
    log: list[str] = []

    async def ask() -> None:
        host.send_request("permission.request", PermissionRequestParams(
            "s", "p-1", "c", "Bash", "{}", "high")).forget()

    async def open_(params: SessionOpenParams) -> Empty:
        await ask()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)  # a task of its own: nothing it could inherit either
        await trio.sleep(1)
        log.append("open done")
        return Empty()

    async with host_side({"session.open": open_, "tools.abort": abort_handler(log)}) as (
            runtime, host):
        await open_then_abort(runtime, log)
    assert log.index("open done") < log.index("abort handled")


async def test_call_handler_keeps_a_wrapped_declaration() -> None:
    """A guard around a handler (the host's handshake check, the socket link's gate)
    passes its own effect on: the inner declaration decides."""
    seen: list[bool] = []

    async def later(params: object) -> Empty:
        seen.append(effect.taken)
        return Empty()

    async def guard(params: object, effect: Effect) -> Empty:
        result: Empty = await call_handler(answers_later(later), params, effect)
        return result

    effect = Effect()
    await call_handler(marks_effect(guard), None, effect)
    assert seen == [True]
    effect = Effect()
    await call_handler(lambda params: later(params), None, effect)
    assert seen == [True, False]  # plain: taken by the dispatcher, after it answers


async def test_an_effect_is_idempotent_and_a_task_status() -> None:
    effect = Effect()

    async def stop(*, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        task_status.started()

    await stop(task_status=effect)
    effect.take()
    assert effect.taken
    with trio.fail_after(1):
        await effect.wait()  # taken already: returns at once


# -- nothing marks an effect by hand ------------------------------------------------------

FORBIDDEN = {"effect_taken", "effect_status", "EffectPoint", "EffectGate"}
"""The old ways to mark a request's effect from wherever a task ran (a contextvar)."""
OWN = {pathlib.Path("runtime/link/effects.py"), pathlib.Path("tests/runtime/test_effects.py")}
"""The module, and its own tests, may take an Effect made there."""


def _sources() -> list[pathlib.Path]:
    return [p for top in ("runtime", "host", "protocol", "tests", "scripts")
            for p in sorted((ROOT / top).rglob("*.py"))]


def _takes_effect_param(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = node.args
    return any(a.annotation is not None and "Effect" in ast.unparse(a.annotation)
               for a in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def _marks_by_hand(tree: ast.AST) -> list[int]:
    """Lines calling ``<…effect>.take()`` in a function that was not handed an Effect
    (nor is a method of a class whose ``__init__`` was)."""
    found: list[int] = []

    def visit(node: ast.AST, handed: bool) -> None:
        if isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                         and n.name == "__init__"), None)
            handed = handed or (init is not None and _takes_effect_param(init))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            handed = handed or _takes_effect_param(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "take"
                and "effect" in ast.unparse(node.func.value).lower() and not handed):
            found.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, handed)

    visit(tree, False)
    return found


def test_no_module_marks_an_effect_but_by_its_declaration() -> None:
    offenders: list[str] = []
    for path in _sources():
        rel = path.relative_to(ROOT)
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = [alias.name.rsplit(".", 1)[-1] for alias in node.names]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names = [node.name]
            offenders += [f"{rel}:{node.lineno}: {n}" for n in names if n in FORBIDDEN]
            if (str(rel).startswith("runtime/link/") and isinstance(node, ast.Import)
                    and any(a.name == "contextvars" for a in node.names)):
                offenders.append(f"{rel}:{node.lineno}: contextvars in the link")
        if rel not in OWN:
            offenders += [f"{rel}:{line}: takes an effect it was not handed"
                          for line in _marks_by_hand(tree)]
    assert offenders == []
