"""Number formatting for capacity reviews: readable on a projector, exact enough to check."""

from __future__ import annotations

from django import template

from sizing.plausibility import finite_number

register = template.Library()


@register.filter
def num(value, digits=4):
    """1234567 -> 1,234,567; 49.9427 -> 49.94; 0.16916 -> 0.1692; text passes through."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    number = finite_number(value)
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


SI_STEPS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def _three_digits(number: float) -> str:
    """3 significant digits without float noise: 10.93 -> 10.9, 980.4 -> 980, 1.0 -> 1."""
    return f"{float(f'{number:.3g}'):,.15g}"


@register.filter
def si(value):
    """10,930,000,000 -> 10.9 B; 24,051 -> 24.1 k; 512 -> 512 (for "10.9 B tokens/month")."""
    number = finite_number(value)
    if number is None:
        return "—"
    rounded = float(f"{number:.3g}")  # round first, so 999,999 is "1 M", not "1,000 k"
    for scale, suffix in SI_STEPS:
        if abs(rounded) >= scale:
            return f"{_three_digits(rounded / scale)} {suffix}"
    return _three_digits(number) if number != int(number) else f"{number:,.0f}"


@register.filter
def count(value, noun="replica"):
    """1 -> "1 replica", 407952 -> "407,952 replicas" (with |count:"GPU": "407,952 GPUs")."""
    number = finite_number(value)
    if number is None:
        return "—"
    whole = number == int(number)
    text = f"{number:,.0f}" if whole else f"{number:,.2f}"
    return f"{text} {noun if whole and abs(number) == 1 else plural(noun)}"


def plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    return noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"


@register.filter
def usd(value):
    """$980 M above ten million, $19,535 for big amounts, $26.76 below 1,000, $0.0123 below 0.1."""
    number = finite_number(value)
    if number is None:
        return "—"
    if abs(number) >= 1e7:
        return f"${si(number)}"
    if abs(number) >= 1000:
        return f"${number:,.0f}"
    if abs(number) >= 0.1 or number == 0:
        return f"${number:,.2f}"
    return f"${number:.3g}"


@register.filter
def pct(value):
    number = finite_number(value)
    return "—" if number is None else f"{100 * number:.0f}%"


@register.filter
def sortkey(value):
    """A machine-readable value for client-side sorting (empty sorts last)."""
    if isinstance(value, bool):
        return int(value)
    number = finite_number(value)
    if number is None:
        return "" if not isinstance(value, str) else value
    return repr(number)
