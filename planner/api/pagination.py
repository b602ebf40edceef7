"""limit/offset paging with bounds: a page is at most ``max_limit`` rows, and an offset past
what a database can count is a 400 naming ``offset``, not a database error."""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**31 - 1  # far past any listing; PostgreSQL's OFFSET is a bigint


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000

    def get_offset(self, request):
        raw = request.query_params.get(self.offset_query_param)
        if raw is not None and raw.strip().isdigit() and int(raw) > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"at most {MAX_OFFSET:,}"]})
        return super().get_offset(request)


class ResultsPagination(BoundedLimitOffsetPagination):
    """A run's candidate results: 100 a page by default, 1,000 at most (a few MB)."""

    default_limit = 100
