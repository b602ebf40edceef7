"""Sign-in, sign-up and password reset, and throttling for every authentication path (the
sign-in page, the admin's sign-in, API token regeneration, sign-up, password reset): failures
are counted per (address, username) pair with a progressive delay.

Why the pair: a count per address alone locks out everyone behind one NAT address, and a count
per username alone lets anyone lock a named account. The pair's delay doubles with each failure
past the allowance (``LOGIN_DELAY_SECONDS`` x 2^k, at most ``LOGIN_LOCKOUT_SECONDS``); a much
larger per-address ceiling (``LOGIN_FAILURES_PER_ADDRESS``) stops one address from spraying
passwords over many usernames. Counts live in the cache (Redis when configured, so every web
worker sees the same count; config.cache falls back to process memory while Redis is down).
"""

from __future__ import annotations

import functools
import hashlib
import time

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import PasswordResetForm, SetPasswordForm, UserCreationForm
from django.core.cache import cache
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse_lazy

from planner.accessible import AccessibleErrorsMixin


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _address(request) -> str:
    return request.META.get("REMOTE_ADDR", "unknown")


def _pair_key(request, username: str) -> str:
    return f"login-fail:pair:{_digest(_address(request) + '|' + username.strip().lower())}"


def _address_key(request) -> str:
    return f"login-fail:ip:{_digest(_address(request))}"


def _delay_s(failures: int) -> int:
    """Seconds to wait after ``failures`` failures: none within the allowance, then doubling."""
    over = failures - settings.LOGIN_FAILURES_ALLOWED
    if over < 0:
        return 0
    return min(settings.LOGIN_LOCKOUT_SECONDS, settings.LOGIN_DELAY_SECONDS * 2 ** min(over, 30))


def retry_after_s(request, username: str) -> int:
    """Seconds before this address may try this username again (0: now)."""
    keys = [f"{_pair_key(request, username)}:until", f"{_address_key(request)}:until"]
    until = max(cache.get_many(keys).values(), default=0)
    return max(0, int(until - time.time() + 0.999))


def _count(key: str, delay_s) -> None:
    """Count one failure atomically (incr), then set when the next attempt may come."""
    window = settings.LOGIN_LOCKOUT_SECONDS
    cache.add(key, 0, window)
    try:
        failures = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, window)
        failures = 1
    if wait := delay_s(failures):
        cache.set(f"{key}:until", time.time() + wait, window)


def record_failure(request, username: str) -> None:
    _count(_pair_key(request, username), _delay_s)
    ceiling = settings.LOGIN_FAILURES_PER_ADDRESS
    _count(_address_key(request), lambda n: settings.LOGIN_LOCKOUT_SECONDS if n >= ceiling else 0)


def record_success(request, username: str) -> None:
    cache.delete(_pair_key(request, username))


def _refusal(request, seconds: int, template: str | None, context: dict) -> HttpResponse:
    context = context | {"throttled": True, "lockout_minutes": max(1, (seconds + 59) // 60)}
    if template:
        body = render_to_string(template, context, request=request)
    else:
        body = f"Too many failed attempts; try again in {seconds} seconds.\n"
    response = HttpResponse(body, status=429)
    response["Retry-After"] = str(max(1, seconds))
    return response


def throttled_sign_in(view, template: str | None = None):
    """Wrap a sign-in view (POST username/password; success is a redirect): refuse with 429
    and Retry-After while the pair waits, count each failed POST, reset on success."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        username = (request.POST.get("username") or "")[:150]
        wait = retry_after_s(request, username)
        if wait:
            from django.contrib.auth.forms import AuthenticationForm

            return _refusal(request, wait, template, {"form": AuthenticationForm(request)})
        response = view(request, *args, **kwargs)
        if response.status_code in (301, 302, 303):
            record_success(request, username)
        else:
            record_failure(request, username)
        return response

    wrapper.throttled = True  # tests walk the URL conf for credential views without this
    return wrapper


def throttled_requests(view, bucket: str, per_hour: int = 10):
    """Wrap a view that mails or sets credentials (password reset, its confirmation, sign-up):
    at most ``per_hour`` POSTs per address per hour, then 429 with Retry-After."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        if _count_this_hour(f"account-post:{bucket}:{_address_key(request)}") > per_hour:
            return _refusal(request, 3600, None, {})
        return view(request, *args, **kwargs)

    wrapper.throttled = True
    return wrapper


class ThrottledLoginView(auth_views.LoginView):
    template_name = "registration/login.html"

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {"allow_signup": settings.ALLOW_SIGNUP}

    @classmethod
    def as_view(cls, **initkwargs):
        return throttled_sign_in(super().as_view(**initkwargs), cls.template_name)


def _count_this_hour(key: str) -> int:
    """One more use under ``key`` in an hour-long window; returns the count so far."""
    cache.add(key, 0, 3600)
    try:
        return cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, 3600)
        return 1


def rate_limited(bucket: str, per_hour_setting: str):
    """Per-user rate limit for account actions that mint credentials (API token regeneration)."""

    def decorator(view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.method != "POST" or not request.user.is_authenticated:
                return view(request, *args, **kwargs)
            used = _count_this_hour(f"account-rate:{bucket}:{request.user.pk}")
            if used > getattr(settings, per_hour_setting):
                return _refusal(request, 3600, None, {})
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


# --------------------------------------------------------------------------- sign-up


class SignupForm(AccessibleErrorsMixin, UserCreationForm):
    """Username, e-mail (for password resets) and the password twice."""

    email = forms.EmailField(
        label="E-mail", help_text="Used only to send you a password-reset link."
    )

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")

    def clean_email(self) -> str:
        email = self.cleaned_data["email"].strip()
        if get_user_model().objects.filter(email__iexact=email).exists():
            raise forms.ValidationError("an account with this e-mail already exists")
        return email


def _signup(request):
    """Create an account and sign in; 404 when sign-up is off (``ALLOW_SIGNUP``)."""
    if not settings.ALLOW_SIGNUP:
        raise Http404("Sign-up is off on this server: ask an administrator for an account.")
    if request.user.is_authenticated:
        return redirect("planner:scenario-list")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"Welcome, {user.get_username()}: your account is ready.")
        return redirect("planner:scenario-list")
    status = 400 if request.method == "POST" else 200
    return render(request, "registration/signup.html", {"form": form}, status=status)


class _ResetForm(AccessibleErrorsMixin, PasswordResetForm):
    pass


class _SetPasswordForm(AccessibleErrorsMixin, SetPasswordForm):
    pass


class PasswordResetView(auth_views.PasswordResetView):
    @classmethod
    def as_view(cls, **initkwargs):
        return throttled_requests(super().as_view(**initkwargs), "password-reset")

    form_class = _ResetForm
    template_name = "registration/password_reset_form.html"
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"
    success_url = reverse_lazy("planner:password_reset_done")


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    @classmethod
    def as_view(cls, **initkwargs):
        return throttled_requests(super().as_view(**initkwargs), "password-set")

    template_name = "registration/password_reset_confirm.html"
    form_class = _SetPasswordForm
    success_url = reverse_lazy("planner:password_reset_complete")


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "registration/password_reset_done.html"


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "registration/password_reset_complete.html"


signup = throttled_requests(_signup, "signup")
