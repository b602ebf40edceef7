"""Import a model from its config.json in the UI and the API: pasted, uploaded, or copied from
a catalog family (your fine-tune of Llama 3.1 8B has Llama 3.1 8B's architecture).

Parsing and validation are ``fleets.services.model_import`` — the code path of
``manage.py import_hf_config`` — so the three doors accept and refuse the same configs. An
imported model belongs to its importer: other users neither see nor resolve it.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render

from fleets.services import ModelImportRefused, model_import
from planner.accessible import AccessibleErrorsMixin
from planner.selectors import models_visible_to

MAX_CONFIG_BYTES = 1_000_000  # a config.json is a few kB; the largest shipped is ~10 kB


def _parse(text: bytes | str, where: str) -> dict:
    if len(text) > MAX_CONFIG_BYTES:
        raise ModelImportRefused(
            f"{where} is {len(text):,} bytes; the limit is {MAX_CONFIG_BYTES:,}"
        )
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelImportRefused(f"{where} is not valid JSON ({exc})") from None


def config_from(*, user, text: str = "", upload=None, base: str = "", config=None):
    """(config dict, where it came from) from exactly one source.

    Raises ``ModelImportRefused`` (naming the source) for none, several, or a bad one."""
    given = [s for s in (text.strip(), upload, base, config) if s]
    if len(given) != 1:
        raise ModelImportRefused(
            "give one config: paste it, upload a config.json, or pick a catalog family"
        )
    if config is not None:
        return config, "config.json sent to the API"
    if upload is not None:
        if upload.size and upload.size > MAX_CONFIG_BYTES:
            raise ModelImportRefused(
                f"{upload.name} is {upload.size:,} bytes; the limit is {MAX_CONFIG_BYTES:,}"
            )
        return _parse(upload.read(), upload.name), f"config.json uploaded as {upload.name}"
    if text.strip():
        return _parse(text, "the pasted text"), "config.json pasted in the UI"
    row = models_visible_to(user).filter(slug=base).first()
    if row is None or not row.config_json:
        raise ModelImportRefused(f"unknown catalog family {base!r}")
    return dict(row.config_json), f"architecture of {row.hf_id} (catalog family)"


def import_for(user, *, name: str, **sources):
    """Import for ``user``; returns (row, "created" | "updated")."""
    config, where = config_from(user=user, **sources)
    return model_import(config=config, name=name, source=f"{where} by {user}", owner=user)


class ModelImportForm(AccessibleErrorsMixin, forms.Form):
    name = forms.CharField(
        label="Model name",
        max_length=200,
        help_text="e.g. my-org/support-bot-8b; shown in the model list, used in the API",
    )
    config_text = forms.CharField(
        label="Paste config.json",
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "class": "mono", "spellcheck": "false"}),
    )
    config_file = forms.FileField(
        label="or upload config.json",
        required=False,
        help_text=f"at most {MAX_CONFIG_BYTES // 1000:,} kB",
    )
    base = forms.ChoiceField(
        label="or start from a catalog family",
        required=False,
        help_text="a fine-tune keeps its base model's architecture",
    )

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        rows = models_visible_to(user).filter(owner__isnull=True).order_by("name")
        self.fields["base"].choices = [("", "—"), *rows.values_list("slug", "name")]
        self.result = None

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.result = import_for(
                self.user,
                name=data["name"].strip(),
                text=data.get("config_text") or "",
                upload=data.get("config_file"),
                base=data.get("base") or "",
            )
        except ModelImportRefused as exc:
            source = "config_file" if data.get("config_file") else "config_text"
            if data.get("base") and not data.get("config_file"):
                source = "base" if not (data.get("config_text") or "").strip() else source
            self.add_error("name" if exc.field == "name" else source, str(exc))
        return data


@login_required
def models_page(request):
    """Your imported models and the import form."""
    form = ModelImportForm(request.POST or None, request.FILES or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        row, action = form.result
        messages.success(
            request,
            f"{action.capitalize()} {row.name}: {row.total_params / 1e9:.3g}B parameters, "
            f"{row.num_layers} layers, {row.attention_kind}. It is now in your model list.",
        )
        return redirect("planner:models")
    mine = list(models_visible_to(request.user).filter(owner=request.user).order_by("name"))
    for row in mine:
        row.params_b = row.total_params / 1e9
    status = 400 if request.method == "POST" else 200
    context = {"form": form, "mine": mine, "limit_kb": MAX_CONFIG_BYTES // 1000}
    return render(request, "planner/models.html", context, status=status)
