from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from planner.auth_views import throttled_sign_in


def healthz(request):
    """Liveness for compose healthchecks: the process answers and the database is reachable."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


urlpatterns = [
    # the admin's sign-in counts failures like /accounts/login/ (matched before admin.site.urls)
    path(
        "admin/login/",
        throttled_sign_in(admin.site.login, "registration/login.html"),
        name="admin-login-throttled",
    ),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("api/v1/", include("planner.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include("planner.urls")),
]
