"""docs/architecture.md and docs/internals.md name the code as it is: every file path they
put in backticks exists, and every ``Class.attribute`` and ``module.name`` they name is
defined there, so a reader who follows a name finds it (the generated sections included)."""

from __future__ import annotations

import ast
import functools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ("docs/architecture.md", "docs/internals.md")
CODE = ("runtime", "host", "protocol", "scripts", "tests")
PATH = re.compile(r"^(?:runtime|host|protocol|scripts|tests|docs)/[\w/.\-]*$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


@functools.cache
def _modules() -> dict[pathlib.Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path))
            for top in CODE for path in (ROOT / top).rglob("*.py")}


@functools.cache
def _file_names() -> set[str]:
    return {path.name for top in CODE for path in (ROOT / top).rglob("*") if path.is_file()}


def _names_in(node: ast.AST) -> set[str]:
    """Every name a class or module body defines: functions, classes, assignments
    (annotated ones, dataclass fields, included) and ``self.x`` assignments."""
    names: set[str] = set()
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(child.name)
        elif isinstance(child, (ast.Name, ast.Attribute)) and isinstance(child.ctx, ast.Store):
            names.add(child.id if isinstance(child, ast.Name) else child.attr)
        elif isinstance(child, ast.alias):
            names.add((child.asname or child.name).split(".")[0])
    return names


@functools.cache
def _defined_in(path: pathlib.Path) -> set[str]:
    """What a module defines at its top level (and the methods of its classes)."""
    names: set[str] = set()
    for node in _modules()[path].body:
        if isinstance(node, ast.ClassDef):
            names |= {node.name} | {child.name for child in node.body if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        else:
            names |= _names_in(node)
    return names


@functools.cache
def _classes() -> dict[str, tuple[set[str], set[str]]]:
    """Class name → (what its classes of that name define, their bases' names)."""
    classes: dict[str, tuple[set[str], set[str]]] = {}
    def top_level(body: list[ast.stmt]) -> list[ast.ClassDef]:
        found = [node for node in body if isinstance(node, ast.ClassDef)]
        return found + [inner for node in found for inner in top_level(node.body)]

    for module in _modules().values():
        for node in top_level(module.body):
                defined, bases = classes.setdefault(node.name, (set(), set()))
                defined |= _names_in(node)
                bases |= {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                          if isinstance(b, (ast.Name, ast.Attribute))}
    return classes


def _class_defines(name: str, attribute: str, seen: frozenset[str] = frozenset()) -> bool:
    defined, bases = _classes()[name]
    return attribute in defined or any(
        _class_defines(base, attribute, seen | {name}) for base in bases
        if base in _classes() and base not in seen)


@functools.cache
def _module_names() -> dict[str, set[str]]:
    """A module's (or package's) last name → every name defined in it."""
    names: dict[str, set[str]] = {}
    for path in _modules():
        key = path.parent.name if path.name == "__init__.py" else path.stem
        names.setdefault(key, set()).update(_defined_in(path))
    return names


@functools.cache
def _not_code() -> set[str]:
    """The JSON-RPC methods (``agent.abort``) and the configuration's keys
    (``admission.per_session_searches``): names of the wire and of the file, not of the
    code."""
    return {name for path in ("protocol/methods.py", "protocol/hostconfig.py")
            for name in re.findall(r'"([a-z]+(?:\.[A-Za-z_]+)+)"', (ROOT / path).read_text())}


def _module(name: str) -> tuple[pathlib.Path, list[str]] | None:
    """The module a dotted name begins with (``protocol.bounds.shorten``), and the rest."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        path = ROOT.joinpath(*parts[:end])
        for candidate in (path.with_suffix(".py"), path / "__init__.py"):
            if candidate in _modules():
                return candidate, parts[end:]
    return None


def _spans(document: str) -> list[tuple[int, str]]:
    return [(number, span.strip())
            for number, line in enumerate((ROOT / document).read_text().splitlines(), 1)
            for span in re.findall(r"`([^`\n]+)`", line)]


def _problem(span: str) -> str | None:
    if PATH.match(span):
        return None if (ROOT / span.rstrip("/")).exists() else "no such path"
    name = span.split("(", 1)[0]
    if re.fullmatch(r"\w+\.(?:py|js|css|html)", name):
        return None if name in _file_names() else "no such file"
    if name in _not_code() or not DOTTED.match(name):
        return None
    module = _module(name)
    if module is not None:
        path, rest = module
        return None if not rest or rest[0] in _defined_in(path) else (
            f"{path.relative_to(ROOT)} defines no {rest[0]}")
    first, second = name.split(".")[:2]
    if first in _classes():
        return None if _class_defines(first, second) else f"{first} defines no {second}"
    if first in _module_names() and not first[0].isupper():
        return None if second in _module_names()[first] else f"{first} defines no {second}"
    return None  # a variable, a library (trio.…, os.…), a wire field: not ours to check


def test_the_documents_name_what_exists() -> None:
    problems = [f"{document}:{number}: `{span}`: {problem}"
                for document in DOCS for number, span in _spans(document)
                if (problem := _problem(span)) is not None]
    assert not problems, "a document names what the code no longer has:\n" + "\n".join(
        problems)


def test_a_removed_name_is_caught() -> None:
    assert _problem("runtime/daemon/session_life.py") == "no such path"
    assert _problem("HostTools._stop") == "HostTools defines no _stop"
    assert _problem("HostCall.stop") is None
    assert _problem("agent.abort") is None
