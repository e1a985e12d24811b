#!/usr/bin/env python3
"""Drive the REAL vLLM 0.33.0 v1 scheduler (pure Python, no model, no GPU) for a HYBRID model that
mixes full attention with Mamba / linear-attention (Gated DeltaNet) layers, as Qwen3-Next does,
i.e. vLLM's HybridKVCacheCoordinator with a FullAttentionManager and MambaManager(s), and write a
per-step schedule as JSON Lines.

Modelled on tests/golden/vllm_hybrid/run_vllm_hybrid.py of the cachesim repository (same trace
format, token model, step convention and output format; nothing is imported from it). What is
different:

* The model is a tiny Qwen3-Next (`Qwen3NextForCausalLM`, model_type qwen3_next) whose config.json
  the driver writes: --linear-layers K Gated-DeltaNet layers and one full-attention layer (K=3 is
  Qwen3-Next's 3:1 pattern and gives vLLM's 3 Mamba groups + 1 full group; default K=1: one Mamba
  group + one full group). ModelConfig therefore reports is_hybrid, and VllmConfig's own post-init
  (`HybridAttentionMambaModelConfig` -> `MambaModelConfig.verify_and_update_config`) sets
  `mamba_cache_mode` ("align" with prefix caching, else "none") and `mamba_block_size`.
* Block size: vLLM's own `Platform._align_hybrid_block_size(vllm_config, backend)` is called with a
  stub attention backend (kernel block sizes MultipleOf(16), identity customize_spec, as
  FlashAttention on Hopper). On this CPU machine no layers are built, so the Mamba prefill
  checkpoint alignment resolves to 1 (as for Mamba2 layers); it raises block_size if the Mamba page
  is larger than a 16-token attention page (it is not for the tiny dims), sets mamba_block_size =
  block_size in align mode and pads the Mamba page to the attention page.
* Per-layer specs as the worker reports them: FullAttentionSpec for the full layer, and for each
  linear layer `MambaBase.get_kv_cache_spec`'s MambaSpec (state shapes/dtypes from the model
  class's get_mamba_state_shape_from_config / get_mamba_state_dtype_from_config, block_size =
  mamba_block_size, page_size_padded, mamba_type GDN_ATTN, mamba_cache_mode), with
  --mamba-checkpoint choosing what the layer adds:
    none : no prefill checkpoint blocks (the Triton/FLA GDN prefill, e.g. non-Hopper GPUs):
           the scheduler splits prefills at block boundaries (`_mamba_block_aligned_split`);
    grid : num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment =
           get_mamba_prefill_checkpoint_grid() (= mamba_block_size), as the Qwen GDN layer does
           with the FlashInfer GDN prefill (H100; real alignment 64, so use a block size that is a
           multiple of 64 to be exact);
    one  : num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1, as MambaMixer2
           (Nemotron-H, Mamba2 models) always does.
* The rest is the hybrid driver's EngineCore._initialize_kv_caches order (register specs, layout,
  get_global_kv_cache_groups, get_kv_cache_configs with num_gpu_blocks_override, scheduler
  config, resolve_kv_cache_block_sizes, resolve_cache_hit_alignment_tokens, Scheduler), and the
  same single hand-resolved setting: UnspecifiedPlatform disables the hybrid KV cache manager;
  the driver sets disable_hybrid_kv_cache_manager back to False (its value on CUDA).

Each step: schedule(); every scheduled request whose computed tokens reach its known tokens samples
one token (distinct per request, never EOS); update_from_output(). Nothing of vLLM is patched.
"""

import argparse
import json
import os
import sys
import time

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") is None:
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

OUT_TOKEN_BASE = 1 << 31
OUT_TOKEN_STRIDE = 1 << 20

