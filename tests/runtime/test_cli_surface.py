"""What a person sees of the ``quiesce`` command before anything runs: ``--version``, help
text without reStructuredText markup, usage lines naming every provider, and
``quiesce acp --help`` starting no host."""

from __future__ import annotations

import subprocess
import sys

import pytest

import runtime.cli
from runtime.cli import main

PROVIDERS = ("scripted:FILE", "openai", "anthropic")


def _quiesce(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def test_version() -> None:
    done = _quiesce("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "quiesce 0.1.0"


def test_top_level_help_has_no_markup() -> None:
    done = _quiesce("--help")
    assert done.returncode == 0
    assert "``" not in done.stdout and ":func:" not in done.stdout, done.stdout
    assert "--version" in done.stdout


@pytest.mark.parametrize("command", ["serve", "acp", "chat"])
def test_usage_names_every_provider(command: str) -> None:
    done = _quiesce(command, "--help")
    assert done.returncode == 0, done.stderr
    usage = done.stdout.split("\n\n", 1)[0]
    for provider in PROVIDERS:
        assert provider in usage, usage
    assert "``" not in done.stdout, done.stdout


def test_acp_help_starts_no_host(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    spawned: list[list[str]] = []
    real = runtime.cli._spawn_host

    def spy(command: list[str]) -> subprocess.Popen[bytes]:
        spawned.append(command)
        return real(command)

    monkeypatch.setattr(runtime.cli, "_spawn_host", spy)
    with pytest.raises(SystemExit) as exited:
        main(["acp", "--help"])
    assert exited.value.code == 0
    assert "usage: quiesce acp" in capsys.readouterr().out
    assert spawned == []
