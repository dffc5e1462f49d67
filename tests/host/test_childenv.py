"""The child environment policy's rules, case by case (the end-to-end proof that Bash, a
hook and a plugin server get it is tests/e2e/test_child_env.py)."""

from __future__ import annotations

from host.childenv import ChildEnvironment, EnvironmentPolicy

BASE = {"PATH": "/bin", "OPENAI_API_KEY": "k", "aws_secret_access_key": "s",
        "GITHUB_TOKEN": "t", "DB_PASSWORD": "p", "GOOGLE_APPLICATION_CREDENTIALS": "c",
        "MY_LLM": "m", "COMPANY_INTERNAL": "i", "HOME": "/root"}


def test_default_drops_secret_looking_names_in_any_case() -> None:
    env = ChildEnvironment(EnvironmentPolicy()).build(BASE)
    assert env == {"PATH": "/bin", "MY_LLM": "m", "COMPANY_INTERNAL": "i", "HOME": "/root"}


def test_include_exclude_set_and_provider_keys() -> None:
    policy = EnvironmentPolicy(include=("github_*", "OPENAI_API_KEY", "MY_LLM"),
                               exclude=("COMPANY_*",), set={"PAGER": "cat"},
                               hidden=("MY_LLM",))
    children = ChildEnvironment(policy)
    env = children.build(BASE, {"MARKER": "x"})
    # Included: GITHUB_TOKEN; never a provider key (the defaults, or one the file names).
    assert env == {"PATH": "/bin", "GITHUB_TOKEN": "t", "HOME": "/root", "PAGER": "cat",
                   "MARKER": "x"}
    children.hide(["home"])  # a session's provider names its key variable
    assert "HOME" not in children.build(BASE)
    # A child's own additions (a plugin server's declared env) come as given.
    assert children.build(BASE, {"OPENAI_API_KEY": "declared"})["OPENAI_API_KEY"] == "declared"
