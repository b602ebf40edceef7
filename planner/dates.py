"""ISO dates and date-times typed by users (filters, link expiries), read as UTC moments."""

from __future__ import annotations

import datetime as dt

from django.utils.dateparse import parse_date, parse_datetime


def parse_moment(value: str, *, end_of_day: bool = False) -> dt.datetime | None:
    """A date-time (UTC when naive), or a bare date taken at the start of that day (or its
    end, for expiries); None when the text is neither, or names no real day (2026-13-01)."""
    try:
        moment = parse_datetime(value)
        day = parse_date(value) if moment is None else None
    except ValueError:  # well formed but not a real date or time
        return None
    if moment is None:
        if day is None:
            return None
        moment = dt.datetime.combine(day, dt.time.max if end_of_day else dt.time.min)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment
