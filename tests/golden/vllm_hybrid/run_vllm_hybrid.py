#!/usr/bin/env python3
"""Drive the REAL vLLM v1 scheduler (pure Python, no model, no GPU) for a HYBRID model -- full
attention + sliding-window attention layers, i.e. vLLM's hybrid KV cache manager
(HybridKVCacheCoordinator with a FullAttentionManager and SlidingWindowManager(s)) -- over a trace
and write a golden per-step schedule as JSON Lines.

Extends the vLLM golden driver run_vllm_scheduler.py (same trace format, same token model, same
step convention) and reuses the offload driver's approach of describing the tiny model's real
attention layers. What the vLLM drivers share (the trace and arrival reading, the token model, the
step loop, EngineCore._initialize_kv_caches' order, the output writers) is in ../vllm_common.py.
What is new:

* The KVCacheConfig is built by vLLM's own planning code, in the order EngineCore
  ._initialize_kv_caches (vllm/v1/engine/core.py) runs it, from a dict of per-layer specs as the
  GPU worker would report them (Attention.get_kv_cache_spec: FullAttentionSpec for a full layer,
  SlidingWindowSpec(sliding_window=W) for a sliding layer; 4 KV heads, head size 16, float16,
  block 16 -> 4096 B per block and layer):
    register_all_kvcache_specs -> resolve_kv_cache_layout -> get_global_kv_cache_groups (the
    default KVCacheConfigBuilder's grouping, kv_cache_planning.get_kv_cache_groups) ->
    get_kv_cache_configs (num_gpu_blocks_override = --num-gpu-blocks) ->
    generate_scheduler_kv_cache_config -> cache_config.block_size / num_gpu_blocks ->
    resolve_kv_cache_block_sizes -> resolve_cache_hit_alignment_tokens -> Scheduler(...,
    block_size=scheduler_block_size, hash_block_size=hash_block_size).
  get_kv_cache_configs first checks that one request of max_model_len fits in the pool (the
  engine refuses to start otherwise). When that check rejects a small pool, the driver calls the
  very function get_kv_cache_configs would have called next, the builder's
  get_kv_cache_config_from_groups(vllm_config, groups, num_blocks), and records the rejection
  in the config line ("vllm_startup_check").
* One setting is resolved by hand: VllmConfig turns the hybrid KV cache manager off on a
  platform without support_hybrid_kv_cache() (here: UnspecifiedPlatform, no GPU); CUDA/ROCm/CPU
  platforms return True, so the driver sets scheduler_config.disable_hybrid_kv_cache_manager =
  False after VllmConfig's post-init, which is the value it has on a GPU.
* Per step it also records, per KV cache group, the real (non-null) blocks each request holds
  after scheduling, and the prefix-cache hashed blocks per group after the step (how many,
  how many evictable, how many were newly hashed / evicted this step).

Each step: schedule(); every scheduled request whose computed tokens reach its known tokens
samples one token (distinct per request, never EOS); update_from_output(). Requests stop at
`output_len` tokens (SamplingParams max_tokens, ignore_eos). Nothing of vLLM is patched.

See README.md beside this file.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for vllm_common
import vllm_common as C

# Block hashes (NONE_HASH seed) and any set iteration: fix the salt so reruns are identical.
if __name__ == "__main__":
    C.pin_hash_seed()
C.offline_env()


def layer_name(i):
    return f"model.layers.{i}.self_attn.attn"


def parse_args(argv=None):
    p = C.parser(__doc__)
    C.add_run_args(p, num_gpu_blocks=5000)
    C.add_engine_args(p)
    C.add_retention_arg(p)
    p.add_argument("--sliding-window", type=int, default=32, help="W of every sliding-window layer")
    p.add_argument(
        "--sw-groups",
        type=int,
        default=1,
        help="number of sliding-window layers (1 full-attention layer besides). vLLM's grouping puts "
        "each in its own KV cache group (1 full + K sliding groups, like Gemma 3's 1 + 6)",
    )
    p.add_argument(
        "--no-full-layer",
        action="store_true",
        help="no full-attention layer: every layer slides (Mistral-7B-v0.1's shape); vLLM then runs one "
        "KV cache group under its UnitaryKVCacheCoordinator",
    )
    p.add_argument(
        "--layer-order",
        choices=["sliding-first", "full-first"],
        default="sliding-first",
        help="model layer order. sliding-first (default): the sliding layers come first, then the full "
        "layer, as in gpt-oss and Gemma 2/3 whose layer 0 is a sliding layer; vLLM's grouping then makes "
        "group 0 a sliding-window group. full-first: layer 0 is the full layer (group 0 = full)",
    )
    return p.parse_args(argv)


def spec_kind(spec):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    if isinstance(spec, FullAttentionSpec):
        return "full_attention"
    return type(spec).__name__


def build_scheduler(a):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    n_layers = a.sw_groups + (0 if a.no_full_layer else 1)
    model_dir = C.write_model_config(
        C.driver_model_dir(a, __file__, "tiny-llama-config"), dict(C.TINY_LLAMA, num_hidden_layers=n_layers)
    )
    model_config = C.model_config(model_dir, a.max_model_len)
    vllm_config = C.vllm_config(
        model_config,
        C.scheduler_config(a),
        C.cache_config(
            a.block_size, not a.no_prefix_caching, prefix_cache_retention_interval=a.prefix_cache_retention_interval
        ),
    )
    hma_disabled_by_platform = C.reenable_hybrid_kv_cache_manager(vllm_config)

    # ---- the worker's per-layer specs (Attention.get_kv_cache_spec) ----
    num_kv_heads = model_config.get_num_kv_heads(vllm_config.parallel_config)
    head_size = model_config.get_head_size()
    dtype = model_config.dtype
    full_idx = None if a.no_full_layer else a.sw_groups if a.layer_order == "sliding-first" else 0
    specs = {}
    for i in range(n_layers):
        if i == full_idx:
            specs[layer_name(i)] = FullAttentionSpec(
                block_size=a.block_size, num_kv_heads=num_kv_heads, head_size=head_size, dtype=dtype
            )
        else:
            specs[layer_name(i)] = SlidingWindowSpec(
                block_size=a.block_size,
                num_kv_heads=num_kv_heads,
                head_size=head_size,
                dtype=dtype,
                sliding_window=a.sliding_window,
            )

    # ---- EngineCore._initialize_kv_caches, in its order ----
    sched, kv_cache_config, hasher, meta = C.init_kv_caches(vllm_config, specs, a.num_gpu_blocks)
    meta["layers"] = {name: spec_kind(s) for name, s in specs.items()}
    meta["hma_disabled_by_platform"] = hma_disabled_by_platform
    return sched, vllm_config, kv_cache_config, hasher, meta


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    assert a.sw_groups >= 1

    trace = C.load_trace(a.trace)
    n = len(trace)
    arrival_steps = C.load_arrival_steps(a.arrival_steps, n)

    sched, vllm_config, kvc, hasher, meta = build_scheduler(a)
    out, emit = C.open_jsonl(a.out)
    loop = C.GroupLoop(sched, trace, arrival_steps, hasher, emit, kvc.num_blocks, a.max_steps)

    groups_desc = []
    for gi, (g, m) in enumerate(zip(kvc.kv_cache_groups, loop.managers)):
        s = g.kv_cache_spec
        d = C.group_desc(gi, g, m, spec_kind(s))
        if d["kind"] == "sliding_window":
            d["sliding_window"] = s.sliding_window
            d["extra_retained_tokens"] = s.extra_retained_tokens
            d["contiguous_blocks_for_hit"] = type(m)._contiguous_blocks_for_hit(s.sliding_window, m.block_size, False)
        d["max_admission_blocks_per_request"] = m.max_admission_blocks_per_request
        groups_desc.append(d)

    config = C.config_head("run_vllm_hybrid.py", a, n)
    config.update(
        block_size=a.block_size,
        sliding_window=a.sliding_window,
        sw_groups=a.sw_groups,
        layer_order=a.layer_order,
        no_full_layer=a.no_full_layer,
        layers=meta["layers"],
    )
    config.update(C.kv_cache_fields(loop, kvc, meta, groups_desc, retention_mode=True))
    config.update(
        C.hybrid_settings(
            loop,
            vllm_config,
            meta,
            free_order="vllm-0.33 (unhashed freed blocks to the free-queue front, hashed to the tail)",
        )
    )
    emit(config)

    loop.run()
    return loop.finish(out, t0)


if __name__ == "__main__":
    sys.exit(main())
