"""One error shape everywhere: {"message": ..., "errors": {field: [...]}}; never a 500."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

log = logging.getLogger(__name__)


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail -> {"traffic.prompt_tokens.p95": ["..."]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "non_field_errors" if key in ("non_field_errors", "__all__") else str(key)
            path = f"{prefix}.{name}" if prefix and name != "non_field_errors" else (prefix or name)
            for k, v in flatten_errors(value, path).items():
                out.setdefault(k, []).extend(v)
    elif isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            out[prefix or "non_field_errors"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                for k, v in flatten_errors(item, f"{prefix}[{index}]").items():
                    out.setdefault(k, []).extend(v)
    else:
        out[prefix or "non_field_errors"] = [str(detail)]
    return out


def error_response(message: str, errors: dict | None = None, code: int = 400, headers=None):
    return Response({"message": message, "errors": errors or {}}, status=code, headers=headers)


def _summary(errors: dict[str, list[str]]) -> str:
    first = next(iter(errors.items()), None)
    if first is None:
        return "invalid input"
    field, messages = first
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid input: {field}: {messages[0]}{more}"


def exception_handler(exc, context):
    if isinstance(exc, DjangoValidationError):
        detail = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(detail)
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(f"request body too large: the limit is {limit:,} bytes", code=413)
    if isinstance(exc, SuspiciousOperation):
        return error_response(f"bad request: {exc}", code=400)
    if isinstance(exc, Http404):
        return error_response("not found", code=404)
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_handler(exc, context)
    if response is None:  # an unexpected error: log it, answer in our shape, never a bare 500
        log.exception("unhandled API error", exc_info=exc)
        return error_response("internal error; it has been logged", code=500)
    if isinstance(exc, exceptions.ValidationError):
        errors = flatten_errors(exc.detail)
        return error_response(_summary(errors), errors, response.status_code, response.headers)
    detail = getattr(exc, "detail", None)
    message = str(detail) if detail is not None else response.reason_phrase
    headers = {
        k: v
        for k, v in response.headers.items()
        if k in ("Retry-After", "WWW-Authenticate", "Allow")
    }
    if response.status_code == status.HTTP_404_NOT_FOUND:
        message = "not found"
    return error_response(message, code=response.status_code, headers=headers)
