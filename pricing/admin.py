from django.contrib import admin, messages

from .models import ApiTokenPrice, GpuHourPrice, PriceSheet
from .services import price_sheet_new_version


class GpuHourPriceInline(admin.TabularInline):
    model = GpuHourPrice
    extra = 0


class ApiTokenPriceInline(admin.TabularInline):
    model = ApiTokenPrice
    extra = 0


@admin.register(PriceSheet)
class PriceSheetAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "effective_date", "locked", "as_of")
    inlines = [GpuHourPriceInline, ApiTokenPriceInline]
    actions = ["new_version"]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.locked:  # used by a saved result: immutable
            return [f.name for f in obj._meta.fields]
        return ["locked"]

    def has_delete_permission(self, request, obj=None):
        return not (obj is not None and obj.locked)

    @admin.action(description="Make a new editable version of the selected sheets")
    def new_version(self, request, queryset):
        for sheet in queryset:
            copy = price_sheet_new_version(sheet)
            self.message_user(request, f"created {copy}", messages.SUCCESS)


@admin.register(GpuHourPrice)
class GpuHourPriceAdmin(admin.ModelAdmin):
    list_display = ("gpu_slug", "provider", "item", "region", "tier", "usd_per_gpu_hour", "sheet")
    list_filter = ("tier", "provider", "gpu_slug")


@admin.register(ApiTokenPrice)
class ApiTokenPriceAdmin(admin.ModelAdmin):
    list_display = ("provider", "model", "input_usd_per_mtok", "output_usd_per_mtok", "sheet")
    list_filter = ("provider",)
    search_fields = ("model",)
