from django.contrib.auth import views as auth_views
from django.urls import path

from . import views
from .auth_views import ThrottledLoginView

app_name = "planner"
urlpatterns = [
    path("", views.home, name="home"),
    path(
        "accounts/login/",
        ThrottledLoginView.as_view(),
        name="login",
    ),
    path(
        "accounts/logout/", auth_views.LogoutView.as_view(next_page="planner:home"), name="logout"
    ),
    path("accounts/token/", views.api_token, name="api-token"),
    path("scenarios/", views.scenario_list, name="scenario-list"),
    path("scenarios/new/", views.scenario_create, name="scenario-create"),
    path("scenarios/<int:pk>/", views.scenario_detail, name="scenario-detail"),
    path("scenarios/<int:pk>/edit/", views.scenario_edit, name="scenario-edit"),
    path("scenarios/<int:pk>/run/", views.scenario_run, name="scenario-run"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/progress/", views.run_progress, name="run-progress"),
    path("runs/<int:pk>/export.csv", views.run_export_csv, name="run-export-csv"),
    path("runs/<int:pk>/export.xlsx", views.run_export_xlsx, name="run-export-xlsx"),
    path("runs/<int:pk>/share/", views.share_create, name="share-create"),
    path("share-links/<uuid:link_id>/revoke/", views.share_revoke, name="share-revoke"),
    path("compare/", views.compare, name="compare"),
    path("calibration/", views.calibration, name="calibration"),
    path("s/<str:token>/", views.shared_view, name="shared"),
    path("s/<str:token>/export.csv", views.shared_export, {"fmt": "csv"}, name="shared-csv"),
    path("s/<str:token>/export.xlsx", views.shared_export, {"fmt": "xlsx"}, name="shared-xlsx"),
]
