"""Specs used by the sizing tests (values from ../shared/reference: models.csv, gpus.csv)."""

from sizing.specs import GpuSpec, ModelSpec

LLAMA_70B = ModelSpec(
    name="Llama 3.1 70B",
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    total_params=70.55e9,
    active_params=70.55e9,
    embedding_params=128256 * 8192,
)

LLAMA_8B = ModelSpec(
    name="Llama 3.1 8B",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    total_params=8.03e9,
    active_params=8.03e9,
    embedding_params=128256 * 4096,
)

DEEPSEEK_V3 = ModelSpec(
    name="DeepSeek-V3",
    num_layers=61,
    hidden_size=7168,
    num_attention_heads=128,
    num_kv_heads=128,
    head_dim=192,
    vocab_size=129280,
    total_params=671.03e9,
    active_params=37.55e9,
    embedding_params=129280 * 7168,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    num_experts=256,
    experts_per_token=8,
    shared_experts=1,
    params_per_expert=3 * 7168 * 2048,
    num_moe_layers=58,
    max_context=163840,
)

# gpt-oss-120b: alternating sliding-window (128) and full layers, 128 experts top-4.
GPT_OSS_120B = ModelSpec(
    name="gpt-oss-120b",
    num_layers=36,
    hidden_size=2880,
    num_attention_heads=64,
    num_kv_heads=8,
    head_dim=64,
    vocab_size=201088,
    total_params=116.83e9,
    active_params=5.71e9,
    embedding_params=201088 * 2880,
    full_attention_layers=18,
    sliding_window_layers=18,
    sliding_window=128,
    num_experts=128,
    experts_per_token=4,
    params_per_expert=3 * 2880 * 2880,
    num_moe_layers=36,
)

H100 = GpuSpec(
    name="H100 SXM",
    memory_gb=80,
    hbm_bandwidth_tb_s=3.35,
    dense_tflops={"bf16": 989.5, "fp8": 1979, "int8": 1979},
    scale_up_link="nvlink",
    scale_up_bw_gb_s=900,
    gpus_per_node=8,
    scale_up_domain_gpus=8,
    usd_per_gpu_hour=2.50,
)

H200 = GpuSpec(
    name="H200 SXM",
    memory_gb=141,
    hbm_bandwidth_tb_s=4.8,
    dense_tflops={"bf16": 989.5, "fp8": 1979, "int8": 1979},
    scale_up_link="nvlink",
    scale_up_bw_gb_s=900,
    gpus_per_node=8,
    scale_up_domain_gpus=8,
    usd_per_gpu_hour=3.50,
)

B200 = GpuSpec(
    name="B200",
    memory_gb=180,
    hbm_bandwidth_tb_s=7.7,
    dense_tflops={"bf16": 2250, "fp8": 4500, "fp4": 9000},
    scale_up_link="nvlink",
    scale_up_bw_gb_s=1800,
    gpus_per_node=8,
    scale_up_domain_gpus=8,
    usd_per_gpu_hour=6.00,
)

L40S = GpuSpec(
    name="L40S",
    memory_gb=48,
    hbm_bandwidth_tb_s=0.864,
    dense_tflops={"bf16": 362.05, "fp8": 733},
    scale_up_link="pcie",
    scale_up_bw_gb_s=64,
    gpus_per_node=8,
    scale_up_domain_gpus=8,
    usd_per_gpu_hour=1.00,
)
