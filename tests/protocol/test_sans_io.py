"""protocol/ is sans-IO: it imports msgspec and the standard library only, no I/O modules.

The second check beside the import-linter contracts (pyproject.toml): those see the
packages of the project and of the libraries, this one also the standard library's.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PROTOCOL = pathlib.Path(__file__).resolve().parents[2] / "protocol"
FORBIDDEN = {"trio", "os", "subprocess", "socket", "asyncio", "threading", "selectors",
             "jsonrpcserver", "psutil", "runtime", "host"}


def test_protocol_imports_no_io_modules() -> None:
    for path in PROTOCOL.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top not in FORBIDDEN, f"{path.name} imports {name}"
                allowed = top in {"msgspec", "protocol", "__future__"} or top in \
                    sys.stdlib_module_names
                assert allowed, f"{path.name} imports {name}"


def test_importing_protocol_loads_no_io_module() -> None:
    code = ("import sys, protocol, protocol.envelope, protocol.docs;"
            "bad = {'trio', 'subprocess', 'socket', 'asyncio', 'jsonrpcserver'} & "
            "set(sys.modules); print(sorted(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"