# Tiny Qwen3-Next: attention 2 KV heads x head 16 x bf16 = 128 B/token (2048 B per 16-token
# block and layer); GDN state conv (3, 96) + recurrent (2, 16, 16) in bf16 = 1600 B <= 2048.
TINY_QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 2,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "partial_rotary_factor": 0.25,
    "rope_theta": 10000000,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def parse_retention(s):
    if s.lower() == "none":
        return None
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("retention interval must be >= 0 or 'none'")
    return v


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, help="native JSONL (prompt_ids, output_len); id = line number")
    p.add_argument("--out", required=True)
    p.add_argument("--arrival-steps", help="JSON file: the step index at which each request arrives")
    p.add_argument("--block-size", type=int, default=16, help="--block-size (attention and, in align mode, Mamba)")
    p.add_argument("--linear-layers", type=int, default=1, help="GDN layers beside the one full-attention layer")
    p.add_argument("--layer-order", choices=["linear-first", "full-first"], default="linear-first",
                   help="linear-first (Qwen3-Next: layers 0..K-1 linear, K full -> Mamba groups first)")
    p.add_argument("--mamba-checkpoint", choices=["none", "grid", "one"], default="none")
    p.add_argument("--num-gpu-blocks", type=int, default=5000, help="blocks, null block included")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--prefix-cache-retention-interval", type=parse_retention, default=0)
    p.add_argument("--prefix-match-unit", type=int, default=None)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--reserve-full-isl", choices=["default", "on", "off"], default="default")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--model-dir", default=None)
    return p.parse_args(argv)


def load_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                reqs.append(r)
    return reqs


def spec_kind(spec):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, UniformTypeKVCacheSpecs

    if isinstance(spec, UniformTypeKVCacheSpecs):
        return spec_kind(spec.first_spec)
    if isinstance(spec, MambaSpec):
        return "mamba"
    if isinstance(spec, FullAttentionSpec):
        return "full_attention"
    return type(spec).__name__


