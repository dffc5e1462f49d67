"""Hypothesis strategies of JSON-RPC frames, each with the answer it deserves.

A strategy here draws a :class:`Template`: everything about one message except its
request ids. ``Template.build`` stamps fresh, unique ids on it and returns a
:class:`Msg` (the frame's bytes and the expected answer), so a drawn corpus can be
streamed more than once and every answer can still be told apart by its id.

The expected answer is decided here, independently of ``protocol.envelope``, from
JSON-RPC 2.0 and ``docs/protocol.md``:

- bytes that are not UTF-8 JSON text (truncated, garbage, invalid UTF-8, nested
  deeper than a parser will go): -32700, id null;
- valid JSON that is not a request object: -32600 (id null when none can be read);
- a request whose method is unknown: -32601; whose params are wrong: -32602;
- a notification (no id), a response (result or error): no answer;
- a frame larger than the limit: -32600, id null;
- a batch: one array with the answers of its members that deserve one.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from hypothesis import strategies as st

OK = 0  # "a success response" among the acceptable codes
PARSE = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
PROTOCOL_MISMATCH = -32001
NOT_INITIALIZED = -32002
NOT_FOUND = -32003

PRE, READY = "pre-initialize", "ready"


@dataclass(frozen=True)
class Answer:
    id: Any  # the id the answer must carry (None: null)
    codes: frozenset[int]  # acceptable error codes; OK for a result


Expected = Answer | tuple[Answer, ...] | None  # tuple: a batch's array answer


@dataclass(frozen=True)
class Msg:
    frame: bytes  # one line, without its newline
    answer: Expected
    label: str


class Ids:
    """Request ids, unique over a whole run, in every style a peer may use."""

    def __init__(self) -> None:
        self._n = itertools.count(1)

    def new(self, style: str, text: str = "") -> int | str:
        n = next(self._n)
        if style == "neg":
            return -n
        if style == "big":
            return 2**63 + n  # beyond int64: still an integer id
        if style == "huge":
            return 10**60 + n
        if style == "str":
            return f"{n}:{text}"
        return n


@dataclass(frozen=True)
class IdSpec:
    style: str
    text: str = ""

    def make(self, ids: Ids) -> int | str:
        return ids.new(self.style, self.text)


@dataclass(frozen=True)
class Template:
    """One drawn message, minus its ids. ``build(ids, phase, rnd)`` stamps fresh ids; with
    ``rnd`` it also re-draws the incidental choices (layout, where a cut falls), so a
    template streamed again is not byte-identical."""

    label: str
    make: Callable[[Ids, str, random.Random | None], Msg]
    initializes: bool = False  # a successful initialize: never before the handshake phase

    def build(self, ids: Ids, phase: str, rnd: random.Random | None = None) -> Msg:
        return self.make(ids, phase, rnd)


# -- JSON values ----------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
# Characters that stress an encoder: quotes, escapes, controls, line separators, astral.
tricky = st.text(st.sampled_from('"\\/\x00\x01\x1f\x7f\u2028\u2029\ufeff\U0001f600é中 \t'),
                 max_size=8)
strings = st.one_of(texts, tricky)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False), strings,
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(texts, inner, max_size=3)),
    max_leaves=6,
)
non_integral = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda f: not f.is_integer())
id_specs = st.one_of(
    st.builds(IdSpec, st.sampled_from(["int", "int", "neg", "big", "huge"])),
    st.builds(IdSpec, st.just("str"), strings),
)


# -- encodings of one object --------------------------------------------------------

@dataclass(frozen=True)
class Style:
    """How an object is written: key order, spacing, escapes, surrounding blanks."""

    order_seed: int
    spaced: bool
    ascii_only: bool
    escaped_version: bool
    lead: bytes
    trail: bytes

    def encode(self, obj: dict[str, Any]) -> bytes:
        keys = list(obj)
        rotate = self.order_seed % max(len(keys), 1)
        keys = keys[rotate:] + keys[:rotate]
        if self.order_seed % 2:
            keys.reverse()
        ordered = {k: obj[k] for k in keys}
        if self.spaced or self.ascii_only:
            text = json.dumps(ordered, ensure_ascii=self.ascii_only,
                              separators=(", ", ": ") if self.spaced else (",", ":"))
            body = text.encode()
        else:
            body = msgspec.json.encode(ordered)
        if self.escaped_version and ordered.get("jsonrpc") == "2.0":
            # The same string, spelt with an escape: still version "2.0".
            body = body.replace(b'"jsonrpc":"2.0"', b'"jsonrpc":"2.\\u0030"', 1)
            body = body.replace(b'"jsonrpc": "2.0"', b'"jsonrpc": "2.\\u0030"', 1)
        return self.lead + body + self.trail


styles = st.builds(
    Style,
    order_seed=st.integers(0, 7),
    spaced=st.booleans(),
    ascii_only=st.booleans(),
    escaped_version=st.integers(0, 9).map(lambda i: i == 0),
    lead=st.sampled_from([b"", b"", b"", b" ", b"\t ", b"\r"]),
    trail=st.sampled_from([b"", b"", b"", b" ", b"\r", b" \t\r"]),
)


def restyle(style: Style, rnd: random.Random | None) -> Style:
    if rnd is None:
        return style
    return Style(rnd.randrange(8), rnd.random() < 0.5, rnd.random() < 0.5, rnd.random() < 0.1,
                 rnd.choice([b"", b"", b"", b" ", b"\t ", b"\r"]),
                 rnd.choice([b"", b"", b"", b" ", b"\r", b" \t\r"]))


# -- the methods of a link: fields, valid params, wrong params ------------------------

@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # str, opt_str, bool, nonneg, dict, enum, peer, cause, provider
    required: bool
    choices: tuple[str, ...] = ()


_wrong_cache: dict[Field, st.SearchStrategy[Any]] = {}


def _wrong_value(f: Field) -> st.SearchStrategy[Any]:
    """JSON values the field's type refuses."""
    if f not in _wrong_cache:
        _wrong_cache[f] = _make_wrong_value(f)
    return _wrong_cache[f]


