"""Keep share-link tokens out of logs: a token in a log line is as good as the link itself."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

SHARE_PATH = re.compile(r"/s/+[A-Za-z0-9_\-]{8,}")
REDACTED = "/s/[redacted]"


def redact(text: str) -> str:
    """Redact share paths as the router sees them: percent-decoded (``/s/%71...`` is
    ``/s/q...``), and with any run of slashes after ``/s``."""
    decoded = unquote(text)
    if SHARE_PATH.search(decoded):
        return SHARE_PATH.sub(REDACTED, decoded)
    return text


class RedactShareTokens(logging.Filter):
    """Rewrites /s/<token> in a record's message and arguments (runserver, django.request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {
                k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()
            }
        request = getattr(record, "request", None)
        path = getattr(request, "path", None) if request is not None else None
        if isinstance(path, str) and redact(path) != path:
            record.request = None  # django.request attaches the request; drop it
        return True
