"""REST API v1 (DRF). Views stay thin: selectors read, services write."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import OuterRef, Q, Subquery
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.response import Response

from fleets.measurements import MeasurementError
from fleets.models import CalibrationProfile, GpuSku, ModelArchitecture
from fleets.services import CatalogRowInUse, check_deletable
from planner import deploy, exports, scenario_io, selectors, services
from planner.api import serializers as s
from planner.api.errors import error_response
from planner.api.pagination import ResultsPagination
from planner.dates import parse_moment
from planner.models import ShareLink, SizingRun
from pricing.models import PriceSheet


class IsStaffOrReadOnly(permissions.BasePermission):
    """Catalog: every authenticated user reads; only staff writes."""

    def has_permission(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return False
        return request.method in permissions.SAFE_METHODS or request.user.is_staff


class IsOwnerForWrites(permissions.BasePermission):
    """Users a scenario is shared with may read it; only its owner changes or runs it."""

    message = "only the owner can change or run this scenario"

    def has_object_permission(self, request, view, obj):
        return request.method in permissions.SAFE_METHODS or obj.owner_id == request.user.pk


def _parse_since(value: str) -> dt.datetime:
    moment = parse_moment(value)
    if moment is None:
        raise ValidationError({"updated_since": ["use an ISO date or date-time"]})
    return moment


SCENARIO_FILTERS = [
    OpenApiParameter("updated_since", OpenApiTypes.STR, description="ISO date or date-time"),
    OpenApiParameter("owner", OpenApiTypes.STR, description="owner's username"),
    OpenApiParameter("tag", OpenApiTypes.STR, description="scenarios carrying this tag"),
    OpenApiParameter(
        "status",
        OpenApiTypes.STR,
        enum=list(SizingRun.Status.values),
        description="status of the latest run",
    ),
    OpenApiParameter("search", OpenApiTypes.STR, description="name contains"),
    OpenApiParameter(
        "archived",
        OpenApiTypes.STR,
        enum=["false", "true", "any"],
        description="archived scenarios: left out (default), only them, or both",
    ),
]
ARCHIVED = {"false": {"archived_at__isnull": True}, "true": {"archived_at__isnull": False}}


def _run_started(request, start) -> Response:
    """202 with the new run (or the saved, queued one when the workers are unavailable)."""
    workers_available = True
    try:
        run = start()
        message = "finished in-process" if run.is_finished else "queued for the workers"
    except services.WorkersUnavailable as exc:
        workers_available, message, run = False, str(exc), exc.run
    except services.RunQuotaExceeded as exc:
        errors = exc.message_dict
        return error_response(
            errors["runs"][0],
            errors,
            code=status.HTTP_429_TOO_MANY_REQUESTS,
            headers={"Retry-After": str(exc.retry_after_s)},
        )
    except DjangoValidationError as exc:  # a saved scenario the service refuses to run
        raise ValidationError(scenario_io.nest_errors(exc.message_dict)) from exc
    body = {
        "id": run.pk,
        "status": run.status,
        "workers_available": workers_available,
        "url": request.build_absolute_uri(f"/api/v1/runs/{run.pk}/"),
        "message": message,
    }
    return Response(body, status=status.HTTP_202_ACCEPTED)


@extend_schema_view(list=extend_schema(parameters=SCENARIO_FILTERS))
class ScenarioViewSet(viewsets.ModelViewSet):
    """Capacity scenarios: traffic, SLOs, candidates, pricing, API alternative, policy."""

    serializer_class = s.ScenarioSerializer
    permission_classes = [permissions.IsAuthenticated, IsOwnerForWrites]
    filter_backends = [OrderingFilter]
    ordering_fields = ["name", "updated_at", "created_at"]
    ordering = ["-updated_at"]

    def get_queryset(self):
        queryset = selectors.scenarios_visible_to(self.request.user).select_related("owner")
        params = self.request.query_params
        if since := params.get("updated_since"):
            queryset = queryset.filter(updated_at__gte=_parse_since(since))
        if owner := params.get("owner"):
            queryset = queryset.filter(owner__username=owner)
        if tag := params.get("tag"):
            queryset = selectors.with_tag(queryset, tag)
        if search := params.get("search"):
            queryset = queryset.filter(name__icontains=search)
        archived = params.get("archived", "false")
        if archived not in (*ARCHIVED, "any"):
            raise ValidationError({"archived": ["one of false, true, any"]})
        if self.action == "list" and archived in ARCHIVED:
            queryset = queryset.filter(**ARCHIVED[archived])
        if run_status := params.get("status"):
            if run_status not in SizingRun.Status.values:
                raise ValidationError({"status": [f"one of {', '.join(SizingRun.Status.values)}"]})
            latest = SizingRun.objects.filter(scenario=OuterRef("pk")).order_by("-created_at")
            queryset = queryset.annotate(latest_status=Subquery(latest.values("status")[:1]))
            queryset = queryset.filter(latest_status=run_status)
        return queryset

    @extend_schema(request=None, responses={202: s.RunStartedSerializer})
    @action(detail=True, methods=["post"])
    def run(self, request, pk=None):
        """Start a sizing run (202 with the run id; poll runs/{id}/)."""
        scenario = self.get_object()
        return _run_started(request, lambda: services.sizing_run_start(scenario=scenario))

    @extend_schema(request=None, responses={201: s.ScenarioSerializer})
    @action(detail=True, methods=["post"], permission_classes=[permissions.IsAuthenticated])
    def clone(self, request, pk=None):
        """Copy a scenario you can read (yours or shared with you) into a new one you own."""
        try:
            copy = services.scenario_clone(scenario=self.get_object(), owner=request.user)
        except DjangoValidationError as exc:
            raise ValidationError(scenario_io.nest_errors(exc.message_dict)) from exc
        return Response(s.ScenarioSerializer(copy).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.ScenarioSerializer})
    @action(detail=True, methods=["post"])
    def archive(self, request, pk=None):
        """Hide it from the lists (kept and readable; ``unarchive/`` brings it back)."""
        scenario = services.scenario_archive(scenario=self.get_object(), archived=True)
        return Response(s.ScenarioSerializer(scenario).data)

    @extend_schema(request=None, responses={200: s.ScenarioSerializer})
    @action(detail=True, methods=["post"])
    def unarchive(self, request, pk=None):
        scenario = services.scenario_archive(scenario=self.get_object(), archived=False)
        return Response(s.ScenarioSerializer(scenario).data)

    def perform_destroy(self, instance):
        services.scenario_delete(scenario=instance)

    @extend_schema(responses=s.RunListSerializer(many=True))
    @action(detail=True, methods=["get"])
    def runs(self, request, pk=None):
        """The scenario's run history, newest first."""
        scenario = self.get_object()
        page = self.paginate_queryset(scenario.runs.order_by("-created_at"))
        data = s.RunListSerializer(page, many=True).data
        return self.get_paginated_response(data)


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Sizing runs: status, progress, inputs snapshot, per-candidate results, summary."""

    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        queryset = selectors.runs_visible_to(self.request.user).order_by("-created_at")
        if run_status := self.request.query_params.get("status"):
            queryset = queryset.filter(status=run_status)
        return queryset

    def get_serializer_class(self):
        return s.RunListSerializer if self.action == "list" else s.RunDetailSerializer

    @extend_schema(responses=s.CandidateResultSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=ResultsPagination)
    def results(self, request, pk=None):
        """The run's per-candidate results, best rank first, paged with limit/offset."""
        run = self.get_object()
        page = self.paginate_queryset(run.results.order_by("rank", "candidate_key"))
        rows = s.CandidateResultSerializer(page, many=True, context={"inputs": run.inputs})
        return self.get_paginated_response(rows.data)

    @extend_schema(request=None, responses={202: s.RunStartedSerializer})
    @action(detail=True, methods=["post"])
    def rerun(self, request, pk=None):
        """Run again exactly this run's inputs snapshot (202 with the new run id); the
        scenario's own ``run/`` sizes what the scenario says now."""
        run = self.get_object()
        if run.scenario.owner_id != request.user.pk:
            raise PermissionDenied("only the owner can run this scenario")
        return _run_started(request, lambda: services.sizing_run_rerun(run=run))

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR, 409: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["get"], url_path="export.csv")
    def export_csv(self, request, pk=None):
        run = self.get_object()
        if reason := exports.unfinished_reason(run):
            return error_response(reason, code=409)
        return exports.csv_response(run)

    @extend_schema(
        responses={
            (
                200,
                "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            ): OpenApiTypes.BINARY,
            409: OpenApiTypes.OBJECT,
        }
    )
    @action(detail=True, methods=["get"], url_path="export.xlsx")
    def export_xlsx(self, request, pk=None):
        run = self.get_object()
        if reason := exports.unfinished_reason(run):
            return error_response(reason, code=409)
        return exports.xlsx_response(run)

    @extend_schema(
        parameters=[
            OpenApiParameter("gpu", str, required=True, description="GPU slug of the run"),
            OpenApiParameter(
                "autoscaler", str, required=False, enum=list(deploy.AUTOSCALERS),
                description="hpa or keda; default keda with a warm pool or scale to zero",
            ),
        ],
        responses={
            (200, "application/yaml"): OpenApiTypes.STR,
            400: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
        },
    )  # fmt: skip
    @action(detail=True, methods=["get"])
    def deploy(self, request, pk=None):
        """Kubernetes YAML for the run's recommendation on one GPU: Deployment (GPU requests,
        node selector, readiness after warm-up, weights volume, the vLLM arguments the sizing
        assumed), Service, and an HPA or KEDA ScaledObject on in-flight requests."""
        run = self.get_object()
        if reason := exports.unfinished_reason(run):
            return error_response(reason, code=409)
        return deploy_response(run, request.query_params)


def deploy_response(run, params) -> HttpResponse | Response:
    try:
        text = deploy.deploy_yaml(run, params.get("gpu", ""), params.get("autoscaler", ""))
    except deploy.DeployError as exc:
        return error_response(f"{exc.field}: {exc}", {exc.field: [str(exc)]}, code=400)
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'inline; filename="run-{run.pk}-{params.get("gpu")}.yaml"'
    return response


class InUse(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "in use"


class CatalogRowViewSet(viewsets.ModelViewSet):
    """Staff writes; a row that scenarios use as a candidate cannot be deleted (409)."""

    permission_classes = [IsStaffOrReadOnly]

    def perform_destroy(self, instance):
        try:
            check_deletable(instance)
        except CatalogRowInUse as exc:
            raise InUse(exc.messages[0]) from exc
        instance.delete()


class GpuViewSet(CatalogRowViewSet):
    queryset = GpuSku.objects.all()
    serializer_class = s.GpuSkuSerializer


class ModelViewSet(CatalogRowViewSet):
    """The shared catalog and your imported models (``import/``); staff edit the catalog."""

    queryset = ModelArchitecture.objects.all()  # narrowed per user in get_queryset
    serializer_class = s.ModelArchitectureSerializer

    def get_queryset(self):
        if self.request.user.is_staff:
            return ModelArchitecture.objects.select_related("owner")
        return selectors.models_visible_to(self.request.user).select_related("owner")

    @extend_schema(
        request={
            "application/json": s.ModelImportSerializer,
            "multipart/form-data": s.ModelImportSerializer,
        },
        responses={201: s.ModelArchitectureSerializer, 200: s.ModelArchitectureSerializer},
    )
    @action(
        detail=False,
        methods=["post"],
        url_path="import",
        permission_classes=[permissions.IsAuthenticated],
        parser_classes=[JSONParser, MultiPartParser, FormParser],
    )
    def import_config(self, request):
        """Import a model of your own from a config.json (``config`` object, ``file`` upload,
        or ``base``: a catalog model's slug to copy the architecture of). Checked as
        ``manage.py import_hf_config`` checks it; only you see it. 201 new, 200 updated."""
        from fleets.services import ModelImportRefused
        from planner.model_import import import_for

        form = s.ModelImportSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        try:
            row, action = import_for(
                request.user,
                name=data["name"],
                config=data.get("config"),
                upload=data.get("file"),
                base=data.get("base") or "",
            )
        except ModelImportRefused as exc:
            field = "name" if exc.field == "name" else "config"
            raise ValidationError({field: [str(exc)]}) from exc
        code = status.HTTP_201_CREATED if action == "created" else status.HTTP_200_OK
        return Response(s.ModelArchitectureSerializer(row).data, status=code)


class PriceSheetViewSet(viewsets.ModelViewSet):
    queryset = PriceSheet.objects.prefetch_related("gpu_prices", "api_prices")
    serializer_class = s.PriceSheetSerializer
    permission_classes = [IsStaffOrReadOnly]


class CalibrationProfileViewSet(viewsets.ModelViewSet):
    """Fitted performance-model constants per GPU x engine, with their cross-validated error.

    Everyone reads the shared profiles and their own uploads; staff edit; any user may upload
    their own measurements (``upload/``) to fit a profile for their fleet.
    """

    queryset = CalibrationProfile.objects.all()  # narrowed per user in get_queryset
    serializer_class = s.CalibrationProfileSerializer
    permission_classes = [IsStaffOrReadOnly]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        rows = CalibrationProfile.objects.select_related("gpu", "owner")
        if self.request.user.is_staff:
            return rows
        return rows.filter(Q(owner__isnull=True) | Q(owner=self.request.user))

    def create(self, request, *args, **kwargs):
        return Response(
            {
                "message": "profiles are fitted, not typed: POST a measurement file to upload/",
                "errors": {},
            },
            status=status.HTTP_405_METHOD_NOT_ALLOWED,
        )

    @extend_schema(
        request={"multipart/form-data": s.CalibrationUploadSerializer},
        responses={201: s.CalibrationProfileSerializer(many=True)},
    )
    @action(
        detail=False,
        methods=["post"],
        permission_classes=[permissions.IsAuthenticated],
        parser_classes=[MultiPartParser, FormParser],
    )
    def upload(self, request):
        """Fit a profile for your GPU and engine from a vLLM/guidellm JSON or a measured CSV."""
        from fleets.calibration import fit_upload
        from fleets.uploads import measurements_from_upload
        from sizing.calibrate import CalibrationRefused

        form = s.CalibrationUploadSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = dict(form.validated_data)
        try:
            data["gpu"] = selectors.resolve_gpu(data["gpu"])
        except LookupError as exc:
            raise ValidationError({"gpu": [str(exc)]}) from exc
        upload = data["file"]
        try:
            rows = measurements_from_upload(upload, data)
            saved = fit_upload(
                rows,
                data["gpu"],
                data["engine_family"],
                source=f"user upload {upload.name}",
                owner=request.user,
            )
        except MeasurementError as exc:
            field = exc.field if exc.field and exc.line is None else "file"
            raise ValidationError({field: [str(exc)]}) from exc
        except CalibrationRefused as exc:
            raise ValidationError({"file": [str(exc)]}) from exc
        body = s.CalibrationProfileSerializer(saved, many=True).data
        return Response(body, status=status.HTTP_201_CREATED)


class ShareLinkViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Read-only links to a scenario's run; DELETE revokes (the link then answers 404)."""

    serializer_class = s.ShareLinkSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        owned = selectors.scenarios_owned_by(self.request.user)
        return ShareLink.objects.filter(scenario__in=owned, revoked_at__isnull=True)

    def perform_create(self, serializer):
        data = serializer.validated_data
        scenario = get_object_or_404(
            selectors.scenarios_owned_by(self.request.user), pk=data["scenario_id"]
        )
        run = None
        if data.get("run_id") is not None:
            run = get_object_or_404(scenario.runs, pk=data["run_id"])
        else:
            run = selectors.latest_run(scenario)
        link, token = services.share_link_create(
            user=self.request.user, scenario=scenario, run=run, expires_at=data.get("expires_at")
        )
        link.raw_token = token
        serializer.instance = link

    def perform_destroy(self, instance):
        services.share_link_revoke(link=instance)
