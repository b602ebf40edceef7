"""The API's JSON parser: a NaN or Infinity literal is a 400 naming its field, and a document
nested deeper than anything the API takes is a 400, not a RecursionError."""

from __future__ import annotations

import json
import re

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 32  # the scenario document is 3 levels deep


class _NotJson:
    """Stands where the text had NaN, Infinity or -Infinity, so its path can be reported."""

    def __init__(self, literal: str):
        self.literal = literal


def _bad_literals(value, path: str = ""):
    if isinstance(value, _NotJson):
        yield path or "non_field_errors", value.literal
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _bad_literals(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _bad_literals(item, f"{path}[{index}]")


STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
BRACKET = re.compile(r"[\[\]{}]")


def _depth_exceeds(text: str, limit: int) -> bool:
    """Bracket depth outside strings, without parsing (the parser itself recurses)."""
    depth = 0
    for match in BRACKET.finditer(STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            return True
    return False


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = stream.read().decode(encoding)
        except UnicodeDecodeError as exc:
            raise ParseError(f"JSON parse error - not {encoding} text") from exc
        if _depth_exceeds(text, MAX_DEPTH):
            raise ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels")
        try:
            data = json.loads(text, parse_constant=_NotJson)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
        bad = dict(_bad_literals(data))
        if bad:
            raise ValidationError(
                {path: [f"{literal} is not a number JSON allows"] for path, literal in bad.items()}
            )
        return data
