"""Structured logs: one JSON object per line on stderr (journald keeps each line as one event).

Messages name what happened; record text never goes into a log line, only ids, hashes,
lengths and timings.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator

from aiohttp.http_exceptions import HttpProcessingError

# LogRecord attributes that are plumbing, not event fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        event.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, default=str, ensure_ascii=False)


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would carry URLs; our own metrics and events cover requests.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


# -- requests aiohttp could not parse

ReportLater = Callable[[float, Callable[[], None]], object]
"""Run a callback after so many seconds (the event loop's `call_later`)."""


class RejectedRequests(logging.Filter):
    """On aiohttp's `aiohttp.server` logger, where its low-level server reports a request it
    could not parse: as an ERROR (a DEBUG for a first request that is no HTTP at all) with a
    traceback whose message quotes the raw bytes, before any access check, so that any peer
    could fill the journal. Each becomes one WARNING line, `event=request_rejected`, naming the
    parser's error and status but none of the bytes, at most `per_second` lines a second; the
    others are counted and the count logged (`event=request_rejections_suppressed`) when the
    second is over. Other records of that logger pass if they reach `threshold`."""

    def __init__(self, per_second: int, threshold: int, report_later: ReportLater) -> None:
        super().__init__()
        self.per_second = per_second
        self.threshold = threshold
        self._report_later = report_later
        self._window_end = float("-inf")
        self._logged = 0
        self._suppressed = 0
        self._report_pending = False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError):
            return record.levelno >= self.threshold
        if logging.WARNING < self.threshold:
            return False
        now = time.monotonic()
        if now >= self._window_end:
            self._window_end, self._logged = now + 1.0, 0
        if self._logged >= self.per_second:
            self._suppressed += 1
            if not self._report_pending:
                self._report_pending = True
                self._report_later(self._window_end - now, self.report)
            return False
        self._logged += 1
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        error = type(exc).__name__
        record.msg = "rejected a malformed request: %d %s (its bytes are not logged)"
        record.args = (exc.code, error)
        record.exc_info = record.exc_text = record.stack_info = None
        record.event, record.status, record.error = "request_rejected", exc.code, error
        return True

    def report(self) -> None:
        """Log how many rejections went unlogged since the last such line (if any did)."""
        self._report_pending = False
        if self._suppressed:
            count, self._suppressed = self._suppressed, 0
            logging.getLogger("recalld.control").warning(
                "%d more malformed requests were rejected but not logged (at most %d lines a second)",
                count,
                self.per_second,
                extra={"event": "request_rejections_suppressed", "suppressed": count},
            )


@contextlib.contextmanager
def rejected_requests_logged(per_second: int, report_later: ReportLater) -> Iterator[None]:
    """Install `RejectedRequests` for the life of a control server. The logger is opened to
    DEBUG so that aiohttp's DEBUG reports of non-HTTP traffic reach the filter too (a line each
    like any other rejection); the filter holds everything else to the configured level."""
    logger = logging.getLogger("aiohttp.server")
    rejections = RejectedRequests(per_second, logger.getEffectiveLevel(), report_later)
    level = logger.level
    logger.addFilter(rejections)
    logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        logger.setLevel(level)
        logger.removeFilter(rejections)
        rejections.report()
