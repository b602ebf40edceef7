"""Keep share-link tokens out of logs: a token in a log line is as good as the link itself."""

from __future__ import annotations

import logging
import re

SHARE_PATH = re.compile(r"/s/[A-Za-z0-9_\-]{8,}")
REDACTED = "/s/[redacted]"


def redact(text: str) -> str:
    return SHARE_PATH.sub(REDACTED, text)


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
        if request is not None and hasattr(request, "path") and SHARE_PATH.search(request.path):
            record.request = None  # django.request attaches the request; drop it
        return True
