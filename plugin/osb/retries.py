"""Retries of the OpenSandbox client's idempotent calls (lifecycle GET/DELETE, renew, execd GETs, file and
directory deletes): 429/502/503/504, resets and cut-short answers, honouring Retry-After up to
RETRY_AFTER_MAX, within the configured http_timeout. A command, an upload or any other POST is never
retried (the callers decide: ``retry=`` of ``OpenSandbox.call`` / ``Execd.call``).

Standard library only, Python >= 3.10.
"""

from __future__ import annotations

import time

from .transport import HttpError, NetError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import datetime
    from typing import Callable, TypeVar

    T = TypeVar("T")

RETRY_STATUSES = (429, 502, 503, 504)  # answers a proxy or an overloaded server gives for a moment
RETRY_WAITS = (0.2, 0.6)  # waits before the 2nd and 3rd try of an idempotent call
RETRY_AFTER_MAX = 5.0  # longest Retry-After honoured; a longer one ends the call at once


def retry_after_seconds(value: object) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    text = str(value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    when = http_date(text)
    if when is None:
        return None
    import datetime

    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def http_date(value: object) -> datetime.datetime | None:
    """An HTTP date (Date, Retry-After) as an aware datetime (UTC when it names no zone); None when
    absent or unreadable."""
    import datetime
    import email.utils

    try:
        when = email.utils.parsedate_to_datetime(str(value or "").strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.timezone.utc)


def retry_wait(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before trying an idempotent call again, or None when it must not be retried.

    Retried: 429/502/503/504 (a Retry-After is honoured up to RETRY_AFTER_MAX; a longer one is
    the answer), a connection reset (a proxy or keep-alive race) and an answer cut short.
    Not retried: timeouts (the time is spent already), refusals and DNS errors (configuration),
    and every other status."""
    if attempt >= len(RETRY_WAITS):
        return None
    if isinstance(exc, HttpError):
        if exc.status not in RETRY_STATUSES:
            return None
        after = retry_after_seconds(exc.headers.get("retry-after"))
        if after is not None:
            return None if after > RETRY_AFTER_MAX else max(after, RETRY_WAITS[attempt])
        return RETRY_WAITS[attempt]
    if isinstance(exc, NetError) and exc.kind in ("reset", "incomplete"):
        return RETRY_WAITS[attempt]
    return None


def with_retries(fn: Callable[[], T], budget: float) -> T:
    """Run ``fn`` (an idempotent call); retry it as retry_wait() says. No new try starts once the
    call has taken longer than ``budget`` seconds (the configured http_timeout)."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return fn()
        except (HttpError, NetError) as exc:
            wait = retry_wait(exc, attempt)
            if wait is None or time.monotonic() - started > budget:
                raise
            attempt += 1
            time.sleep(wait)
