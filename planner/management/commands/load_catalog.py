"""`python manage.py load_catalog`: GPU SKUs, model architectures and the reference prices."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from fleets.calibration import load_shipped_profiles
from fleets.loaders import CatalogError, load_gpus, load_models
from pricing.loaders import PriceFileError, load_prices


class Command(BaseCommand):
    help = "Load the catalog fixtures (idempotent: loading twice changes nothing)."

    def handle(self, *args, **options):
        try:
            with transaction.atomic():
                gpus = load_gpus()
                models = load_models()
                prices = load_prices()
                profiles = load_shipped_profiles()
        except (CatalogError, PriceFileError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"GPUs: {dict(gpus)}; models: {dict(models)}; reference price sheet: {prices}; "
            f"calibration profiles: {profiles}"
        )
