"""Sign-in with throttling: after N failures for an address or a username, wait.

Counts live in the cache (Redis when configured), so every web worker sees the same count.
"""

from __future__ import annotations

import hashlib

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpResponse
from django.template.loader import render_to_string


def _keys(request) -> list[str]:
    address = request.META.get("REMOTE_ADDR", "unknown")
    username = (request.POST.get("username") or "").strip().lower()
    keys = [f"login-fail:ip:{address}"]
    if username:
        digest = hashlib.sha256(username.encode()).hexdigest()[:32]
        keys.append(f"login-fail:user:{digest}")
    return keys


def _blocked(request) -> bool:
    limit = settings.LOGIN_FAILURES_ALLOWED
    return any((cache.get(key) or 0) >= limit for key in _keys(request))


def _record_failure(request) -> None:
    for key in _keys(request):
        cache.add(key, 0, settings.LOGIN_LOCKOUT_SECONDS)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, settings.LOGIN_LOCKOUT_SECONDS)


class ThrottledLoginView(auth_views.LoginView):
    template_name = "registration/login.html"

    def post(self, request, *args, **kwargs):
        if _blocked(request):
            minutes = max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
            body = render_to_string(
                "registration/login.html",
                {"form": self.get_form(), "throttled": True, "lockout_minutes": minutes},
                request=request,
            )
            response = HttpResponse(body, status=429)
            response["Retry-After"] = str(settings.LOGIN_LOCKOUT_SECONDS)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        _record_failure(self.request)
        return super().form_invalid(form)

    def form_valid(self, form):
        for key in _keys(self.request):
            if key.startswith("login-fail:user:"):
                cache.delete(key)
        return super().form_valid(form)
