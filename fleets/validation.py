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
    "nic_gb_s": (0.1, 10_000, "GB/s"),
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


@deconstructible
class StringList:
    """A JSON list of non-blank strings (aliases, source lists): anything else stored there
    breaks every reader of the catalog."""

    def __init__(self, max_items: int = 50, max_length: int = 200):
        self.max_items, self.max_length = max_items, max_length

    def __call__(self, value) -> None:
        if not isinstance(value, list):
            raise ValidationError(f"must be a list of strings, got {type(value).__name__}")
        if len(value) > self.max_items:
            raise ValidationError(f"at most {self.max_items} entries")
        for item in value:
            if not isinstance(item, str) or not item.strip() or len(item) > self.max_length:
                raise ValidationError(
                    f"each entry must be a non-blank string of at most {self.max_length} "
                    f"characters, got {item!r:.60}"
                )

    def __eq__(self, other) -> bool:
        return isinstance(other, StringList) and (self.max_items, self.max_length) == (
            other.max_items,
            other.max_length,
        )


@deconstructible
class JsonObject:
    """A JSON object; with ``numbers`` every value must be a finite number (fitted constants)."""

    def __init__(self, numbers: bool = False):
        self.numbers = numbers

    def __call__(self, value) -> None:
        if not isinstance(value, dict):
            raise ValidationError(f"must be a JSON object, got {type(value).__name__}")
        if self.numbers:
            for key, item in value.items():
                finite = isinstance(item, int | float) and not isinstance(item, bool)
                if not finite or item != item or item in (float("inf"), float("-inf")):
                    raise ValidationError(f"{key}: must be a finite number, got {item!r:.60}")

    def __eq__(self, other) -> bool:
        return isinstance(other, JsonObject) and self.numbers == other.numbers
