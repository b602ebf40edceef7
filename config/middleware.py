"""Request guards that run before any view, and the Permissions-Policy header.

- A body is refused on its declared Content-Length (413) before a byte is read or spooled to
  disk; a chunked body is refused with 411 instead of being read as empty.
- A NUL character in a query parameter is a 400 naming the parameter (PostgreSQL refuses NUL
  in text, which would otherwise surface as a 500 from whichever view filters on it).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse, JsonResponse

PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "camera",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "payment",
        "usb",
        "browsing-topics",
    )
)


def refuse(request, status: int, message: str, field: str | None = None) -> HttpResponse:
    """The API's error shape under /api/, plain text elsewhere."""
    if request.path.startswith("/api/"):
        errors = {field: [message]} if field else {}
        text = f"invalid input: {field}: {message}" if field else message
        return JsonResponse({"message": text, "errors": errors}, status=status)
    text = f"{field}: {message}\n" if field else f"{message}\n"
    return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")


def _declared_length(request) -> int | None:
    raw = request.META.get("CONTENT_LENGTH") or ""
    try:
        return int(raw)
    except ValueError:
        return None


class RequestGuardMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refused = self._refusal(request)
        if refused is not None:
            return refused
        response = self.get_response(request)
        response.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response

    def _refusal(self, request) -> HttpResponse | None:
        limit = settings.REQUEST_MAX_BYTES
        length = _declared_length(request)
        if length is not None and length > limit:
            return refuse(request, 413, f"request body too large: the limit is {limit:,} bytes")
        # with Transfer-Encoding a Content-Length means nothing (RFC 9112), and Django would
        # read the body as empty: refuse it rather than act on an empty body
        if "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
            return refuse(request, 411, "send the body with a Content-Length (chunked is refused)")
        for name, values in request.GET.lists():
            if "\x00" in name:
                return refuse(request, 400, "NUL is not allowed in a parameter name", "query")
            if any("\x00" in value for value in values):
                return refuse(request, 400, "NUL characters are not allowed", name)
        return None