def _make_wrong_value(f: Field) -> st.SearchStrategy[Any]:
    containers = st.one_of(st.lists(st.integers(), max_size=2),
                           st.dictionaries(texts, st.integers(), max_size=2))
    numbers = st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False))
    if f.kind in ("str", "opt_str"):
        base = st.one_of(numbers, st.booleans(), containers)
        return base if f.kind == "opt_str" else st.one_of(base, st.none())
    if f.kind == "bool":
        return st.one_of(numbers, strings, st.none(), containers)
    if f.kind == "nonneg":
        return st.one_of(st.integers(max_value=-1), non_integral, strings, st.booleans(),
                         st.none(), containers)
    if f.kind == "dict":
        return st.one_of(numbers, strings, st.booleans(), st.none(),
                         st.lists(st.integers(), max_size=2))
    if f.kind == "enum":
        return st.one_of(strings.filter(lambda s: s not in f.choices), numbers, st.none(),
                         st.booleans(), containers)
    if f.kind == "peer":
        return st.one_of(strings, numbers, st.booleans(), st.lists(texts, max_size=2),
                         st.just({}), st.fixed_dictionaries({"name": numbers}),
                         st.fixed_dictionaries({"name": texts, "bogus": texts}))
    if f.kind == "cause":
        return st.one_of(strings, numbers, st.none(), st.just({}),
                         st.fixed_dictionaries({"kind": strings.filter(
                             lambda s: s not in ("user", "parent", "hook", "disposed",
                                                 "operator"))}),
                         st.fixed_dictionaries({"kind": st.just("user"), "why": texts}),
                         st.fixed_dictionaries({"kind": st.just("user"), "reason": texts}),
                         st.fixed_dictionaries({"kind": st.just("hook")}),
                         st.fixed_dictionaries({"kind": st.just("hook"),
                                                "reason": st.one_of(st.none(), st.just(""))}),
                         st.fixed_dictionaries({"kind": st.just("timeout"),
                                                "seconds": st.one_of(strings, st.none())}))
    if f.kind == "provider":
        return st.one_of(strings, numbers, st.booleans(), st.just({}),
                         st.fixed_dictionaries({"kind": strings.filter(
                             lambda s: s not in ("scripted", "openai"))}))
    raise AssertionError(f.kind)


@dataclass(frozen=True)
class Method:
    name: str
    fields: tuple[Field, ...]
    # Valid params and the codes they get, per phase; None: never sent valid (shutdown).
    valid: st.SearchStrategy[tuple[dict[str, Any] | None, dict[str, frozenset[int]]]] | None
    initializes: bool = False


def _codes(pre: int | frozenset[int], ready: int | frozenset[int]) -> dict[str, frozenset[int]]:
    def norm(c: int | frozenset[int]) -> frozenset[int]:
        return c if isinstance(c, frozenset) else frozenset({c})
    return {PRE: norm(pre), READY: norm(ready)}


def version_codes(version: str) -> frozenset[int]:
    """The handshake rule: major.minor of decimal digits; only major 1 is spoken here."""
    major, _, minor = version.partition(".")
    digits = re.compile(r"[0-9]+", re.ASCII)
    if digits.fullmatch(major) and (not minor or digits.fullmatch(minor)):
        return frozenset({OK if int(major) == 1 else PROTOCOL_MISMATCH})
    if major and all(c.isdecimal() for c in major + minor):
        # Non-ASCII decimal digits: refusing or reading them are both defensible.
        return frozenset({OK, PROTOCOL_MISMATCH})
    return frozenset({PROTOCOL_MISMATCH})


versions = st.one_of(
    st.sampled_from(["1.0", "1", "1.7", "01.2", "1.", "2.0", "0.9", "10.0", "1.0.0", "",
                     ".1", "x", "1.x", "-1.0", "+1", " 1.0", "\u0661.\u0660", "\u0662.0",
                     "²", "1.³"]),
    st.from_regex(r"\A[0-9]{1,3}(\.[0-9]{0,3})?\Z"),
    texts,
)
peers = st.one_of(st.none(), st.fixed_dictionaries({"name": strings}),
                  st.fixed_dictionaries({"name": strings, "version": strings}))