class StubAttentionBackend:
    """What Platform._align_hybrid_block_size reads of an attention backend: FlashAttention's
    kernel block sizes on Hopper (MultipleOf(16)) and its identity customize_spec."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        from vllm.v1.attention.backend import MultipleOf

        return [MultipleOf(16)]

    @staticmethod
    def customize_spec(spec):
        return spec

    @staticmethod
    def get_name():
        return "STUB_FLASH_ATTN"


def build_scheduler(a):
    from dataclasses import replace

    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.model_executor.layers.mamba.abstract import get_mamba_prefill_checkpoint_grid
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.attention.backends.utils import _DEFAULT_LAYOUT_PREFERENCE, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import _pool_bytes_per_block, get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        get_request_block_hasher,
        init_none_hash,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
        update_kv_cache_capacity,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec
    from vllm.v1.structured_output import StructuredOutputManager

    K = a.linear_layers
    n_layers = K + 1
    full_idx = K if a.layer_order == "linear-first" else 0
    layer_types = ["full_attention" if i == full_idx else "linear_attention" for i in range(n_layers)]
    model_dir = a.model_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-qwen3-next-config")
    os.makedirs(model_dir, exist_ok=True)
    cfg = dict(TINY_QWEN3_NEXT, num_hidden_layers=n_layers, full_attention_interval=n_layers, layer_types=layer_types)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f)

    model_config = ModelConfig(model=model_dir, dtype="auto", seed=42, skip_tokenizer_init=True, max_model_len=a.max_model_len)
    sched_kwargs = dict(
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_model_len=a.max_model_len,
        long_prefill_token_threshold=a.long_prefill_token_threshold,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    if a.reserve_full_isl != "default":
        sched_kwargs["scheduler_reserve_full_isl"] = a.reserve_full_isl == "on"
    cache_kwargs = dict(
        block_size=a.block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=not a.no_prefix_caching,
        prefix_cache_retention_interval=a.prefix_cache_retention_interval,
    )
    if a.prefix_match_unit is not None:
        cache_kwargs["prefix_match_unit"] = a.prefix_match_unit
    vllm_config = VllmConfig(
        scheduler_config=SchedulerConfig(**sched_kwargs),
        model_config=model_config,
        cache_config=CacheConfig(**cache_kwargs),
        device_config=DeviceConfig(device="cpu"),
    )
    cc = vllm_config.cache_config
    after_post_init = {"mamba_cache_mode": cc.mamba_cache_mode, "mamba_block_size": cc.mamba_block_size, "block_size": cc.block_size}
    hma_disabled_by_platform = vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False

    # Platform.update_block_size_for_backend phase 2 (runs in the worker once layers exist).
    Platform._align_hybrid_block_size(vllm_config, StubAttentionBackend)
    after_align = {"block_size": cc.block_size, "mamba_block_size": cc.mamba_block_size, "mamba_page_size_padded": cc.mamba_page_size_padded}

    model_cls, _ = ModelRegistry.resolve_model_cls(model_config.architecture, model_config=model_config)
    shapes = model_cls.get_mamba_state_shape_from_config(vllm_config)
    dtypes = model_cls.get_mamba_state_dtype_from_config(vllm_config)
    num_kv_heads = model_config.get_num_kv_heads(vllm_config.parallel_config)
    head_size = model_config.get_head_size()
    specs = {}
    for i in range(n_layers):
        if i == full_idx:
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=cc.block_size, num_kv_heads=num_kv_heads, head_size=head_size, dtype=model_config.dtype
            )
        else:
            ms = MambaSpec(
                shapes=tuple(shapes),
                dtypes=dtypes,
                block_size=cc.mamba_block_size,
                page_size_padded=cc.mamba_page_size_padded,
                mamba_type=MambaAttentionBackendEnum.GDN_ATTN,
                tp_replicated=False,
                mamba_cache_mode=cc.mamba_cache_mode,
                num_speculative_blocks=0,
            )
            if a.mamba_checkpoint == "grid":
                ms = replace(ms, num_prefill_checkpoint_blocks=1,
                             prefill_checkpoint_alignment=get_mamba_prefill_checkpoint_grid(vllm_config))
            elif a.mamba_checkpoint == "one":
                ms = replace(ms, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)
            specs[f"model.layers.{i}.linear_attn"] = ms

    register_all_kvcache_specs(vllm_config)
    layout = resolve_kv_cache_layout(vllm_config, [[l.name for l in _DEFAULT_LAYOUT_PREFERENCE]], list(specs.values()))
    groups = get_global_kv_cache_groups(vllm_config, [dict(specs)])
    cc.num_gpu_blocks_override = a.num_gpu_blocks
    bytes_per_block = _pool_bytes_per_block(vllm_config, groups)
    startup_check = "passed"
    try:
        kv_cache_configs = get_kv_cache_configs(vllm_config, [dict(specs)], [a.num_gpu_blocks * bytes_per_block], groups)
        config_path = "get_kv_cache_configs"
    except ValueError as e:
        startup_check = "rejected: " + " ".join(str(e).split())
        builder = get_kv_cache_config_builder(vllm_config)
        kv_cache_configs = [builder.get_kv_cache_config_from_groups(vllm_config, groups, a.num_gpu_blocks)]
        config_path = "builder.get_kv_cache_config_from_groups (get_kv_cache_configs' memory check rejected the pool)"
    for c in kv_cache_configs:
        c.kv_cache_layout = cc.kv_cache_layout
    kv_cache_config = generate_scheduler_kv_cache_config(kv_cache_configs)
    cc.num_gpu_blocks = kv_cache_config.num_blocks
    participating = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups if g.kv_cache_spec.prefix_cacheable]
    cc.block_size = min(participating or [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups])
    update_kv_cache_capacity(vllm_config, kv_cache_config)
    vllm_config.validate_block_size()
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(kv_cache_config, vllm_config, scheduler_block_size, hash_block_size)
    for c in (*kv_cache_configs, kv_cache_config):
        c.hash_block_size = hash_block_size
        c.cache_hit_alignment_tokens = cache_hit_alignment_tokens
    assert kv_cache_config.num_blocks == a.num_gpu_blocks, (kv_cache_config.num_blocks, a.num_gpu_blocks)

    sched = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        include_finished_set=False,
        log_stats=True,
        block_size=scheduler_block_size,
        hash_block_size=hash_block_size,
    )
    hasher = None
    if cc.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(hash_block_size, hash_fn, vllm_config.num_hash_lookahead_tokens)

    meta = {
        "layer_types": layer_types,
        "layers": {name: spec_kind(s) for name, s in specs.items()},
        "layout": layout.name,
        "config_path": config_path,
        "startup_check": startup_check,
        "hma_disabled_by_platform": hma_disabled_by_platform,
        "after_post_init": after_post_init,
        "after_align_hybrid_block_size": after_align,
        "mamba_state_shapes": [list(s) for s in shapes],
        "mamba_state_dtypes": [str(d) for d in dtypes],
        "scheduler_block_size": scheduler_block_size,
        "hash_block_size": hash_block_size,
        "cache_hit_alignment_tokens": cache_hit_alignment_tokens,
        "bytes_per_block": bytes_per_block,
    }
    return sched, vllm_config, kv_cache_config, hasher, meta


def make_request(i, rec, hasher):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    sp = SamplingParams(max_tokens=int(rec["output_len"]), ignore_eos=True, temperature=0.0)
    return Request(
        request_id=str(i),
        prompt_token_ids=[int(t) for t in rec["prompt_ids"]],
        sampling_params=sp,
        pooling_params=None,
        arrival_time=float(i),
        block_hasher=hasher,
    )


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    import vllm
    from vllm.v1.core.kv_cache_utils import get_group_id
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    trace = load_trace(a.trace)
    n = len(trace)
    arrival_steps = [0] * n
    if a.arrival_steps:
        with open(a.arrival_steps) as f:
            arrival_steps = [int(x) for x in json.load(f)]
        assert len(arrival_steps) == n

    sched, vllm_config, kvc, hasher, meta = build_scheduler(a)
    km = sched.kv_cache_manager
    coord = km.coordinator
    pool = km.block_pool
    managers = coord.single_type_managers
    ngroups = len(managers)
    sc = vllm_config.scheduler_config
    cc = vllm_config.cache_config
    kinds = [spec_kind(g.kv_cache_spec) for g in kvc.kv_cache_groups]
    out = open(a.out, "w")

    def emit(obj):
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")

    groups_desc = []
    for gi, (g, m) in enumerate(zip(kvc.kv_cache_groups, managers)):
        s = g.kv_cache_spec
        d = {
            "id": gi,
            "kind": kinds[gi],
            "spec": type(s).__name__,
            "manager": type(m).__name__,
            "layers": list(g.layer_names),
            "block_size": m.block_size,
            "page_size_bytes": s.page_size_bytes,
        }
        if kinds[gi] == "mamba":
            ms = s.first_spec if hasattr(s, "first_spec") else s
            d.update(
                mamba_cache_mode=ms.mamba_cache_mode,
                mamba_type=ms.mamba_type.name,
                real_page_size_bytes=ms.real_page_size_bytes,
                num_speculative_blocks=ms.num_speculative_blocks,
                num_prefill_checkpoint_blocks=ms.num_prefill_checkpoint_blocks,
                prefill_checkpoint_alignment=ms.prefill_checkpoint_alignment,
            )
        groups_desc.append(d)

    emit(
        {
            "type": "config",
            "vllm_version": vllm.__version__,
            "driver": "run_vllm_mamba.py",
            "trace": os.path.basename(a.trace),
            "arrival_steps": os.path.basename(a.arrival_steps) if a.arrival_steps else None,
            "num_requests": n,
            "model": "tiny Qwen3NextForCausalLM (config written by the driver)",
            "layer_types": meta["layer_types"],
            "layers": meta["layers"],
            "mamba_checkpoint": a.mamba_checkpoint,
            "mamba_state_shapes": meta["mamba_state_shapes"],
            "mamba_state_dtypes": meta["mamba_state_dtypes"],
            "config_after_post_init": meta["after_post_init"],
            "config_after_align_hybrid_block_size": meta["after_align_hybrid_block_size"],
            "block_size": cc.block_size,
            "mamba_block_size": cc.mamba_block_size,
            "mamba_cache_mode": cc.mamba_cache_mode,
            "num_kv_cache_groups": ngroups,
            "groups": groups_desc,
            "coordinator": type(coord).__name__,
            "num_gpu_blocks": kvc.num_blocks,
            "free_blocks_at_start": pool.get_num_free_blocks(),
            "kv_cache_tensors": [
                {"size": t.size, "layers": list(t.layers), "offset": t.offset} for t in kvc.kv_cache_tensors
            ],
            "kv_cache_layout": kvc.kv_cache_layout,
            "bytes_per_block": meta["bytes_per_block"],
            "kv_cache_config_path": meta["config_path"],
            "vllm_startup_check": meta["startup_check"],
            "prefix_cache_retention_interval": kvc.prefix_cache_retention_interval,
            "scheduler_block_size": meta["scheduler_block_size"],
            "hash_block_size": meta["hash_block_size"],
            "cache_hit_alignment_tokens": meta["cache_hit_alignment_tokens"],
            "enable_partial_hash_hits": bool(getattr(coord, "enable_partial_hash_hits", False)),
            "need_mamba_block_aligned_split": sched.need_mamba_block_aligned_split,
            "mamba_has_prefill_checkpoint_blocks": sched.mamba_has_prefill_checkpoint_blocks,
            "mamba_prefill_checkpoint_alignment": sched.mamba_prefill_checkpoint_alignment,
            "mamba_partial_cache_hit": sched.mamba_partial_cache_hit,
            "disable_hybrid_kv_cache_manager": sc.disable_hybrid_kv_cache_manager,
            "hma_disabled_by_unspecified_platform_then_reenabled": meta["hma_disabled_by_platform"],
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_scheduled_tokens": sched.max_num_scheduled_tokens,
            "max_in_flight_tokens": vllm_config.max_in_flight_tokens,
            "max_model_len": vllm_config.model_config.max_model_len,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "enable_prefix_caching": cc.enable_prefix_caching,
            "prefix_caching_hash_algo": cc.prefix_caching_hash_algo,
            "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
            "watermark": sc.watermark,
            "async_scheduling": bool(sc.async_scheduling),
            "policy": sc.policy,
            "speculative_config": None,
            "kv_transfer_config": None,
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            "step_convention": "a step = a schedule() call that scheduled tokens; arrivals are step indices; "
            "when nothing is unfinished the step index jumps to the next arrival",
        }
    )

    def cached_snapshot():
        entries = set()
        for b in pool.blocks:
            if b.block_hash is not None:
                entries.add((b.block_id, b.block_hash))
            for k in pool.cached_block_hashes_by_block.get(b.block_id, ()):
                entries.add((b.block_id, k))
        return entries

    def per_group_counts(entries):
        c = {str(g): 0 for g in range(ngroups)}
        for _, k in entries:
            c[str(get_group_id(k))] += 1
        return c

    def mamba_boundaries(entries):
        """Token boundaries of the cached Mamba states, per Mamba group (sorted)."""
        d = {}
        for bid, k in entries:
            g = get_group_id(k)
            if kinds[g] != "mamba":
                continue
            b = pool.blocks[bid]
            d.setdefault(str(g), []).append(b.block_hash_num_tokens if b.block_hash == k else None)
        return {g: sorted(v, key=lambda x: (x is None, x)) for g, v in sorted(d.items())}

    def group_blocks():
        gb = {}
        for gi, m in enumerate(managers):
            d = {}
            for rid, blks in m.req_to_blocks.items():
                if blks:
                    d[rid] = sum(1 for b in blks if not b.is_null)
            gb[str(gi)] = dict(sorted(d.items(), key=lambda kv: int(kv[0])))
        return gb

    def mamba_slots():
        """Per Mamba group and request: the block-table indices holding a real block."""
        ms = {}
        for gi, m in enumerate(managers):
            if kinds[gi] != "mamba":
                continue
            ms[str(gi)] = {
                rid: [j for j, b in enumerate(blks) if not b.is_null]
                for rid, blks in sorted(m.req_to_blocks.items(), key=lambda kv: int(kv[0]))
                if blks
            }
        return ms

    def group_table_len():
        return {
            str(gi): {rid: len(blks) for rid, blks in sorted(m.req_to_blocks.items(), key=lambda kv: int(kv[0])) if blks}
            for gi, m in enumerate(managers)
        }

    reqs, info = {}, {}
    order = sorted(range(n), key=lambda i: (arrival_steps[i], i))
    next_arrival = 0
    ever_admitted = set()
    step = 0
    calls = 0
    empty_calls = 0
    stuck = False
    while True:
        while next_arrival < n and arrival_steps[order[next_arrival]] <= step:
            i = order[next_arrival]
            r = make_request(i, trace[i], hasher)
            reqs[r.request_id] = r
            info[r.request_id] = {
                "type": "request",
                "id": r.request_id,
                "prompt_len": len(r.prompt_token_ids),
                "output_len": int(trace[i]["output_len"]),
                "arrival_step": arrival_steps[i],
                "first_scheduled_step": None,
                "first_token_step": None,
                "finish_step": None,
                "hit_tokens_first_admission": None,
                "hit_tokens_each_admission": [],
                "shared_prefix_boundary_each_admission": [],
                "admission_steps": [],
                "chunks": [],
                "preemptions": 0,
            }
            sched.add_request(r)
            next_arrival += 1
        if sched.get_num_unfinished_requests() == 0:
            if next_arrival < n:
                step = max(step, arrival_steps[order[next_arrival]])
                continue
            break
        if step >= a.max_steps:
            print(f"stopped at --max-steps {a.max_steps}", file=sys.stderr)
            break

        cached_before = cached_snapshot()
        free_before = pool.get_num_free_blocks()
        so = sched.schedule()
        calls += 1
        free_after_sched = pool.get_num_free_blocks()
        running_after_sched, waiting_after_sched = sched.get_request_counts()
        preempted = sorted(so.preempted_req_ids, key=int)
        for rid in preempted:
            info[rid]["preemptions"] += 1
        gblocks = group_blocks()
        gtable = group_table_len()
        mslots = mamba_slots()

        if so.total_num_scheduled_tokens == 0:
            empty_calls += 1
            sched.update_from_output(so, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
            if preempted:
                continue
            if next_arrival < n:
                step = max(step, arrival_steps[order[next_arrival]])
                continue
            print(f"stuck at step {step}: {sched.get_num_unfinished_requests()} unfinished", file=sys.stderr)
            stuck = True
            break

        before, kind = {}, {}
        cached = so.scheduled_cached_reqs
        for j, rid in enumerate(cached.req_ids):
            before[rid] = cached.num_computed_tokens[j]
            kind[rid] = "resumed" if rid in cached.resumed_req_ids else "running"
        for nrd in so.scheduled_new_reqs:
            before[nrd.req_id] = nrd.num_computed_tokens
            kind[nrd.req_id] = "resumed" if nrd.req_id in ever_admitted else "new"
        rows = []
        for rid, k in so.num_scheduled_tokens.items():
            row = {"id": rid, "tokens": k, "kind": kind[rid], "computed_before": before[rid]}
            inf = info[rid]
            if before[rid] < reqs[rid].num_prompt_tokens:
                inf["chunks"].append([step, before[rid], k])
            if kind[rid] in ("new", "resumed"):
                spb = reqs[rid].shared_prefix_boundary
                row["hit_tokens"] = before[rid]
                row["shared_prefix_boundary"] = spb
                inf["hit_tokens_each_admission"].append(before[rid])
                inf["shared_prefix_boundary_each_admission"].append(spb)
                inf["admission_steps"].append(step)
                if inf["hit_tokens_first_admission"] is None:
                    inf["hit_tokens_first_admission"] = before[rid]
                    inf["first_scheduled_step"] = step
                ever_admitted.add(rid)
            rows.append(row)

        ids = list(so.num_scheduled_tokens.keys())
        sampled, tokens = [], []
        for rid in ids:
            r = reqs[rid]
            if r.num_computed_tokens >= r.num_tokens:
                tokens.append([OUT_TOKEN_BASE + int(rid) * OUT_TOKEN_STRIDE + r.num_output_tokens])
                sampled.append(rid)
            else:
                tokens.append([])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: j for j, rid in enumerate(ids)}, sampled_token_ids=tokens)
        sched.update_from_output(so, mro)
        finished = []
        for rid in sampled:
            r = reqs[rid]
            if info[rid]["first_token_step"] is None:
                info[rid]["first_token_step"] = step
            if RequestStatus.is_finished(r.status):
                finished.append(rid)
                info[rid]["finish_step"] = step
        num_running, num_waiting = sched.get_request_counts()
        cached_after = cached_snapshot()
        total = so.total_num_scheduled_tokens
        emit(
            {
                "type": "step",
                "step": step,
                "num_scheduled_tokens": total,
                "batch_size": len(ids),
                "prefill_tokens": sum(k for k in so.num_scheduled_tokens.values() if k > 1),
                "decode_seqs": sum(1 for k in so.num_scheduled_tokens.values() if k == 1),
                "scheduled": rows,
                "preempted": preempted,
                "sampled": sampled,
                "finished": finished,
                "free_blocks_before": free_before,
                "free_blocks_after_schedule": free_after_sched,
                "free_blocks_after_update": pool.get_num_free_blocks(),
                "used_blocks_after_schedule": kvc.num_blocks - 1 - free_after_sched,
                "running_after_schedule": running_after_sched,
                "waiting_after_schedule": waiting_after_sched,
                "running_after_update": num_running,
                "waiting_after_update": num_waiting,
                "group_blocks": gblocks,
                "group_table_len": gtable,
                "mamba_state_slots": mslots,
                "cached_blocks": per_group_counts(cached_after),
                "cached_evictable": per_group_counts(
                    (bid, k) for bid, k in cached_after if pool.blocks[bid].ref_cnt == 0
                ),
                "newly_cached": per_group_counts(cached_after - cached_before),
                "evicted_cached": per_group_counts(cached_before - cached_after),
                "mamba_newly_cached_boundaries": mamba_boundaries(cached_after - cached_before),
                "mamba_evicted_boundaries": mamba_boundaries(cached_before - cached_after),
                "mamba_cached_boundaries": mamba_boundaries(cached_after),
            }
        )
        step += 1

    for rid in sorted(info, key=int):
        emit(info[rid])
    unfinished = [rid for rid in info if info[rid]["finish_step"] is None]
    emit(
        {
            "type": "summary",
            "steps": step,
            "last_step": step - 1,
            "nonempty_steps": calls - empty_calls,
            "schedule_calls": calls,
            "empty_schedule_calls": empty_calls,
            "requests": n,
            "finished": n - len(unfinished),
            "unfinished": sorted(unfinished, key=int),
            "stuck": stuck,
            "preemptions": sum(v["preemptions"] for v in info.values()),
            "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
            "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
        }
    )
    out.close()
    print(
        f"{a.out}: last step {step - 1}, {calls - empty_calls} non-empty steps, {n - len(unfinished)}/{n} finished, "
        f"{time.time() - t0:.1f}s",
        file=sys.stderr,
    )
    return 0 if not unfinished else 1


if __name__ == "__main__":
    sys.exit(main())
