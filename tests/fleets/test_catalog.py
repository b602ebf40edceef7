"""The shipped catalog loads idempotently, with sources, and refuses nonsense."""

import json

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from fleets.models import GpuSku, ModelArchitecture
from fleets.services import gpu_sku_upsert
from pricing.models import ApiTokenPrice, GpuHourPrice, PriceSheet

REQUIRED_GPUS = [
    "h100_sxm",
    "h100_pcie",
    "h200_sxm",
    "b200",
    "gb200",
    "b300",
    "l40s",
    "l4",
    "a100_80gb",
    "mi300x",
]
REQUIRED_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.3-70b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "deepseek-r1",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "llama-4-scout",
    "llama-4-maverick",
    "kimi-k2.5",
    "minimax-m2.5",
]


def _counts():
    return (
        GpuSku.objects.count(),
        ModelArchitecture.objects.count(),
        PriceSheet.objects.count(),
        GpuHourPrice.objects.count(),
        ApiTokenPrice.objects.count(),
    )


@pytest.mark.django_db
def test_load_catalog_twice_changes_nothing(capsys):
    # given an empty database, when the catalog is loaded twice
    call_command("load_catalog")
    first = _counts()
    snapshot = (
        list(GpuSku.objects.values()),
        list(
            ModelArchitecture.objects.values(
                "updated_at" if hasattr(ModelArchitecture, "updated_at") else "pk", "total_params"
            )
        ),
    )
    call_command("load_catalog")
    # then the second load reports nothing changed and the rows are identical
    assert "unchanged" in capsys.readouterr().out.splitlines()[-1]
    assert _counts() == first
    assert list(GpuSku.objects.values()) == snapshot[0]


@pytest.mark.django_db
def test_catalog_holds_the_skus_and_models_with_sources(catalog):
    slugs = set(GpuSku.objects.values_list("slug", flat=True))
    assert set(REQUIRED_GPUS) <= slugs
    model_slugs = set(ModelArchitecture.objects.values_list("slug", flat=True))
    assert set(REQUIRED_MODELS) <= model_slugs
    for row in list(GpuSku.objects.all()) + list(ModelArchitecture.objects.all()):
        assert row.source.strip() and row.as_of, row
    assert GpuHourPrice.objects.filter(gpu_slug="h100_sxm", tier="on_demand").exists()
    assert all(p.source and p.as_of for p in GpuHourPrice.objects.all())


@pytest.mark.django_db
def test_l40s_has_no_nvlink_and_h100_numbers(catalog):
    l40s = GpuSku.objects.get(slug="l40s")
    assert l40s.scale_up_link == "pcie"
    h100 = GpuSku.objects.get(slug="h100_sxm")
    # 81,559 MiB as NVML reports it (the "80 GB" is 80 GiB less reserved memory), exact
    assert h100.memory_gb * 1e9 == pytest.approx(81_559 * 2**20, abs=1)
    assert (h100.hbm_bandwidth_tb_s, h100.bf16_tflops) == (3.35, 989.5)


def _gpu_row(**overrides):
    row = {
        "slug": "x1",
        "name": "X1",
        "vendor": "V",
        "memory_gb": "80",
        "hbm_bandwidth_tb_s": "3.35",
        "bf16_tflops": "989",
        "scale_up_link": "nvlink",
        "scale_up_bw_gb_s": "900",
        "gpus_per_node": "8",
        "scale_up_domain_gpus": "8",
        "source": "test",
        "as_of": "2026-11-29",
    }
    row.update(overrides)
    return row


@pytest.mark.django_db
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("memory_gb", "", "memory_gb is required"),
        ("memory_gb", "0", "memory_gb must be positive"),
        ("bf16_tflops", "-5", "bf16_tflops must be positive"),
        ("hbm_bandwidth_tb_s", "1e9", "outside physical sense"),
        ("fp8_tflops", "1e12", "outside physical sense"),
        ("hbm_bandwidth_tb_s", "fast", "must be a number"),
        ("source", "", "source is required"),
    ],
)
def test_bad_gpu_row_is_rejected_naming_the_field(field, value, message):
    with pytest.raises(ValidationError) as error:
        gpu_sku_upsert(_gpu_row(**{field: value}))
    assert field in error.value.message_dict
    assert message in " ".join(error.value.message_dict[field])
    assert not GpuSku.objects.filter(slug="x1").exists()


@pytest.mark.django_db
def test_model_admin_validation_refuses_zero_bandwidth():
    sku = GpuSku(
        **{k: v for k, v in gpu_sku_upsert.__globals__["gpu_values_from_row"](_gpu_row()).items()},
        slug="x2",
    )
    sku.hbm_bandwidth_tb_s = 0
    with pytest.raises(ValidationError, match="must be positive"):
        sku.full_clean()


@pytest.mark.django_db
def test_import_hf_config_adds_a_nested_multimodal_model(tmp_path, catalog):
    source = ModelArchitecture.objects.get(slug="llama-4-scout").config_json
    path = tmp_path / "config.json"
    path.write_text(json.dumps(source))
    call_command("import_hf_config", str(path), "--name", "my-org/scout-copy")
    row = ModelArchitecture.objects.get(hf_id="my-org/scout-copy")
    assert row.num_layers == 48 and row.num_experts == 16
    assert abs(row.total_params / 1e9 - 107.77) < 0.01


@pytest.mark.django_db
def test_import_hf_config_refuses_a_non_lm_config_and_saves_nothing(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "vit", "hidden_size": 768, "image_size": 224}))
    with pytest.raises(CommandError, match="missing key 'num_hidden_layers'"):
        call_command("import_hf_config", str(path))
    assert ModelArchitecture.objects.count() == 0


@pytest.mark.django_db
def test_import_hf_config_refuses_invalid_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(CommandError, match="not valid JSON"):
        call_command("import_hf_config", str(path))


@pytest.mark.django_db
def test_gb300_and_every_nic_bandwidth_carry_their_sources():
    # given the shipped catalog, when it is loaded
    call_command("load_catalog")
    # then GB300 is an NVL72 part: 72-GPU NVLink domain, dense peaks per GPU, 800 Gb/s NIC
    gb300 = GpuSku.objects.get(slug="gb300")
    assert (gb300.scale_up_domain_gpus, gb300.gpus_per_node, gb300.scale_up_link) == (
        72,
        4,
        "nvlink",
    )
    assert (gb300.bf16_tflops, gb300.fp8_tflops, gb300.fp4_tflops) == (2500, 5000, 15000)
    assert (gb300.hbm_bandwidth_tb_s, gb300.nic_gb_s) == (8.0, 100.0)
    assert "http" in gb300.source and "http" in gb300.nic_source
    # and every SKU has a scale-out NIC figure with its source, which the core uses
    from fleets.selectors import gpu_spec

    for row in GpuSku.objects.all():
        assert row.nic_gb_s and row.nic_gb_s > 0, row.slug
        assert "http" in row.nic_source or "docs.nvidia.com" in row.nic_source, row.slug
        assert gpu_spec(row).scale_out_gb_s == row.nic_gb_s
        # and its vendor, which picks the engine build a disaggregated fit belongs to
        assert gpu_spec(row).vendor == row.vendor in ("NVIDIA", "AMD"), row.slug
