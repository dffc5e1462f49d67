"""The host's tools: each a ``ToolSpec`` naming its argument type, stop class and body."""

from __future__ import annotations

from host.tools import bash, edit, glob, grep, images, read, write
from host.tools.context import HostToolConfig, ToolContext, ToolInputError, ToolSpec
from protocol.toolclass import TOOL_CLASSES
from protocol.tools import (
    BashArgs,
    EditArgs,
    GenerateImagesArgs,
    GlobArgs,
    GrepArgs,
    ReadArgs,
    WriteArgs,
)

__all__ = ["TOOLS", "HostToolConfig", "ToolContext", "ToolInputError", "ToolSpec"]


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec for spec in (
        ToolSpec("Read", ReadArgs, TOOL_CLASSES["Read"], read.run, inline=read.run_inline),
        ToolSpec("Glob", GlobArgs, TOOL_CLASSES["Glob"], glob.run, search=True),
        ToolSpec("Grep", GrepArgs, TOOL_CLASSES["Grep"], grep.run, search=True),
        ToolSpec("Write", WriteArgs, TOOL_CLASSES["Write"], write.run),
        ToolSpec("Edit", EditArgs, TOOL_CLASSES["Edit"], edit.run),
        ToolSpec("Bash", BashArgs, TOOL_CLASSES["Bash"], bash.run),
        ToolSpec("GenerateImages", GenerateImagesArgs, TOOL_CLASSES["GenerateImages"], images.run),
    )
}
