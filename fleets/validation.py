"""Physical-sense limits for catalog numbers, shared by model validators and loaders.

A value outside these ranges is a typo or a unit mistake (TB/s entered as GB/s, sparse entered
as dense ten times over), never a real GPU. Limits are generous: about 10x today's largest part.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

LIMITS: dict[str, tuple[float, float, str]] = {
    "memory_gb": (1, 4_000, "GB"),
    "hbm_bandwidth_tb_s": (0.05, 100, "TB/s"),
    "bf16_tflops": (1, 50_000, "TFLOP/s"),
    "fp8_tflops": (1, 100_000, "TFLOP/s"),
    "fp4_tflops": (1, 200_000, "TFLOP/s"),
    "int8_tops": (1, 100_000, "TOPS"),
    "scale_up_bw_gb_s": (1, 50_000, "GB/s"),
    "gpus_per_node": (1, 1_024, "GPUs"),
    "scale_up_domain_gpus": (1, 100_000, "GPUs"),
    "tdp_w": (1, 10_000, "W"),
}


def check_range(field: str, value: float | None, required: bool = True) -> list[str]:
    """Return error messages for ``field`` (empty when the value is acceptable)."""
    low, high, unit = LIMITS[field]
    if value is None or value == "":
        return [f"{field} is required"] if required else []
    try:
        number = float(value)
    except (TypeError, ValueError):
        return [f"{field} must be a number, got {value!r}"]
    if number <= 0:
        return [f"{field} must be positive, got {value}"]
    if not low <= number <= high:
        return [f"{field} = {value} {unit} is outside physical sense ({low} to {high} {unit})"]
    return []


@deconstructible
class RangeValidator:
    """A Django field validator enforcing LIMITS[field] (serializable for migrations)."""

    def __init__(self, field: str):
        self.field = field

    def __call__(self, value):
        errors = check_range(self.field, value, required=False)
        if errors:
            raise ValidationError(errors[0])

    def __eq__(self, other):
        return isinstance(other, RangeValidator) and other.field == self.field


def positive(value):
    if value is not None and value <= 0:
        raise ValidationError(f"must be positive, got {value}")
