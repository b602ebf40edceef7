"""A Redis cache that keeps the site answering while Redis is down.

The cache holds only throttling counts (API rate throttles, sign-in delays), and every request
reads it before any view, so an outage must not become a 500 everywhere. While Redis refuses,
each operation goes to this process's memory instead (counts stay per-process until Redis is
back) with one logged warning per outage; Redis is tried again after ``retry_after_s``.
"""

from __future__ import annotations

import logging
import threading
import time

import redis.exceptions
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache

log = logging.getLogger(__name__)

REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
OPERATIONS = (
    "add",
    "get",
    "set",
    "touch",
    "delete",
    "get_many",
    "has_key",
    "incr",
    "set_many",
    "delete_many",
    "clear",
)


class ResilientRedisCache(RedisCache):
    def __init__(self, server, params):
        options = dict(params.get("OPTIONS") or {})
        self.retry_after_s = float(options.pop("retry_after_s", 5))
        options.setdefault("socket_connect_timeout", 1)
        options.setdefault("socket_timeout", 1)
        super().__init__(server, params | {"OPTIONS": options})
        self._local = LocMemCache(f"fallback-{id(self)}", params | {"OPTIONS": {}})
        self._down_until = 0.0
        self._lock = threading.Lock()

    def _went_down(self, exc: Exception) -> None:
        with self._lock:
            first = self._down_until == 0.0
            self._down_until = time.monotonic() + self.retry_after_s
        if first:
            log.warning("cache Redis unavailable, using process memory until it is back: %s", exc)

    def _came_back(self) -> None:
        if self._down_until:
            with self._lock:
                self._down_until = 0.0
            log.warning("cache Redis is back")

    @property
    def is_down(self) -> bool:
        return self._down_until > 0.0


def _resilient(name: str):
    redis_operation = getattr(RedisCache, name)
    local_operation = getattr(LocMemCache, name)

    def operation(self, *args, **kwargs):
        if time.monotonic() >= self._down_until:
            try:
                result = redis_operation(self, *args, **kwargs)
            except REDIS_DOWN as exc:
                self._went_down(exc)
            else:
                self._came_back()
                return result
        return local_operation(self._local, *args, **kwargs)

    operation.__name__ = name
    operation.__doc__ = f"{name} on Redis, or on process memory while Redis is down."
    return operation


for _name in OPERATIONS:
    setattr(ResilientRedisCache, _name, _resilient(_name))
