"""Per-call limits from the daemon's configuration file (``[host.limits]``), through
``quiesce serve --config``: they reach the host, a Bash call over the memory limit fails
naming it, and a bad value is refused by name before anything runs."""

from __future__ import annotations

import pathlib
import sys

import trio

from tests.conftest import Marked
from tests.e2e.test_serve_config import refused, write_config
from tests.kit.daemon import agent_daemon, call, text

ALLOCATE = f"{sys.executable} -c 'bytearray(600 << 20); print(\"allocated\")'"


async def test_the_files_limits_bound_a_bash_call(tmp_path: pathlib.Path,
                                                  marked: Marked) -> None:
    config = write_config(tmp_path / "config.toml",
                          "[host.limits]\nmax_memory_mb = 256\nmax_processes = 64\n")
    async with agent_daemon(marked, extra_args=("--config", str(config))) as agent:
        await agent.new_session(tmp_path, [[call("b1", "Bash", command=ALLOCATE)],
                                           [text("done")]])
        with trio.fail_after(30):
            await agent.prompt("go")
        result = agent.results("t1")["b1"]
    output = str(result.details.get("output"))
    assert "allocated" not in output, result
    assert "256 MiB" in str(result) and ("RLIMIT_DATA" in str(result)
                                        or "memory.max" in str(result)), result


async def test_a_bad_limit_is_refused_by_name(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", "[host.limits]\nmax_memory_mb = -1\n")
    assert "limits.max_memory_mb" in await refused(marked, config)
    config = write_config(tmp_path / "d.toml", "[host.limits]\nmax_memory = 1\n")
    assert "limits.max_memory" in await refused(marked, config)
