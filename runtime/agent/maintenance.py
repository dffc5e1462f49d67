"""The maintenance phase's compaction run to its outcome: its failures mapped in one place.

The agent enters the ``maintenance`` phase for a compaction (``session.compact``, or a
prompt arriving while the history outgrows its share of the context window) and runs it
with ``run_compaction``, shielded, to its durable ``maintenance/end``; whatever fails inside
it (the log, a bug) ends it ``failed`` with what failed. ``compaction.py`` is the job itself.
"""

from __future__ import annotations

import logging

from runtime.agent.compaction import Compaction, compact
from runtime.agent.history import ModelHistory
from runtime.agent.journal import Journal
from runtime.agent.providers.base import Provider
from runtime.agent.registry import AbortSignal
from runtime.agent.turnend import describe_failure

log = logging.getLogger(__name__)


async def run_compaction(session_id: str, job: Compaction, journal: Journal,
                         provider: Provider, history: ModelHistory,
                         signal: AbortSignal) -> None:
    """Run ``job``; a failure sets its outcome ``failed`` and its error (never raised)."""
    try:
        await compact(job, journal, provider, history, signal)
    except OSError as exc:
        log.exception("session %s: the log failed during compaction", session_id)
        job.outcome, job.error = "failed", f"the session log failed: {exc}"
    except Exception as exc:  # the maintenance's one mapping of unexpected failures
        log.exception("session %s: compaction failed", session_id)
        job.outcome, job.error = "failed", describe_failure(exc)
