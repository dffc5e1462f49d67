"""What ``/sessions`` shows: the sessions the daemon lists, of this workspace unless all
are asked for (pure: no I/O, clock or state)."""

from __future__ import annotations

from rich.text import Text

from protocol.messages.client import SessionInfo


def session_lines(sessions: tuple[SessionInfo, ...], current: str | None,
                  workspace: str | None = None) -> list[Text]:
    """``/sessions``: the sessions of ``workspace`` only (``None``: of every workspace),
    saying how many others there are; an unreadable log whose workspace is unknown is
    listed with every workspace's."""
    shown = [s for s in sessions if workspace is None or s.workspace in (workspace, "")]
    others = len(sessions) - len(shown)
    title = ("sessions:" if workspace is None
             else f"sessions in {workspace}:")
    lines = [Text(title, style="bold")]
    if not shown:
        lines.append(Text("  none", style="dim"))
    for s in shown:
        flags = [f for f, on in (("current", s.session_id == current),
                                 ("not loaded", not s.loaded),
                                 ("interrupted", s.interrupted)) if on]
        lines.append(Text.assemble((f"  {s.session_id}", "bold"),
                                   f"  {s.workspace or '(workspace unknown)'}  "
                                   f"{s.permission_mode or ''}".rstrip(),
                                   (f"  ({', '.join(flags)})" if flags else "", "dim")))
        if s.error is not None:  # /load would fail: say so before the user tries
            lines.append(Text(f"    log unreadable: {s.error}", style="red"))
    if others:
        lines.append(Text(f"  ({others} in other workspaces: /sessions all lists them)",
                          style="dim"))
    return lines
