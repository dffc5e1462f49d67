"""jsonrpcserver's dispatcher, loaded without the package's ``__init__``.

The dispatch layer uses three small modules of jsonrpcserver (``dispatcher``'s method
lookup, ``result``'s ``Success``/``Error``, ``sentinels``) and oslash's ``Either``
behind them. Importing any submodule first runs its package's ``__init__``, and
jsonrpcserver's imports everything the package offers: its asyncio dispatcher
(asyncio), its request validation (jsonschema and its bundled schema) and its HTTP
server; oslash's imports every monad it has. That was most of the ~200 ms of
``import jsonrpcserver`` in both processes, for nothing either uses.

So the two packages are put in ``sys.modules`` as bare package objects (their spec,
their ``__path__``, no ``__init__`` run), and the submodules are imported through
them as usual. The package is not cut short for anyone else: the first time code asks
a bare package for an attribute it lacks (``jsonrpcserver.dispatch``,
``from jsonrpcserver import serve``), its ``__init__`` runs then, once, in place.
Nothing changes if a package was imported before this module.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

BARE = ("jsonrpcserver", "oslash")


def bare_package(name: str) -> ModuleType:
    """``name`` in ``sys.modules`` as a package whose ``__init__`` runs only when an
    attribute it would define is first asked for."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    module = importlib.util.module_from_spec(spec)
    loader = spec.loader

    def complete(attr: str) -> object:
        if attr.startswith("__"):  # the import system's probes (__all__, __wrapped__...)
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        del module.__dict__["__getattr__"]
        loader.exec_module(module)
        return getattr(module, attr)

    module.__dict__["__getattr__"] = complete
    sys.modules[name] = module
    return module


for _name in BARE:
    bare_package(_name)

# Imported through the bare packages (so after the loop: ruff's isort must not move them).
from jsonrpcserver.dispatcher import get_method  # noqa: E402
from jsonrpcserver.result import Error, ErrorResult, Success  # noqa: E402
from jsonrpcserver.sentinels import NODATA  # noqa: E402
from oslash.either import Left  # noqa: E402

__all__ = ["BARE", "NODATA", "Error", "ErrorResult", "Left", "Success", "bare_package",
           "get_method"]
