"""docs/architecture.md's module tables are generated from the docstrings and current, and
every module has a docstring to generate them from."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _generator() -> ModuleType:
    path = ROOT / "scripts" / "gen_architecture_docs.py"
    spec = importlib.util.spec_from_file_location("gen_architecture_docs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen = _generator()


def test_the_module_tables_are_generated_and_current() -> None:
    text = gen.TARGET.read_text()
    assert text == gen.fill(text), "run scripts/gen_architecture_docs.py"


def test_every_package_has_a_table_and_every_module_a_row() -> None:
    text = gen.TARGET.read_text()
    for package in gen.packages():
        assert f"### `{package.relative_to(ROOT).as_posix()}/`\n" in text, package
        for module in package.glob("*.py"):
            if module.name != "__init__.py":
                assert f"| `{module.name}` | " in text, module


def test_a_module_without_a_docstring_is_refused(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "nodoc.py"
    module.write_text("x = 1\n")
    with pytest.raises(gen.MissingDocstring):
        gen.docstring_of(module)


def test_a_row_is_the_first_sentence_in_markdown() -> None:
    doc = ("The ``quiesce`` command: one of :mod:`runtime.cli`'s, e.g. ``a | b``. Not this.\n"
           "\nNor this paragraph.")
    assert gen.first_sentence(doc) == (
        "The `quiesce` command: one of `runtime.cli`'s, e.g. `a \\| b`.")


def test_the_markers_must_be_there() -> None:
    with pytest.raises(ValueError, match="no line"):
        gen.fill("# A document without them\n")
