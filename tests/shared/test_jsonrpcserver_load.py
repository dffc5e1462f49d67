"""jsonrpcserver is loaded without its package ``__init__`` (and so without asyncio,
jsonschema and its HTTP server), and the whole package is still there for anyone who
asks for it."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("asyncio", "jsonschema", "http.server", "jsonrpcserver.main",
         "jsonrpcserver.async_main", "oslash.list")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def test_both_processes_load_the_dispatcher_without_the_heavy_modules() -> None:
    out = _run("import sys, host.main, runtime.link.dispatch\n"
               f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert out == "[]"


def test_the_whole_package_loads_on_first_use_of_what_the_init_defines() -> None:
    out = _run("import runtime.link.dispatch, sys\n"
               "import jsonrpcserver, oslash\n"
               "assert 'jsonschema' not in sys.modules\n"
               "from jsonrpcserver import dispatch, Success\n"
               "print(callable(dispatch), 'jsonschema' in sys.modules, oslash.Just.__name__)")
    assert out == "True True Just"


def test_a_package_imported_first_is_left_as_it_is() -> None:
    out = _run("import jsonrpcserver\n"
               "from runtime.link.jsonrpcserver_load import bare_package\n"
               "print(bare_package('jsonrpcserver') is jsonrpcserver)")
    assert out == "True"
