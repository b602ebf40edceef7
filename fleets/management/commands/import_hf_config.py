"""`python manage.py import_hf_config PATH [--name NAME]`: add or update a model (no network)."""

import datetime as dt
import json
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from fleets.architecture import ConfigError
from fleets.services import model_architecture_upsert


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
        guessed = (
            str(config.get("_name_or_path") or "").strip("/") if isinstance(config, dict) else ""
        )
        if guessed.startswith("/") or not guessed:
            guessed = file.parent.name if file.stem == "config" else file.stem.replace("--", "/")
        hf_id = hf_id or name or guessed
        try:
            row, action = model_architecture_upsert(
                hf_id=hf_id,
                name=name or hf_id.split("/")[-1],
                config=config,
                source=f"config.json imported from file {file.name}",
                as_of=dt.date.today(),
            )
        except (ConfigError, ValidationError) as exc:
            message = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
            raise CommandError(f"{file.name}: {message}; nothing imported") from exc
        self.stdout.write(
            f"{action} {row.name}: {row.total_params / 1e9:.2f}B total, "
            f"{row.active_params / 1e9:.2f}B active, {row.num_layers} layers, {row.attention_kind}"
        )
