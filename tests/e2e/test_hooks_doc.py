"""Every example of ``docs/hooks.md``, copied out of the document and run verbatim.

Each example's script and its ``[[hooks...]]`` table are taken from the document's
"Examples" section; the only change is where the script lives (the document's
``/usr/local/lib/quiesce/`` becomes a folder of the test's). The daemon runs with a fresh
``HOME`` (no ``~/.local/state``) and a ``PATH`` without ``ruff`` unless a test adds it.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import stat
import sys

import pytest
import trio

from tests.conftest import Marked
from tests.e2e.hookkit import decisions
from tests.kit.daemon import Agent, agent_daemon, call, text

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "hooks.md"
INSTALLED = "/usr/local/lib/quiesce/"
BARE_PATH = "/usr/bin:/bin"
DONE = [text("done")]


def examples() -> dict[str, tuple[str, str, str]]:
    """By script name: (the section's title, the script, its TOML), as the document has them."""
    section = DOC.read_text().split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, tuple[str, str, str]] = {}
    for part in section.split("\n### ")[1:]:
        title = part.splitlines()[0]
        blocks = re.findall(r"```(\w+)\n(.*?)```", part, re.S)
        scripts = [body for lang, body in blocks if lang in ("sh", "python")]
        tables = [body for lang, body in blocks if lang == "toml"]
        assert len(scripts) == 1 and len(tables) == 1, f"{title}: one script, one table"
        name = re.search(re.escape(INSTALLED) + r"([\w.-]+)", scripts[0])
        assert name is not None, f"{title}: the script says where it is installed"
        found[name.group(1)] = (title, scripts[0], tables[0])
    return found


def install(tmp_path: pathlib.Path, *names: str) -> pathlib.Path:
    """The examples ``names`` installed as the document says (under the test's folder);
    the configuration file of their tables, in order."""
    lib = tmp_path / "lib"
    lib.mkdir()
    every = examples()
    tables = []
    for name in names:
        _, body, table = every[name]
        path = lib / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        tables.append(table.replace(INSTALLED, f"{lib}/"))
    config = tmp_path / "config.toml"
    config.write_text("\n".join(tables))
    return config


def _env(tmp_path: pathlib.Path, path: str = BARE_PATH) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "PATH": path, "XDG_STATE_HOME": ""}


def _text(agent: Agent, turn: str, call_id: str) -> str:
    return "\n".join(c.text for c in agent.results(turn)[call_id].content
                     if hasattr(c, "text"))


def test_the_document_has_the_four_examples() -> None:
    assert sorted(examples()) == ["audit", "lint-after-edit", "no-rm-rf", "stop-file"]


async def test_block_rm_rf(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = install(tmp_path, "no-rm-rf")
    ws = tmp_path / "ws"
    (ws / "build").mkdir(parents=True)
    async with agent_daemon(marked, env_extra=_env(tmp_path),
                            extra_args=("--config", str(config))) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="rm -rf build")],
                                     [call("b2", "Bash", command="echo fine")], DONE])
        with trio.fail_after(20):
            await agent.prompt("clean")
        results = agent.results("t1")
        assert results["b1"].code == "TOOL_DENIED"
        assert "rm -rf is not allowed" in _text(agent, "t1", "b1")
        assert (ws / "build").is_dir()
        assert results["b2"].code is None and "fine" in _text(agent, "t1", "b2")


async def test_the_audit_log_without_a_state_directory(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    config = install(tmp_path, "audit")
    ws = tmp_path / "ws"
    ws.mkdir()
    assert not (tmp_path / "home" / ".local").exists()
    async with agent_daemon(marked, env_extra=_env(tmp_path),
                            extra_args=("--config", str(config))) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="echo audited")],
                                     [call("w1", "Write", path="a.txt", content="a\n")],
                                     DONE])
        with trio.fail_after(20):
            await agent.prompt("go")
        results = agent.results("t1")
        assert results["b1"].code is None and results["w1"].code is None
        assert (ws / "a.txt").read_text() == "a\n"
    log = (tmp_path / "home" / ".local" / "state" / "quiesce-audit.jsonl").read_text()
    assert '"callId":"b1"' in log and '"callId":"w1"' in log
    assert [d.decision for d in decisions(agent)] == ["allow", "allow"]


@pytest.mark.parametrize("with_ruff", [False, True])
async def test_lint_after_edit(tmp_path: pathlib.Path, marked: Marked, with_ruff: bool) -> None:
    ruff = shutil.which("ruff", path=str(pathlib.Path(sys.executable).parent))
    assert ruff is not None, "the development set installs ruff"
    assert shutil.which("ruff", path=BARE_PATH) is None
    path = f"{pathlib.Path(ruff).parent}{os.pathsep}{BARE_PATH}" if with_ruff else BARE_PATH
    config = install(tmp_path, "lint-after-edit")
    ws = tmp_path / "ws"
    ws.mkdir()
    async with agent_daemon(marked, env_extra=_env(tmp_path, path),
                            extra_args=("--config", str(config))) as agent:
        await agent.new_session(ws, [[call("w1", "Write", path="a.py",
                                           content="import os\n")], DONE])
        with trio.fail_after(30):
            await agent.prompt("write")
        written = agent.results("t1")["w1"]
        assert (ws / "a.py").read_text() == "import os\n"
        # The Write ran and says so; never "denied".
        assert written.code is None and not written.is_error, _text(agent, "t1", "w1")
        assert "denied" not in _text(agent, "t1", "w1")
        contexts = written.details.get("contexts", [])
        if with_ruff:
            assert len(contexts) == 1 and contexts[0].startswith("ruff found problems:")
            assert "F401" in contexts[0]
        else:
            assert contexts == []
        assert [(d.decision, d.failed) for d in decisions(agent)] == [("allow", False)]


async def test_stop_a_runaway_turn(tmp_path: pathlib.Path, marked: Marked) -> None:
    from protocol.causes import HookCause

    config = install(tmp_path, "stop-file")
    ws = tmp_path / "ws"
    ws.mkdir()
    async with agent_daemon(marked, env_extra=_env(tmp_path),
                            extra_args=("--config", str(config))) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="echo first")],
                                     [call("b2", "Bash", command="touch STOP")],
                                     [call("b3", "Bash", command="touch never")], DONE])
        with trio.fail_after(20):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "cancelled"
        end = agent.turn_end_on_disk("t1")
        assert end is not None and end.end.reason == HookCause("STOP file present")
        results = agent.results("t1")
        assert results["b1"].code is None and results["b2"].code == "ABORTED"
        assert not (ws / "never").exists()
        agent.assert_balanced()
