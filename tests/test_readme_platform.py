"""The README says where quiesce runs and what each optional kernel feature changes, and
the switches it names are the code's."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_readme_says_linux_and_the_optional_kernel_features() -> None:
    readme = ROOT.joinpath("README.md").read_text()
    section = readme.split("\n## Where it runs\n", 1)[1].split("\n## ", 1)[0]
    assert "runs on **Linux** only" in section
    for feature in ("**cgroup v2**", "**Landlock**", "**`openat2`**"):
        assert feature in section, feature
    assert section.count("Without it") == 3  # what happens without each
    # The switch and the figure it names exist.
    assert "QUIESCE_CGROUPS=off" in ROOT.joinpath("runtime/proc/cgroups.py").read_text()
    assert "processes" in ROOT.joinpath("runtime/clients/ops/render.py").read_text()
    assert "QUIESCE_LANDLOCK_ABI" in ROOT.joinpath("host/sandbox/landlock.py").read_text()
