"""Process control, what the runtime and the host both load: cgroups, process trees and
their kill (``proctree``), our children and adopted orphans (``orphans``), processes that
left their cgroup (``escapes``), secrets kept out of environments (``secretenv``), the
peers of a local socket (``peers``), hardening and the C library's ``prctl``.

It imports ``protocol`` and libraries only, nothing else of ours and not ``runtime.link``
(the two are independent); every layer of the runtime and the host may import it
(``[tool.importlinter]`` in pyproject.toml, checked by ``lint-imports``). It lives under
``runtime/`` because the top level is fixed and ``protocol`` is sans-IO.
"""
