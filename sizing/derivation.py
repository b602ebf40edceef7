"""Derivations: every number of a result, as named steps a UI can show and a reviewer check.

A ``Step`` is ``name = formula`` evaluated on named ``Quantity`` inputs, giving ``value`` in
``unit``. Steps are plain frozen dataclasses (JSON-ready via ``as_dict``).

Kinds. A ``formula`` step's formula is a Python expression over its input names (and
``ceil``, ``floor``, ``min``, ``max``, ``sqrt``, ``log``, ``exp``): ``evaluate(step)`` recomputes
its value from the listed inputs, and a test does so for every formula step the chain emits,
so what a reviewer reads is what the code computed. Other kinds name a procedure that is not a
closed form: ``search`` (a bisection over a monotone function, the inputs are its bounds and
targets), ``simulation`` (the discrete-event simulator), ``model`` (a vectorized stage of the
core whose formula is written out in words; its module's docstring has the equations).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import NamedTuple


class Quantity(NamedTuple):
    """A named input of a step (a tuple: a run builds ~200 per candidate, and a named tuple
    is several times cheaper to build than a frozen dataclass)."""

    name: str
    value: float | str
    unit: str


KINDS = ("formula", "search", "simulation", "model")


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    formula: str
    inputs: tuple[Quantity, ...]
    value: float | str
    unit: str
    note: str = ""
    kind: str = "formula"
    stage: str = ""  # the chain stage that emitted it (what the UI groups by)

    def as_dict(self) -> dict:
        """JSON-ready (NaN and inf become None), keys in field order. Written out rather than
        ``dataclasses.asdict``: a run serializes ~40 steps per candidate and asdict's deep
        copy was a sixth of an analytic run's time."""
        inputs = []
        for name, value, unit in self.inputs:  # _json_number inline: ~5 inputs a step
            if not isinstance(value, str) and not math.isfinite(value):
                value = None
            inputs.append({"name": name, "value": value, "unit": unit})
        return {
            "name": self.name,
            "formula": self.formula,
            "inputs": inputs,
            "value": _json_number(self.value),
            "unit": self.unit,
            "note": self.note,
            "kind": self.kind,
            "stage": self.stage,
        }


def _json_number(value: float | str) -> float | str | None:
    if isinstance(value, str):
        return value
    return value if math.isfinite(value) else None


def staged(stage: str, steps) -> list[Step]:
    """The steps, labelled with the stage that emitted them (built directly: ``replace``
    looks up the fields anew for every step, and a run labels ~60 steps per candidate)."""
    return [
        Step(s.name, s.formula, s.inputs, s.value, s.unit, s.note, s.kind, stage) for s in steps
    ]


_FUNCTIONS = {
    "ceil": math.ceil,
    "floor": math.floor,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "inf": math.inf,
}


def evaluate(formula: str, inputs) -> float:
    """Value of a formula step's expression on its inputs (a sequence of ``Quantity`` or of
    their dicts). Only arithmetic and the functions above; names are the inputs' names."""
    names = {}
    for item in inputs:
        name, value = (
            (item["name"], item["value"]) if isinstance(item, dict) else (item.name, item.value)
        )
        names[name] = value
    tree = ast.parse(formula, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise ValueError(f"not a plain formula: {type(node).__name__} in {formula!r}")
    code = compile(tree, "<formula>", "eval")
    return float(eval(code, {"__builtins__": {}}, {**_FUNCTIONS, **names}))  # noqa: S307


_ALLOWED_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Call,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.Add,
    ast.Sub,
    ast.Mult,
    ast.Div,
    ast.Pow,
    ast.USub,
    ast.FloorDiv,
    ast.Mod,
    ast.IfExp,
    ast.Compare,
    ast.Gt,
    ast.GtE,
    ast.Lt,
    ast.LtE,
)


def defaults_note(sources: dict[str, str]) -> str:
    """The note of a step that used defaults: each default with its figure and source."""
    if not sources:
        return "all given"
    return "defaults used: " + "; ".join(f"{k} = {v}" for k, v in sources.items())


def q(name: str, value: float | str, unit: str) -> Quantity:
    """Shorthand for a Quantity; numpy scalars become Python floats."""
    return Quantity(name, value if isinstance(value, str) else float(value), unit)


def step(
    name: str,
    formula: str,
    inputs: list[Quantity],
    value: float | str,
    unit: str,
    note: str = "",
    kind: str = "formula",
) -> Step:
    """A derivation step; ``kind`` says whether ``formula`` evaluates (see the module doc)."""
    assert kind in KINDS, kind
    value = value if isinstance(value, str) else float(value)
    return Step(name, formula, tuple(inputs), value, unit, note, kind)
