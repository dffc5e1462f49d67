"""Structured log lines on stderr: one JSON object per line, never on stdout."""

from __future__ import annotations

import logging
import os
import sys
import time

import msgspec

_encoder = msgspec.json.Encoder()
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class JsonLineFormatter(logging.Formatter):
    def __init__(self, process_name: str) -> None:
        super().__init__()
        self._process = process_name

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "proc": self._process,
            "pid": record.process,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _encoder.encode(line).decode()


def setup_logging(process_name: str) -> None:
    level = os.environ.get("QUIESCE_LOG_LEVEL", "INFO").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLineFormatter(process_name))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    logging.Formatter.converter = time.gmtime
    if level not in LEVELS:
        root.setLevel(logging.INFO)
        logging.getLogger(__name__).warning(
            "QUIESCE_LOG_LEVEL=%s is not one of %s: logging at INFO", level, ", ".join(LEVELS))
        return
    root.setLevel(level)
