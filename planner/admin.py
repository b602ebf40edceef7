"""Admin for scenarios: who owns them and the colleagues they are shared with."""

from django.contrib import admin

from planner.models import Scenario


@admin.register(Scenario)
class ScenarioAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "updated_at"]
    list_filter = ["owner"]
    search_fields = ["name", "description", "owner__username"]
    filter_horizontal = ["shared_with", "candidate_models", "candidate_gpus"]
    readonly_fields = ["created_at", "updated_at"]
