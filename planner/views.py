"""Server-rendered pages."""

from django.shortcuts import render

from fleets.models import GpuSku, ModelArchitecture
from pricing.models import PriceSheet


def home(request):
    context = {
        "gpus": GpuSku.objects.all(),
        "models": ModelArchitecture.objects.all(),
        "sheet": PriceSheet.objects.order_by("-effective_date", "-version").first(),
    }
    return render(request, "planner/home.html", context)
