#!/usr/bin/env python3
"""Drive the REAL vLLM 0.33.0 v1 scheduler (pure Python, no model, no GPU) for a HYBRID model that
mixes full attention with Mamba / linear-attention (Gated DeltaNet) layers, as Qwen3-Next does,
i.e. vLLM's HybridKVCacheCoordinator with a FullAttentionManager and MambaManager(s), and write a
per-step schedule as JSON Lines.

Modelled on ../vllm_hybrid/run_vllm_hybrid.py (same trace format, token model, step convention
and output format); what the two share with the other vLLM drivers (trace and arrival reading, the
token model, the step loop with its per-group ledgers, EngineCore._initialize_kv_caches' order, the
output writers) is in ../vllm_common.py. What is different:

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

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for vllm_common
import vllm_common as C

if __name__ == "__main__":
    C.pin_hash_seed()
C.offline_env()

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


def parse_args(argv=None):
    p = C.parser(__doc__)
    C.add_run_args(p, num_gpu_blocks=5000)
    C.add_engine_args(p, chunked_prefill_flag=False, block_size_help="--block-size (attention and, in align mode, Mamba)")
    C.add_retention_arg(p)
    p.add_argument("--linear-layers", type=int, default=1, help="GDN layers beside the one full-attention layer")
    p.add_argument("--layer-order", choices=["linear-first", "full-first"], default="linear-first",
                   help="linear-first (Qwen3-Next: layers 0..K-1 linear, K full -> Mamba groups first)")
    p.add_argument("--mamba-checkpoint", choices=["none", "grid", "one"], default="none")
    p.add_argument("--prefix-match-unit", type=int, default=None)
    return p.parse_args(argv)


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

    from vllm.model_executor.layers.mamba.abstract import get_mamba_prefill_checkpoint_grid
    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec

    K = a.linear_layers
    n_layers = K + 1
    full_idx = K if a.layer_order == "linear-first" else 0
    layer_types = ["full_attention" if i == full_idx else "linear_attention" for i in range(n_layers)]
    cfg = dict(TINY_QWEN3_NEXT, num_hidden_layers=n_layers, full_attention_interval=n_layers, layer_types=layer_types)
    model_dir = C.write_model_config(C.driver_model_dir(a, __file__, "tiny-qwen3-next-config"), cfg)

    model_config = C.model_config(model_dir, a.max_model_len, dtype="auto")
    cache_kwargs = dict(prefix_cache_retention_interval=a.prefix_cache_retention_interval)
    if a.prefix_match_unit is not None:
        cache_kwargs["prefix_match_unit"] = a.prefix_match_unit
    vllm_config = C.vllm_config(
        model_config, C.scheduler_config(a), C.cache_config(a.block_size, not a.no_prefix_caching, **cache_kwargs)
    )
    cc = vllm_config.cache_config
    after_post_init = {"mamba_cache_mode": cc.mamba_cache_mode, "mamba_block_size": cc.mamba_block_size, "block_size": cc.block_size}
    hma_disabled_by_platform = C.reenable_hybrid_kv_cache_manager(vllm_config)

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

    sched, kv_cache_config, hasher, meta = C.init_kv_caches(vllm_config, specs, a.num_gpu_blocks)
    meta.update(
        layer_types=layer_types,
        layers={name: spec_kind(s) for name, s in specs.items()},
        hma_disabled_by_platform=hma_disabled_by_platform,
        after_post_init=after_post_init,
        after_align_hybrid_block_size=after_align,
        mamba_state_shapes=[list(s) for s in shapes],
        mamba_state_dtypes=[str(d) for d in dtypes],
    )
    return sched, vllm_config, kv_cache_config, hasher, meta


class MambaLoop(C.GroupLoop):
    """GroupLoop plus each request's prefill chunks, the Mamba groups' state slots and the token
    boundaries of their cached states."""

    def __init__(self, kinds, *args, **kw):
        super().__init__(*args, **kw)
        self.kinds = kinds

    def request_fields(self):
        f = super().request_fields()
        f["chunks"] = []
        return f

    def on_row(self, rid, tokens, computed_before):
        if computed_before < self.reqs[rid].num_prompt_tokens:
            self.info[rid]["chunks"].append([self.step, computed_before, tokens])

    def mamba_boundaries(self, entries):
        """Token boundaries of the cached Mamba states, per Mamba group (sorted)."""
        from vllm.v1.core.kv_cache_utils import get_group_id

        d = {}
        for bid, k in entries:
            g = get_group_id(k)
            if self.kinds[g] != "mamba":
                continue
            b = self.pool.blocks[bid]
            d.setdefault(str(g), []).append(b.block_hash_num_tokens if b.block_hash == k else None)
        return {g: sorted(v, key=lambda x: (x is None, x)) for g, v in sorted(d.items())}

    def table_fields(self):
        """Per Mamba group and request: the block-table indices holding a real block."""
        ms = {}
        for gi, m in enumerate(self.managers):
            if self.kinds[gi] != "mamba":
                continue
            ms[str(gi)] = {
                rid: [j for j, b in enumerate(blks) if not b.is_null]
                for rid, blks in sorted(m.req_to_blocks.items(), key=lambda kv: int(kv[0]))
                if blks
            }
        return {"mamba_state_slots": ms}

    def cache_fields(self, before, after):
        return {
            "mamba_newly_cached_boundaries": self.mamba_boundaries(after - before),
            "mamba_evicted_boundaries": self.mamba_boundaries(before - after),
            "mamba_cached_boundaries": self.mamba_boundaries(after),
        }


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()

    trace = C.load_trace(a.trace)
    n = len(trace)
    arrival_steps = C.load_arrival_steps(a.arrival_steps, n)

    sched, vllm_config, kvc, hasher, meta = build_scheduler(a)
    cc = vllm_config.cache_config
    kinds = [spec_kind(g.kv_cache_spec) for g in kvc.kv_cache_groups]
    out, emit = C.open_jsonl(a.out)
    loop = MambaLoop(kinds, sched, trace, arrival_steps, hasher, emit, kvc.num_blocks, a.max_steps)

    groups_desc = []
    for gi, (g, m) in enumerate(zip(kvc.kv_cache_groups, loop.managers)):
        s = g.kv_cache_spec
        d = C.group_desc(gi, g, m, kinds[gi])
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

    config = C.config_head("run_vllm_mamba.py", a, n)
    config.update(
        model="tiny Qwen3NextForCausalLM (config written by the driver)",
        layer_types=meta["layer_types"],
        layers=meta["layers"],
        mamba_checkpoint=a.mamba_checkpoint,
        mamba_state_shapes=meta["mamba_state_shapes"],
        mamba_state_dtypes=meta["mamba_state_dtypes"],
        config_after_post_init=meta["after_post_init"],
        config_after_align_hybrid_block_size=meta["after_align_hybrid_block_size"],
        block_size=cc.block_size,
        mamba_block_size=cc.mamba_block_size,
        mamba_cache_mode=cc.mamba_cache_mode,
    )
    config.update(C.kv_cache_fields(loop, kvc, meta, groups_desc, tensor_strides=False))
    config.update(
        need_mamba_block_aligned_split=sched.need_mamba_block_aligned_split,
        mamba_has_prefill_checkpoint_blocks=sched.mamba_has_prefill_checkpoint_blocks,
        mamba_prefill_checkpoint_alignment=sched.mamba_prefill_checkpoint_alignment,
        mamba_partial_cache_hit=sched.mamba_partial_cache_hit,
    )
    config.update(C.hybrid_settings(loop, vllm_config, meta, omit={"use_v2_model_runner"}))
    emit(config)

    loop.run()
    return loop.finish(out, t0)


if __name__ == "__main__":
    sys.exit(main())
