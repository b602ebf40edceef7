"""The simulation cache: finished tail searches by the hash of their inputs."""

from __future__ import annotations

from planner.models import SimulationCache


class DatabaseCache:
    """``get(key)`` / ``put(key, value)`` / ``held(keys)`` over ``SimulationCache`` rows. A
    lost race on ``put`` is harmless: both writers computed the same seeded result."""

    def get(self, key: str) -> dict | None:
        row = SimulationCache.objects.filter(key=key).only("result").first()
        return row.result if row else None

    def held(self, keys: list[str]) -> set[str]:
        """The ``keys`` stored (one query)."""
        return set(SimulationCache.objects.filter(key__in=keys).values_list("key", flat=True))

    def put(self, key: str, value: dict) -> None:
        """One ``INSERT ... ON CONFLICT DO NOTHING`` (a lost race keeps the first writer's
        row): one round trip, where a get-or-create took four."""
        SimulationCache.objects.bulk_create(
            [SimulationCache(key=key, result=value)], ignore_conflicts=True
        )
