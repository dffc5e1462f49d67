"""What the daemon's configuration file says about hooks and tool time limits.

```toml
[[hooks.pre_tool_use]]
matcher = "Bash"                 # a tool name, a regular expression over tool names, or "*"
command = ["/path/to/check", "--strict"]
timeout = 10                     # seconds (default DEFAULT_HOOK_TIMEOUT)

[[hooks.post_tool_use]]
matcher = "Write|Edit"
command = ["/path/to/lint"]

[tools.timeouts]                 # per-tool time limits, owned by the registry's TimeoutPolicy
Grep = 30
```

Only the daemon's file configures hooks: nothing of a workspace is read for them (a
cloned repository must not run commands on its own). A matcher is matched against the
whole tool name (``re.fullmatch``), so ``Bash`` matches only ``Bash``; ``*`` matches every
tool. Matching takes linear time whatever the pattern (``matcher.py``): what would need
backtracking (backreferences, lookaround) is refused. A bad regular expression, an empty
command, an unknown key or a value out of range is refused at start-up, naming the key,
as the rest of the file is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

import msgspec

from runtime.agent.hooks.matcher import Matcher, MatcherError

DEFAULT_HOOK_TIMEOUT = 60.0

HookEventName = Literal["pre_tool_use", "post_tool_use"]
_Seconds = Annotated[float, msgspec.Meta(gt=0, le=86400)]


class HookSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    matcher: Annotated[str, msgspec.Meta(min_length=1)]
    command: Annotated[tuple[Annotated[str, msgspec.Meta(min_length=1)], ...],
                       msgspec.Meta(min_length=1)]
    timeout: _Seconds = DEFAULT_HOOK_TIMEOUT
    sandbox: bool = True
    """False: this hook runs outside the sandbox (docs/sandbox.md), as the daemon's user."""


class HooksTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pre_tool_use: tuple[HookSpec, ...] = ()
    post_tool_use: tuple[HookSpec, ...] = ()


class ToolsTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    timeouts: dict[str, _Seconds] = msgspec.field(default_factory=dict)


@dataclass(frozen=True)
class Hook:
    """One configured hook: its event, its place in the configuration, what it matches."""

    event: HookEventName
    index: int
    spec: HookSpec
    pattern: Matcher | None  # None: "*"

    def matches(self, tool: str) -> bool:
        return self.pattern is None or self.pattern.fullmatch(tool)

    @property
    def label(self) -> str:
        return f"{self.event}[{self.index}]"


@dataclass(frozen=True)
class HookConfig:
    """The daemon's hooks and tool time limits, checked and compiled."""

    pre_tool_use: tuple[Hook, ...] = ()
    post_tool_use: tuple[Hook, ...] = ()
    timeouts: tuple[tuple[str, float], ...] = ()

    def matching(self, event: HookEventName, tool: str) -> list[Hook]:
        hooks = self.pre_tool_use if event == "pre_tool_use" else self.post_tool_use
        return [hook for hook in hooks if hook.matches(tool)]

    def timeout_for(self, tool: str) -> float | None:
        return dict(self.timeouts).get(tool)

    @property
    def empty(self) -> bool:
        return not (self.pre_tool_use or self.post_tool_use or self.timeouts)


class HookConfigError(ValueError):
    """A hook the configuration cannot have; the message names its key."""


def compile_hooks(hooks: HooksTable, tools: ToolsTable) -> HookConfig:
    def compiled(event: HookEventName, specs: tuple[HookSpec, ...]) -> tuple[Hook, ...]:
        out = []
        for index, spec in enumerate(specs):
            pattern = None
            if spec.matcher != "*":
                try:
                    pattern = Matcher(spec.matcher)
                except MatcherError as exc:
                    raise HookConfigError(f"hooks.{event}[{index}].matcher: {exc}") from None
            out.append(Hook(event, index, spec, pattern))
        return tuple(out)

    return HookConfig(compiled("pre_tool_use", hooks.pre_tool_use),
                      compiled("post_tool_use", hooks.post_tool_use),
                      tuple(sorted(tools.timeouts.items())))