def initialize_method() -> Method:
    @st.composite
    def valid(draw: st.DrawFn) -> tuple[dict[str, Any] | None, dict[str, frozenset[int]]]:
        params: dict[str, Any] = {"protocolVersion": draw(versions)}
        peer = draw(peers)
        if peer is not None or draw(st.booleans()):
            params["clientInfo"] = peer
        codes = version_codes(params["protocolVersion"])
        return params, {PRE: codes, READY: codes}

    return Method("initialize", (Field("protocolVersion", "str", True),
                                 Field("clientInfo", "peer", False)), valid(),
                  initializes=True)


def empty_method(name: str, valid: bool = True,
                 pre: int = OK) -> Method:
    if not valid:
        return Method(name, (), None)
    return Method(name, (), st.sampled_from([{}, None]).map(
        lambda p: (p, _codes(pre, OK))))


SESSION_ID_FORM = re.compile(r"s-[0-9a-f]{12}")
session_ids = st.one_of(
    st.from_regex(r"\As-[0-9a-f]{12}\Z"),
    st.sampled_from(["", "s-", "../../etc/passwd", "s-0123456789ab/../x", "S-0123456789AB",
                     "s-0123456789ab\n", "s-0123456789abc", "/tmp", "s-\u0000"]),
    strings,
)
tool_names = st.one_of(
    st.sampled_from(["Read", "Glob", "Grep", "Write", "Edit", "Bash", "GenerateImages", "Task",
                     "read", "", "Read "]),
    strings,
)


