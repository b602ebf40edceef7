"""Forms whose errors assistive technology can find.

Each error list gets the id ``id_<field>_errors`` (see the field templates), and the input it
belongs to points at it with ``aria-describedby`` and says ``aria-invalid="true"``, so a screen
reader reads the error when the input takes focus. The error summary
(``planner/_error_summary.html``) links to every field in error and takes the focus after a
failed submit.
"""

from __future__ import annotations


def error_id(name: str) -> str:
    return f"id_{name}_errors"


def help_id(name: str) -> str:
    return f"id_{name}_help"


class AccessibleErrorsMixin:
    """Mixin for ``django.forms.Form``: ties every field error to its input."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, field in self.fields.items():
            if field.help_text and help_id(name) not in _described(field):
                _describe(field, help_id(name))

    def add_error(self, field, error):
        super().add_error(field, error)
        for name in list(self.errors):
            if name in self.fields:
                target = self.fields[name]
                target.widget.attrs["aria-invalid"] = "true"
                if error_id(name) not in _described(target):
                    _describe(target, error_id(name))


def _described(field) -> list[str]:
    return field.widget.attrs.get("aria-describedby", "").split()


def _describe(field, element_id: str) -> None:
    field.widget.attrs["aria-describedby"] = " ".join([*_described(field), element_id])
