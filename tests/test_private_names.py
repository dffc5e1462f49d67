"""No private name crosses a module boundary in the product (runtime, host, protocol,
scripts): a name with a leading underscore is its module's own. What another module needs
is public (no underscore, a docstring), or the design is wrong.

Three ways to reach one, each checked on the source (ast):
- ``from ours import _name`` (absolute or relative);
- ``module._name`` through a name bound to one of our modules;
- ``thing._name`` on anything but ``self`` / ``cls``, where this module does not define
  ``_name`` itself but another of ours does (an object of another module's class).
Names of other libraries (``os._exit``, a jsonrpcserver result's ``_value``) are theirs.
"""

from __future__ import annotations

import ast
import functools
import pathlib
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRODUCT = ("runtime", "host", "protocol", "scripts")
# The scripts run with scripts/ on their path: ``benchlib.harness`` is scripts/benchlib/...
SEARCH_PATH = (ROOT, ROOT / "scripts")

# Known crossings, each to be removed by the change that makes the name public (module,
# private name it reaches).
ALLOWED: frozenset[tuple[str, str]] = frozenset()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _files() -> list[pathlib.Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    base = ROOT / "scripts" if path.is_relative_to(ROOT / "scripts") else ROOT
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    for base in SEARCH_PATH:
        path = base.joinpath(*name.split("."))
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return False


@functools.cache
def _top_level() -> frozenset[str]:
    """Our top-level names: the three packages, and every module and package of scripts/."""
    return frozenset([*PRODUCT[:3], *(p.stem for p in (ROOT / "scripts").iterdir()
                                      if p.suffix == ".py" or (p / "__init__.py").is_file())])


def _ours(name: str) -> bool:
    return name.split(".")[0] in _top_level()


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, assigned names and
    attributes, ``__slots__`` entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _private(node.value) and node.value.isidentifier():
                names.add(node.value)  # __slots__, getattr names
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if _private(n)}


@functools.cache
def _trees() -> dict[str, tuple[pathlib.Path, ast.Module]]:
    return {_module_name(p): (p, ast.parse(p.read_text(), str(p))) for p in _files()}


@functools.cache
def _defined_by_module() -> dict[str, set[str]]:
    return {name: _defined(tree) for name, (_, tree) in _trees().items()}


def _import_source(module: str, path: pathlib.Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _crossings(module: str, path: pathlib.Path, tree: ast.Module) -> Iterator[str]:
    aliases: dict[str, str] = {}  # a local name -> the module of ours it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _import_source(module, path, node)
            if not _ours(source):
                continue
            for alias in node.names:
                if _private(alias.name) and source != module:
                    yield f"line {node.lineno}: from {source} import {alias.name}"
                if _is_module(f"{source}.{alias.name}"):
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    bound = alias.asname or alias.name.split(".")[0]
                    aliases[bound] = alias.name if alias.asname else bound
    own = _defined_by_module()[module]
    elsewhere = set().union(*(names for name, names in _defined_by_module().items()
                              if name != module))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain: list[str] = []
        value: ast.expr = node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in aliases:
            target = ".".join([aliases[value.id], *chain])
            if target != module and _is_module(target):
                yield f"line {node.lineno}: {target}.{node.attr}"
                continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in own and node.attr in elsewhere:
            yield f"line {node.lineno}: {ast.unparse(node)}"


def test_no_private_name_is_reached_from_another_module() -> None:
    found = []
    for module, (path, tree) in _trees().items():
        for crossing in _crossings(module, path, tree):
            name = crossing.rsplit(".", 1)[-1].split(" import ")[-1]
            if (module, name) not in ALLOWED:
                found.append(f"{path.relative_to(ROOT)} {crossing}")
    assert not found, "private names reached across modules:\n" + "\n".join(found)


def test_the_check_sees_each_way_of_reaching_one() -> None:
    source = ("from runtime.proc.orphans import become_subreaper as _b\n"
              "from runtime.proc import cgroups\n"
              "from .cgroups import _write\n"
              "from benchlib.harness import _anything\n"
              "cgroups._write('x', b'')\n"
              "def f(thing):\n"
              "    return thing._pending\n")
    module = "runtime.proc.example"
    _defined_by_module()[module] = _defined(ast.parse(source))
    try:
        found = list(_crossings(module, ROOT / "runtime/proc/example.py", ast.parse(source)))
    finally:
        del _defined_by_module()[module]
    assert [f.split(": ", 1)[1] for f in found] == [
        "from runtime.proc.cgroups import _write",
        "from benchlib.harness import _anything",
        "runtime.proc.cgroups._write",
        "thing._pending",
    ]
