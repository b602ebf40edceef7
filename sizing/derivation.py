"""Derivations: every number of a result, as named steps a UI can show and a reviewer check.

A ``Step`` is ``name = formula`` evaluated on named ``Quantity`` inputs, giving ``value`` in
``unit``. Steps are plain frozen dataclasses (JSON-ready via ``as_dict``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Quantity:
    name: str
    value: float | str
    unit: str


@dataclass(frozen=True)
class Step:
    name: str
    formula: str
    inputs: tuple[Quantity, ...]
    value: float | str
    unit: str
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def q(name: str, value: float | str, unit: str) -> Quantity:
    """Shorthand for a Quantity; numpy scalars become Python floats."""
    return Quantity(name, value if isinstance(value, str) else float(value), unit)


def step(
    name: str, formula: str, inputs: list[Quantity], value: float | str, unit: str, note: str = ""
) -> Step:
    return Step(
        name, formula, tuple(inputs), value if isinstance(value, str) else float(value), unit, note
    )
