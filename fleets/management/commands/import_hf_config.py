"""`python manage.py import_hf_config PATH [--name NAME]`: add or update a model (no network)."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from fleets.services import ModelImportRefused, model_import


class Command(BaseCommand):
    help = "Add or update a model architecture from a Hugging Face config.json file."

    def add_arguments(self, parser):
        parser.add_argument("path", help="Path to config.json")
        parser.add_argument("--name", default="", help="Display name (default: from the file)")
        parser.add_argument("--hf-id", default="", help="Hugging Face id (default: --name)")

    def handle(self, *args, path, name, hf_id, **options):
        file = Path(path)
        try:
            config = json.loads(file.read_text())
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path} is not valid JSON: {exc}") from exc
        from_file = file.parent.name if file.stem == "config" else file.stem.replace("--", "/")
        try:
            row, action = model_import(
                config=config,
                name=name,
                hf_id=hf_id,
                fallback_id=from_file,
                source=f"config.json imported from file {file.name}",
            )
        except ModelImportRefused as exc:
            raise CommandError(f"{file.name}: {exc}; nothing imported") from exc
        self.stdout.write(
            f"{action} {row.name}: {row.total_params / 1e9:.2f}B total, "
            f"{row.active_params / 1e9:.2f}B active, {row.num_layers} layers, {row.attention_kind}"
        )
