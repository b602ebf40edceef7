from django.urls import path
from rest_framework.routers import DefaultRouter

from planner.api import views

router = DefaultRouter()
router.register("scenarios", views.ScenarioViewSet, basename="scenario")
router.register("runs", views.RunViewSet, basename="run")
router.register("gpus", views.GpuViewSet, basename="gpu")
router.register("models", views.ModelViewSet, basename="model")
router.register("price-sheets", views.PriceSheetViewSet, basename="price-sheet")
router.register("calibration-profiles", views.CalibrationProfileViewSet, basename="calibration")
router.register("share-links", views.ShareLinkViewSet, basename="share-link")

# The exports also answer without the trailing slash: runs/{id}/export.csv is a file name.
exports = [
    path("runs/<int:pk>/export.csv", views.RunViewSet.as_view({"get": "export_csv"})),
    path("runs/<int:pk>/export.xlsx", views.RunViewSet.as_view({"get": "export_xlsx"})),
]
urlpatterns = exports + router.urls
