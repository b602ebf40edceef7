"""Sign-in with throttling (after N failures for an address or a username, wait), sign-up and
password reset.

Counts live in the cache (Redis when configured), so every web worker sees the same count.
"""

from __future__ import annotations

import hashlib

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

    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {"allow_signup": settings.ALLOW_SIGNUP}

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


def signup(request):
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
    form_class = _ResetForm
    template_name = "registration/password_reset_form.html"
    email_template_name = "registration/password_reset_email.txt"
    subject_template_name = "registration/password_reset_subject.txt"
    success_url = reverse_lazy("planner:password_reset_done")


class PasswordResetConfirmView(auth_views.PasswordResetConfirmView):
    template_name = "registration/password_reset_confirm.html"
    form_class = _SetPasswordForm
    success_url = reverse_lazy("planner:password_reset_complete")


class PasswordResetDoneView(auth_views.PasswordResetDoneView):
    template_name = "registration/password_reset_done.html"


class PasswordResetCompleteView(auth_views.PasswordResetCompleteView):
    template_name = "registration/password_reset_complete.html"