def client_methods(*, live_session: str | None = None) -> list[Method]:
    """client → runtime. ``live_session``: a session the daemon has loaded (mode auto),
    which prompts, aborts and tool runs also name, so they do real work."""
    nf = _codes(NOT_INITIALIZED, NOT_FOUND)
    ok = _codes(NOT_INITIALIZED, OK)

    def with_codes(params: st.SearchStrategy[dict[str, Any]],
                   codes: dict[str, frozenset[int]]) -> st.SearchStrategy[Any]:
        return params.map(lambda p: (p, codes))

    def load_codes(p: dict[str, Any]) -> tuple[dict[str, Any], dict[str, frozenset[int]]]:
        well_formed = SESSION_ID_FORM.fullmatch(p["sessionId"])
        codes = {NOT_FOUND}
        if not well_formed:
            codes = {INVALID_PARAMS}
        return p, _codes(NOT_INITIALIZED, frozenset(codes))

    workspaces = st.one_of(
        texts.filter(lambda s: not s.startswith("/")),
        texts.map(lambda s: "/nonexistent-quiesce-fuzz/" + s),
    )
    causes = st.one_of(
        st.fixed_dictionaries({"kind": st.sampled_from(
            ["user", "parent", "disposed", "operator"])}),  # a hook cause needs its reason
        st.fixed_dictionaries({"kind": st.just("hook"), "reason": strings.filter(bool)}),
    )
    def live_or_not(unknown: st.SearchStrategy[dict[str, Any]],
                    live: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
        """Requests naming no session (NOT_FOUND) and, half of the time, the live one (OK)."""
        if live_session is None:
            return with_codes(unknown, nf)
        return st.one_of(with_codes(unknown, nf), with_codes(live, ok))

    known = st.just(live_session) if live_session is not None else st.nothing()
    abort_options = {"cause": causes, "keepInbox": st.booleans()}
    return [
        empty_method("session.list", pre=NOT_INITIALIZED),
        # Never the live session: loading it again replays its whole log to the client.
        Method("session.load", (Field("sessionId", "str", True),),
               st.fixed_dictionaries({"sessionId": session_ids}).map(load_codes)),
        Method("agent.prompt", (Field("sessionId", "str", True), Field("text", "str", True)),
               live_or_not(st.fixed_dictionaries({"sessionId": session_ids, "text": strings}),
                           st.fixed_dictionaries({"sessionId": known, "text": strings}))),
        Method("agent.abort", (Field("sessionId", "str", True), Field("cause", "cause", False),
                               Field("keepInbox", "bool", False)),
               live_or_not(st.fixed_dictionaries({"sessionId": session_ids},
                                                 optional=abort_options),
                           st.fixed_dictionaries({"sessionId": known},
                                                 optional=abort_options))),
        Method("debug.runTool", (Field("sessionId", "str", True), Field("tool", "str", True),
                                 Field("args", "dict", True)),
               live_or_not(st.fixed_dictionaries(
                   {"sessionId": session_ids, "tool": tool_names,
                    "args": st.dictionaries(texts, json_values, max_size=3)}),
                   st.tuples(known, known_tool_args).map(
                       lambda t: {"sessionId": t[0], "tool": t[1][0], "args": t[1][1]}))),
        Method("session.new", (Field("workspace", "str", True),
                               Field("permissionMode", "enum", False,
                                     ("ask", "accept-edits", "auto")),
                               Field("provider", "provider", False)),
               with_codes(st.fixed_dictionaries(
                   {"workspace": workspaces},
                   optional={"permissionMode": st.sampled_from(["ask", "accept-edits", "auto"]),
                             "provider": st.none()}),
                   _codes(NOT_INITIALIZED, INVALID_PARAMS))),
        empty_method("shutdown", valid=False),
        initialize_method(),
    ]


_safe = st.text(st.sampled_from("abcxyz.*?[]!-_é"), max_size=8)
known_tool_args = st.one_of(
    st.tuples(st.just("Read"), st.fixed_dictionaries(
        {"path": st.one_of(st.sampled_from(["notes.txt", "missing.txt", ".", "../x",
                                            "/etc/passwd", "a\u0000b"]), strings)},
        optional={"offset": st.integers(0, 5), "limit": st.integers(1, 5)})),
    st.tuples(st.just("Glob"), st.fixed_dictionaries({"pattern": _safe})),
    st.tuples(st.just("Grep"), st.fixed_dictionaries(
        {"pattern": _safe}, optional={"ignoreCase": st.booleans()})),
    # Any tool, with an argument no tool has: refused before anything runs.
    st.tuples(tool_names, st.dictionaries(texts, json_values, max_size=2).map(
        lambda a: {**a, "zzBogusArgument": 1})),
)
"""(tool, args) of calls that are harmless to run in a workspace (read-only, or refused)."""


def host_methods(*, session_id: str) -> list[Method]:
    """runtime → host, against a host with one open session ``session_id`` (mode auto);
    before a successful ``initialize`` the host serves nothing but ``initialize``."""
    ok = _codes(NOT_INITIALIZED, OK)
    unknown_session = session_ids.filter(lambda s: s != session_id)
    execute = st.one_of(
        st.tuples(st.just(session_id), known_tool_args),
        st.tuples(unknown_session, st.tuples(tool_names,
                                             st.dictionaries(texts, json_values, max_size=3))),
    ).map(lambda t: {"sessionId": t[0], "callId": "", "tool": t[1][0], "args": t[1][1]})
    abort = st.fixed_dictionaries(
        {"sessionId": st.one_of(st.just(session_id), session_ids), "callId": strings,
         "tool": tool_names},
        optional={"cause": st.one_of(
            st.fixed_dictionaries({"kind": st.sampled_from(
                ["user", "parent", "disposed", "operator"])}),
            st.fixed_dictionaries({"kind": st.just("hook"), "reason": strings.filter(bool)}),
            st.fixed_dictionaries({"kind": st.just("timeout"), "seconds": st.floats(
                min_value=0, max_value=1e6)}))})
    return [
        Method("tools.execute", (Field("sessionId", "str", True),
                                 Field("callId", "str", True), Field("tool", "str", True),
                                 Field("args", "dict", True)),
               execute.map(lambda p: (p, ok))),
        Method("tools.abort", (Field("sessionId", "str", True), Field("callId", "str", True),
                               Field("tool", "str", True),
                               Field("cause", "cause", False)),
               abort.map(lambda p: (p, ok))),
        # Valid session.opens are the test's own (an accepted one is kept for good); the
        # fuzz sends only ones naming no usable directory (a NUL).
        Method("session.open", (Field("sessionId", "str", True),
                                Field("workspace", "str", True),
                                Field("permissionMode", "enum", False,
                                      ("ask", "accept-edits", "auto"))),
               st.fixed_dictionaries(
                   {"sessionId": session_ids,
                    "workspace": st.tuples(strings, strings).map(lambda t: "\x00".join(t))},
                   optional={"permissionMode": st.sampled_from(["ask", "accept-edits", "auto"])},
               ).map(lambda p: (p, _codes(frozenset({NOT_INITIALIZED, INVALID_PARAMS}),
                                          INVALID_PARAMS)))),
        empty_method("host.stats", pre=NOT_INITIALIZED),
        empty_method("shutdown", valid=False),
        initialize_method(),
    ]


# -- building messages ----------------------------------------------------------------

def _request(method: str, params: dict[str, Any] | None, rid: Any,
             **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        obj["params"] = params
    obj.update(extra)
    return obj


class CallIds:
    """Unique tool call ids, so no two generated executions share one."""

    counter = itertools.count(1)


def _fresh_params(params: dict[str, Any] | None) -> dict[str, Any] | None:
    if params is not None and "callId" in params and params["callId"] == "":
        return {**params, "callId": f"fuzz-{next(CallIds.counter)}"}
    return params


@dataclass(frozen=True)
class Link:
    methods: tuple[Method, ...]
    notification_names: tuple[str, ...] = ()  # methods the peer may send as notifications
    max_frame: int = 8 * 1024 * 1024

    @property
    def names(self) -> frozenset[str]:
        return frozenset(m.name for m in self.methods)


@functools.cache
def valid_request(link: Link, only: str | None = None) -> st.SearchStrategy[Template]:
    sendable = [m for m in link.methods if m.valid is not None and only in (None, m.name)]

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        method = draw(st.sampled_from(sendable))
        assert method.valid is not None
        params, codes = draw(method.valid)
        idspec = draw(id_specs)
        style = draw(styles)
        initializes = method.initializes and OK in codes[READY]

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = idspec.make(ids)
            obj = _request(method.name, _fresh_params(params), rid)
            return Msg(restyle(style, rnd).encode(obj), Answer(rid, codes[phase]),
                       f"valid {method.name}")

        return Template(f"valid {method.name}", make, initializes)

    return draw()


def _param_defects(method: Method) -> list[str]:
    defects = ["unknown field", "not an object"]
    if method.fields:
        defects.append("wrong type")
    if any(f.required for f in method.fields):
        defects += ["missing field", "no params"]
    return defects


PARAM_DEFECTS = ("unknown field", "not an object", "wrong type", "missing field", "no params")


@functools.cache
def bad_params(link: Link, defect_only: str | None = None) -> st.SearchStrategy[Template]:
    methods = [m for m in link.methods if defect_only in (None, *_param_defects(m))]

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        method = draw(st.sampled_from(methods))
        base: dict[str, Any] = {}
        for f in method.fields:
            if f.required:
                base[f.name] = "x" if f.kind in ("str",) else {}
        if method.valid is not None:
            drawn, _ = draw(method.valid)
            base = dict(drawn or {})
        defect = defect_only or draw(st.sampled_from(_param_defects(method)))
        params: Any = base
        if defect == "wrong type":
            f = draw(st.sampled_from(method.fields))
            params = {**base, f.name: draw(_wrong_value(f))}
        elif defect == "missing field":
            f = draw(st.sampled_from([f for f in method.fields if f.required]))
            params = {k: v for k, v in base.items() if k != f.name}
        elif defect == "unknown field":
            names = {f.name for f in method.fields}
            key = draw(st.one_of(
                st.sampled_from(["session_id", "protocol_version", "bogus", "", "params",
                                 "Workspace"]),
                texts).filter(lambda k: k not in names))
            params = {**base, key: draw(json_values)}
        elif defect == "not an object":
            params = draw(st.one_of(st.lists(json_values, max_size=3), strings, st.integers(),
                                    st.booleans(), st.none()))
        idspec = draw(id_specs)
        style = draw(styles)

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = idspec.make(ids)
            obj = {"jsonrpc": "2.0", "id": rid, "method": method.name}
            if defect != "no params":
                obj["params"] = _fresh_params(params) if isinstance(params, dict) else params
            return Msg(restyle(style, rnd).encode(obj), Answer(rid, frozenset({INVALID_PARAMS})),
                       f"bad params ({defect}) {method.name}")

        return Template(f"bad params {method.name}", make)

    return draw()


@functools.cache
def unknown_method(link: Link) -> st.SearchStrategy[Template]:
    names = st.one_of(
        st.sampled_from(["session.List", "session.list ", "rpc.discover", "", "tools.output",
                         "permission.request", "session.event", "initialize\u0000", "host.stats.",
                         "session", "tools.execute/", "ops.sessions"]),
        strings,
    ).filter(lambda m: m not in link.names)

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        name = draw(names)
        params = draw(st.one_of(st.none(), json_values))
        idspec, style = draw(id_specs), draw(styles)

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = idspec.make(ids)
            obj = _request(name, params if isinstance(params, dict) else None, rid)
            return Msg(restyle(style, rnd).encode(obj), Answer(rid, frozenset({METHOD_NOT_FOUND})),
                       "unknown method")

        return Template("unknown method", make)

    return draw()


@functools.cache
def notification(link: Link) -> st.SearchStrategy[Template]:
    """Well-formed notifications, of any method: never answered (and never executed)."""
    names = st.one_of(st.sampled_from(sorted(link.names)), strings)

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        name = draw(names)
        params = draw(st.one_of(st.none(), json_values))
        style = draw(styles)
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": name}
        if params is not None:
            obj["params"] = params

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            return Msg(restyle(style, rnd).encode(obj), None, "notification")

        return Template("notification", make)

    return draw()


ENVELOPE_DEFECTS = ("version", "no version", "version of a notification", "id type", "huge id",
                    "null id", "method type", "method type without id", "extra member")


@functools.cache
def envelope_defect(link: Link, only: str | None = None) -> st.SearchStrategy[Template]:
    """One thing wrong with an otherwise valid request (or notification)."""
    names = sorted(link.names)
    bad_versions = st.one_of(
        st.sampled_from(["1.0", "2", "2.00", " 2.0", "2.0 ", "", "V2.0"]),
        st.sampled_from([2.0, 2, None, True, [], {}, ["2.0"]]),
    )
    bad_ids = st.one_of(
        non_integral, st.sampled_from([1.0, -0.0, 1e3, True, False, [], [1], {}, {"a": 1}]),
    )
    bad_method_values = st.sampled_from([1, None, True, [], ["session.list"], {"a": 1}, 1.5])
    extra_keys = st.one_of(
        st.sampled_from(["result", "error", "Params", "params_", "xparams", "ID", "Method",
                         "jsonrpc2", "", "\u0000"]),
        texts,
    ).filter(lambda k: k not in ("jsonrpc", "id", "method", "params"))
    defects = st.sampled_from(ENVELOPE_DEFECTS) if only is None else st.just(only)

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        defect = draw(defects)
        name = draw(st.sampled_from(names))
        style, idspec = draw(styles), draw(id_specs)
        changes: dict[str, Any] = {}
        drop: tuple[str, ...] = ()
        code, keep_id = INVALID_REQUEST, True
        if defect == "version":
            changes["jsonrpc"] = draw(bad_versions)
        elif defect == "no version":
            drop = ("jsonrpc",)
        elif defect == "version of a notification":
            changes["jsonrpc"] = draw(bad_versions)
            drop, keep_id = ("id",), False
        elif defect == "id type":
            changes["id"], keep_id = draw(bad_ids), False
        elif defect == "huge id":  # 4301 digits: no integer a peer could mean
            changes["id"], keep_id = "@@HUGE@@", False
        elif defect == "null id":
            changes["id"], keep_id = None, False
            changes["method"] = draw(st.one_of(st.just(name), strings))
            if changes["method"] not in link.names:
                code = METHOD_NOT_FOUND
        elif defect == "method type":
            changes["method"] = draw(bad_method_values)
        elif defect == "method type without id":
            changes["method"] = draw(bad_method_values)
            drop, keep_id = ("id",), False
        else:
            changes[draw(extra_keys)] = draw(json_values)

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = idspec.make(ids)
            obj: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": name, **changes}
            for key in drop:
                del obj[key]
            expect = Answer(rid if keep_id else None, frozenset({code}))
            frame = restyle(style, rnd).encode(obj).replace(b'"@@HUGE@@"', b"1" + b"0" * 4300)
            return Msg(frame, expect, f"envelope: {defect}")

        return Template(f"envelope: {defect}", make)

    return draw()


RESPONSE_SHAPES = ("result", "error", "malformed error", "both", "neither", "null id", "no id",
                   "neither, no id")


@functools.cache
def response(link: Link, only: str | None = None) -> st.SearchStrategy[Template]:
    """Results and errors for requests never sent (stray answers), well formed or not."""
    errors = st.fixed_dictionaries({"code": st.integers(-(2**31), 2**31), "message": strings},
                                   optional={"data": json_values})
    malformed_errors = st.one_of(
        strings, st.integers(), st.none(), st.lists(st.integers(), max_size=2), st.just({}),
        st.fixed_dictionaries({"code": st.one_of(strings, non_integral), "message": strings}),
        st.fixed_dictionaries({"code": st.integers()}),
    )
    shapes = st.sampled_from(RESPONSE_SHAPES) if only is None else st.just(only)

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        shape = draw(shapes)
        style, idspec = draw(styles), draw(id_specs)
        members: dict[str, Any] = {}
        drop_id = null_id = False
        answered = shape in ("both", "neither", "neither, no id")
        if shape in ("result", "both", "no id"):
            members["result"] = draw(json_values)
        if shape in ("error", "both", "null id"):
            members["error"] = draw(errors)
        if shape == "malformed error":
            members["error"] = draw(malformed_errors)
        if shape in ("no id", "neither, no id"):
            drop_id = True
        null_id = shape == "null id"  # the peer's own error about a frame it could not read

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = idspec.make(ids)
            obj: dict[str, Any] = {"jsonrpc": "2.0", "id": None if null_id else rid, **members}
            if drop_id:
                del obj["id"]
            expect = None
            if answered:
                expect = Answer(None if drop_id else rid, frozenset({INVALID_REQUEST}))
            return Msg(restyle(style, rnd).encode(obj), expect, f"response: {shape}")

        return Template(f"response: {shape}", make)

    return draw()


@functools.cache
def not_an_object() -> st.SearchStrategy[Template]:
    values = st.one_of(scalars, st.just([]), st.lists(st.integers(), min_size=0, max_size=0))

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        value = draw(values)
        frame = msgspec.json.encode(value) if draw(st.booleans()) else json.dumps(value).encode()
        answer = Answer(None, frozenset({INVALID_REQUEST}))
        return Template("not an object",
                        lambda ids, phase, rnd: Msg(frame, answer, "not an object"))

    return draw()


@functools.cache
def deep(link: Link) -> st.SearchStrategy[Template]:
    """Valid JSON nested deeper than a parser will follow."""
    names = sorted(link.names)

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        depth = draw(st.integers(2000, max(2000, min(6000, (link.max_frame - 200) // 6))))
        where = draw(st.sampled_from(["top", "params", "id", "batch member"]))
        name = draw(st.sampled_from(names))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        inner = opener * depth + (b"1" if opener != b"[" else b"") + closer * depth

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = ids.new("int")
            head = b'{"jsonrpc":"2.0","id":%d,"method":%s' % (rid, msgspec.json.encode(name))
            if where == "top":
                frame = inner
            elif where == "params":
                frame = head + b',"params":{"x":' + inner + b"}}"
            elif where == "id":
                frame = b'{"jsonrpc":"2.0","method":"x","id":' + inner + b"}"
            else:
                frame = b"[" + head + b"}," + inner + b"]"
            return Msg(frame, Answer(None, frozenset({PARSE})), f"deep ({where})")

        return Template("deep", make)

    return draw()


BAD_UTF8 = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80",
            b"\xe2\x82", b"\xf0\x9f\x98"]


@functools.cache
def bad_utf8(link: Link) -> st.SearchStrategy[Template]:
    """A valid request with invalid UTF-8 inside one of its strings."""
    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        base = draw(valid_request(link))
        bad = draw(st.sampled_from(BAD_UTF8))
        where = draw(st.sampled_from(["id", "method", "params", "key"]))

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            msg = base.build(ids, phase, rnd)
            obj = msgspec.json.decode(msg.frame)
            if where == "id" or not isinstance(obj.get("params"), dict):
                obj["id"] = "@@BAD@@"
            elif where == "method":
                obj["method"] = obj["method"] + "@@BAD@@"
            elif where == "key":
                obj["params"]["@@BAD@@"] = 1
            else:
                key = next(iter(obj["params"]), None)
                obj["params"][key or "x"] = "@@BAD@@"
            frame = msgspec.json.encode(obj).replace(b"@@BAD@@", bad)
            return Msg(frame, Answer(None, frozenset({PARSE})), f"bad utf-8 ({where})")

        return Template("bad utf-8", make)

    return draw()


def json_oracle(frame: bytes) -> Expected | str:
    """The answer a frame of arbitrary bytes deserves, or "object" when it is JSON that
    decides by its content (not used as garbage)."""
    line = frame.rstrip(b"\r")
    if not line.strip():
        return None
    try:
        value = json.loads(line.decode("utf-8"), parse_constant=_refuse)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Answer(None, frozenset({PARSE}))
    # (A lone surrogate escape is read as U+FFFD: such text is still JSON text.)
    if isinstance(value, (dict, list)):
        return "object"
    if isinstance(value, int) and not isinstance(value, bool) and len(str(abs(value))) > 4000:
        return "object"  # out of any decoder's integer range: ambiguous, not garbage
    return Answer(None, frozenset({INVALID_REQUEST}))


def _refuse(constant: str) -> Any:
    raise ValueError(constant)


@functools.cache
def garbage() -> st.SearchStrategy[Template]:
    """Bytes from anywhere, JSON-ish or not; blank lines; never a JSON object or array."""
    jsonish = st.text(st.sampled_from('{}[]":,0123456789.eE+-truefalsn\\/ u\t'), min_size=1,
                      max_size=40).map(str.encode)
    raw = st.binary(min_size=1, max_size=48).map(lambda b: b.replace(b"\n", b""))
    blank = st.sampled_from([b" ", b"\t", b"\r", b" \r", b"\x0b", b"\x0c", b"  \t  "])

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        frame = draw(st.one_of(jsonish, raw, blank))
        expected = json_oracle(frame)
        if expected == "object":
            frame, expected = b"{", Answer(None, frozenset({PARSE}))
        assert not isinstance(expected, str)
        answer = expected
        return Template("garbage", lambda ids, phase, rnd: Msg(frame, answer, "garbage"))

    return draw()


def truncated(inner: st.SearchStrategy[Template]) -> st.SearchStrategy[Template]:
    """A message cut short (a writer that died mid-line)."""
    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        base = draw(inner)
        fraction = draw(st.floats(0.0, 1.0, exclude_max=True))

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            whole = base.build(ids, phase, rnd).frame.rstrip(b" \t\r")
            at = fraction if rnd is None else rnd.random()
            cut = whole[:int(len(whole) * at)]
            expected = json_oracle(cut)
            assert expected != "object", cut  # a strict prefix of an object never parses
            assert not isinstance(expected, str)
            return Msg(cut, expected, "truncated")

        return Template("truncated", make)

    return draw()


@functools.cache
def batch(link: Link) -> st.SearchStrategy[Template]:
    member = st.one_of(valid_request(link), bad_params(link), unknown_method(link),
                       notification(link), envelope_defect(link), response(link),
                       not_an_object())

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        members = draw(st.lists(member, min_size=1, max_size=6))
        nested = draw(st.integers(0, 4)) == 0
        initializes = any(m.initializes for m in members)

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            built = [m.build(ids, phase, rnd) for m in members]
            parts = [b.frame.strip() for b in built]
            answers = [b.answer for b in built]
            if nested:  # an array inside the batch: one more invalid member
                parts.append(b"[]")
                answers.append(Answer(None, frozenset({INVALID_REQUEST})))
            singles = tuple(a for a in answers if isinstance(a, Answer))
            return Msg(b"[" + b",".join(parts) + b"]", singles or None, "batch")

        return Template("batch", make, initializes)

    return draw()


LONE_SURROGATES = [b"\\udcff", b"\\ud83d", b"\\uDE00", b"\\ud83d\\u0041", b"\\udfff\\ud800"]


@functools.cache
def lone_surrogate(link: Link) -> st.SearchStrategy[Template]:
    """A request with a lone UTF-16 surrogate escape (as JavaScript writes half an emoji)
    in a key, a value or its string id: read as U+FFFD, it keeps its id (here: an unknown
    field, so ``-32602``; the id, a string, carries U+FFFD in the answer)."""
    methods = [m for m in link.methods if "unknown field" in _param_defects(m)]

    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        method = draw(st.sampled_from(methods))
        bad = draw(st.sampled_from(LONE_SURROGATES))
        where = draw(st.sampled_from(["key", "value", "id"]))

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            rid = ids.new("str" if where == "id" else "int", "@@BAD@@")
            key, value = ("k@@BAD@@", 1) if where == "key" else ("bogus", "v@@BAD@@")
            frame = msgspec.json.encode(_request(method.name, {key: value}, rid)).replace(
                b"@@BAD@@", bad)
            answer_id = _replaced(msgspec.json.encode(rid).replace(b"@@BAD@@", bad)
                                  ) if where == "id" else rid
            return Msg(frame, Answer(answer_id, frozenset({INVALID_PARAMS})),
                       f"lone surrogate ({where})")

        return Template("lone surrogate", make)

    return draw()


def _replaced(text: bytes) -> str:
    """A JSON string as the daemon reads it: every lone surrogate is U+FFFD."""
    value = json.loads(text)
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)


BATCH_LIMIT = 256  # protocol.bounds.MAX_BATCH_MEMBERS, stated again: the wire's contract


@functools.cache
def big_batch(link: Link) -> st.SearchStrategy[Template]:
    """A batch at the member limit (served: notifications, no answer, then one request
    answered) or over it (one ``-32600``, id null, whatever its members)."""
    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        over = draw(st.booleans())
        extra = draw(st.integers(1, 2000)) if over else 0
        member = draw(st.sampled_from([b"1", b'{"jsonrpc":"2.0","method":"no.such"}', b"[]"]))

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            if over:
                size = BATCH_LIMIT + extra
                frame = b"[" + b",".join([member] * size) + b"]"
                if len(frame) > link.max_frame:  # (then it is only oversized)
                    frame = b"[" + b",".join([b"1"] * size) + b"]"
                return Msg(frame, Answer(None, frozenset({INVALID_REQUEST})), "batch over limit")
            rid = ids.new("int")
            last = b'{"jsonrpc":"2.0","id":%d,"method":"no.such.method"}' % rid
            quiet = b'{"jsonrpc":"2.0","method":"no.such"}'
            frame = b"[" + b",".join([quiet] * (BATCH_LIMIT - 1) + [last]) + b"]"
            return Msg(frame, (Answer(rid, frozenset({METHOD_NOT_FOUND})),), "batch at limit")

        return Template("big batch", make)

    return draw()


def oversized(link: Link, *, at_most: int) -> st.SearchStrategy[Template]:
    """A frame over the limit (answered -32600, id null) and one exactly at it (served)."""
    @st.composite
    def draw(draw: st.DrawFn) -> Template:
        over = draw(st.integers(1, at_most))
        base = draw(valid_request(link).filter(lambda t: not t.initializes))

        def make(ids: Ids, phase: str, rnd: random.Random | None) -> Msg:
            msg = base.build(ids, phase, rnd)
            obj = msgspec.json.decode(msg.frame)
            obj["padding"] = ""
            size = len(msgspec.json.encode(obj))
            obj["padding"] = "p" * (link.max_frame - size + over)
            frame = msgspec.json.encode(obj)
            assert len(frame) == link.max_frame + over
            return Msg(frame, Answer(None, frozenset({INVALID_REQUEST})), "oversized")

        return Template("oversized", make)

    return draw()


@functools.cache
def messages(link: Link, *, oversize: int = 0) -> st.SearchStrategy[list[Template]]:
    """One message of every kind and variant (hypothesis alone would favour a few), plus
    a few of any kind."""
    anything = st.one_of(valid_request(link), bad_params(link), unknown_method(link),
                         notification(link), envelope_defect(link), response(link),
                         not_an_object(), garbage(), batch(link))
    kinds: list[st.SearchStrategy[Template]] = [
        *(valid_request(link, m.name) for m in link.methods if m.valid is not None),
        *(bad_params(link, d) for d in PARAM_DEFECTS),
        unknown_method(link), notification(link),
        *(envelope_defect(link, d) for d in ENVELOPE_DEFECTS),
        *(response(link, shape) for shape in RESPONSE_SHAPES),
        not_an_object(), garbage(), garbage(),
        truncated(st.one_of(valid_request(link), bad_params(link), batch(link))),
        truncated(valid_request(link)),
        bad_utf8(link), batch(link), batch(link), deep(link),
        lone_surrogate(link), big_batch(link), big_batch(link),
    ]
    if oversize:
        kinds.append(oversized(link, at_most=oversize))
    return st.tuples(st.tuples(*kinds), st.lists(anything, max_size=4)).map(
        lambda t: [*t[0], *t[1]])


def exact_size_request(method: str, params: dict[str, Any], pad_field: str, size: int,
                       rid: Any) -> bytes:
    """A valid request of exactly ``size`` bytes, padded in a string field."""
    obj = _request(method, {**params, pad_field: ""}, rid)
    fill = size - len(msgspec.json.encode(obj))
    assert fill >= 0
    obj["params"][pad_field] = "q" * fill
    frame = msgspec.json.encode(obj)
    assert len(frame) == size
    return frame


def instantiate(templates: Sequence[Template], ids: Ids, phase: str,
                rnd: random.Random | None = None) -> list[Msg]:
    return [t.build(ids, phase, rnd) for t in templates]
