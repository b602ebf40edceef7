from django.contrib.auth import views as auth_views
from django.urls import path

from . import actions, calibration_views, model_import, views
from . import auth_views as accounts
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
    path("accounts/signup/", accounts.signup, name="signup"),
    path("accounts/password_reset/", accounts.PasswordResetView.as_view(), name="password_reset"),
    path(
        "accounts/password_reset/done/",
        accounts.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "accounts/reset/<uidb64>/<token>/",
        accounts.PasswordResetConfirmView.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "accounts/reset/done/",
        accounts.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("accounts/token/", views.api_token, name="api-token"),
    path("scenarios/", views.scenario_list, name="scenario-list"),
    path("scenarios/new/", views.scenario_create, name="scenario-create"),
    path("scenarios/<int:pk>/", views.scenario_detail, name="scenario-detail"),
    path("scenarios/<int:pk>/edit/", views.scenario_edit, name="scenario-edit"),
    path("scenarios/<int:pk>/run/", views.scenario_run, name="scenario-run"),
    path("scenarios/<int:pk>/share/", actions.scenario_share, name="scenario-share"),
    path("scenarios/<int:pk>/clone/", actions.scenario_clone, name="scenario-clone"),
    path("scenarios/<int:pk>/archive/", actions.scenario_archive, name="scenario-archive"),
    path("scenarios/<int:pk>/delete/", actions.scenario_delete, name="scenario-delete"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/rerun/", actions.run_rerun, name="run-rerun"),
    path("runs/<int:pk>/progress/", views.run_progress, name="run-progress"),
    path("runs/<int:pk>/export.csv", views.run_export_csv, name="run-export-csv"),
    path("runs/<int:pk>/export.xlsx", views.run_export_xlsx, name="run-export-xlsx"),
    path("runs/<int:pk>/deploy/", views.run_deploy, name="run-deploy"),
    path("runs/<int:pk>/share/", views.share_create, name="share-create"),
    path("share-links/<uuid:link_id>/revoke/", views.share_revoke, name="share-revoke"),
    path("compare/", views.compare, name="compare"),
    path("calibration/", calibration_views.calibration, name="calibration"),
    path("models/", model_import.models_page, name="models"),
    path("s/<str:token>/", views.shared_view, name="shared"),
    path("s/<str:token>/export.csv", views.shared_export, {"fmt": "csv"}, name="shared-csv"),
    path("s/<str:token>/export.xlsx", views.shared_export, {"fmt": "xlsx"}, name="shared-xlsx"),
]
