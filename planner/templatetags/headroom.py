"""Number formatting for capacity reviews: readable on a projector, exact enough to check."""

from __future__ import annotations

import math

from django import template

register = template.Library()


def _number(value):
    if isinstance(value, bool) or value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@register.filter
def num(value, digits=4):
    """1234567 -> 1,234,567; 49.9427 -> 49.94; 0.16916 -> 0.1692; text passes through."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = _number(value)
    if number is None:
        return "—" if value in (None, "") or not isinstance(value, str) else value
    if number == 0:
        return "0"
    if abs(number) >= 10 ** int(digits) or number == int(number) and abs(number) >= 1:
        return f"{number:,.0f}"
    text = f"{number:.{int(digits)}g}"
    if "e" in text:
        return f"{number:.{int(digits)}e}"
    return text


@register.filter
def usd(value):
    """$19,535 for big amounts, $26.76 below 1,000, $0.0123 below 0.1."""
    number = _number(value)
    if number is None:
        return "—"
    if abs(number) >= 1000:
        return f"${number:,.0f}"
    if abs(number) >= 0.1 or number == 0:
        return f"${number:,.2f}"
    return f"${number:.3g}"


@register.filter
def pct(value):
    number = _number(value)
    return "—" if number is None else f"{100 * number:.0f}%"


@register.filter
def sortkey(value):
    """A machine-readable value for client-side sorting (empty sorts last)."""
    if isinstance(value, bool):
        return int(value)
    number = _number(value)
    if number is None:
        return "" if not isinstance(value, str) else value
    return repr(number)
