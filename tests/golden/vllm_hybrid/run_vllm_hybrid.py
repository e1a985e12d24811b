#!/usr/bin/env python3
"""Drive the REAL vLLM v1 scheduler (pure Python, no model, no GPU) for a HYBRID model -- full
attention + sliding-window attention layers, i.e. vLLM's hybrid KV cache manager
(HybridKVCacheCoordinator with a FullAttentionManager and SlidingWindowManager(s)) -- over a trace
and write a golden per-step schedule as JSON Lines.

Extends the vLLM golden driver run_vllm_scheduler.py (same trace format, same token model, same
step convention) and reuses the offload driver's approach of describing the tiny model's real
attention layers. What is new:

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

import argparse
import json
import os
import sys
import time

# Block hashes (NONE_HASH seed) and any set iteration: fix the salt so reruns are identical.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") is None:
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

OUT_TOKEN_BASE = 1 << 31
OUT_TOKEN_STRIDE = 1 << 20

TINY_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,  # set to 1 + --sw-groups below
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def layer_name(i):
    return f"model.layers.{i}.self_attn.attn"


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
    p.add_argument("--out", required=True, help="JSON Lines file to write")
    p.add_argument("--arrival-steps", help="JSON file: a list, the step index at which each request arrives")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--sliding-window", type=int, default=32, help="W of every sliding-window layer")
    p.add_argument(
        "--sw-groups",
        type=int,
        default=1,
        help="number of sliding-window layers (1 full-attention layer besides). vLLM's grouping puts "
        "each in its own KV cache group (1 full + K sliding groups, like Gemma 3's 1 + 6)",
    )
    p.add_argument(
        "--layer-order",
        choices=["sliding-first", "full-first"],
        default="sliding-first",
        help="model layer order. sliding-first (default): the sliding layers come first, then the full "
        "layer, as in gpt-oss and Gemma 2/3 whose layer 0 is a sliding layer; vLLM's grouping then makes "
        "group 0 a sliding-window group. full-first: layer 0 is the full layer (group 0 = full)",
    )
    p.add_argument("--num-gpu-blocks", type=int, default=5000, help="blocks, null block included (num_gpu_blocks_override)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument(
        "--prefix-cache-retention-interval",
        type=parse_retention,
        default=0,
        help="CacheConfig.prefix_cache_retention_interval: 0 (vLLM 0.33 default: only replay boundaries and "
        "shared-prefix junctions are kept for sliding-window groups), a positive multiple of the block size "
        "(also periodic checkpoints), or 'none' (dense: every block)",
    )
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--reserve-full-isl", choices=["default", "on", "off"], default="default")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--model-dir", default=None, help="dir for the tiny config.json (default: next to this script)")
    return p.parse_args(argv)


def load_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "prompt_ids" not in r or "output_len" not in r:
                sys.exit(f"{path}: every record needs prompt_ids and output_len")
            reqs.append(r)
    return reqs


def spec_kind(spec):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    if isinstance(spec, SlidingWindowSpec):
        return "sliding_window"
    if isinstance(spec, FullAttentionSpec):
        return "full_attention"
    return type(spec).__name__


def build_scheduler(a):
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.attention.backends.utils import _DEFAULT_LAYOUT_PREFERENCE, resolve_kv_cache_layout
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder
    from vllm.v1.core.kv_cache_planning import (
        _pool_bytes_per_block,
        get_global_kv_cache_groups,
        get_kv_cache_configs,
    )
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
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
    from vllm.v1.structured_output import StructuredOutputManager

    n_layers = 1 + a.sw_groups
    model_dir = a.model_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-llama-config")
    os.makedirs(model_dir, exist_ok=True)
    cfg = dict(TINY_MODEL_CONFIG, num_hidden_layers=n_layers)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f)

    model_config = ModelConfig(
        model=model_dir, dtype="float16", seed=42, skip_tokenizer_init=True, max_model_len=a.max_model_len
    )
    sched_kwargs = dict(
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_model_len=a.max_model_len,
        long_prefill_token_threshold=a.long_prefill_token_threshold,
        enable_chunked_prefill=not a.no_chunked_prefill,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    if a.reserve_full_isl != "default":
        sched_kwargs["scheduler_reserve_full_isl"] = a.reserve_full_isl == "on"
    scheduler_config = SchedulerConfig(**sched_kwargs)
    cache_config = CacheConfig(
        block_size=a.block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=not a.no_prefix_caching,
        prefix_cache_retention_interval=a.prefix_cache_retention_interval,
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        device_config=DeviceConfig(device="cpu"),
    )
    # UnspecifiedPlatform.support_hybrid_kv_cache() is False, so post-init turned the hybrid KV
    # cache manager off; on CUDA (support_hybrid_kv_cache() True) it resolves to False.
    hma_disabled_by_platform = vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False

    # ---- the worker's per-layer specs (Attention.get_kv_cache_spec) ----
    num_kv_heads = model_config.get_num_kv_heads(vllm_config.parallel_config)
    head_size = model_config.get_head_size()
    dtype = model_config.dtype
    full_idx = a.sw_groups if a.layer_order == "sliding-first" else 0
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
    register_all_kvcache_specs(vllm_config)
    # FlashAttention (the CUDA default backend) declares no supported layouts, so the worker
    # reports the default preference (get_supported_kv_cache_layouts).
    layout = resolve_kv_cache_layout(
        vllm_config, [[l.name for l in _DEFAULT_LAYOUT_PREFERENCE]], list(specs.values())
    )
    groups = get_global_kv_cache_groups(vllm_config, [dict(specs)])
    vllm_config.cache_config.num_gpu_blocks_override = a.num_gpu_blocks
    bytes_per_block = _pool_bytes_per_block(vllm_config, groups)
    available_memory = a.num_gpu_blocks * bytes_per_block  # replaced by the override anyway
    startup_check = "passed"
    try:
        kv_cache_configs = get_kv_cache_configs(vllm_config, [dict(specs)], [available_memory], groups)
        config_path = "get_kv_cache_configs"
    except ValueError as e:
        startup_check = "rejected: " + " ".join(str(e).split())
        builder = get_kv_cache_config_builder(vllm_config)
        kv_cache_configs = [builder.get_kv_cache_config_from_groups(vllm_config, groups, a.num_gpu_blocks)]
        config_path = "builder.get_kv_cache_config_from_groups (get_kv_cache_configs' memory check rejected the pool)"
    for c in kv_cache_configs:
        c.kv_cache_layout = vllm_config.cache_config.kv_cache_layout
    kv_cache_config = generate_scheduler_kv_cache_config(kv_cache_configs)
    vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
    participating = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups if g.kv_cache_spec.prefix_cacheable]
    vllm_config.cache_config.block_size = min(participating or [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups])
    update_kv_cache_capacity(vllm_config, kv_cache_config)
    vllm_config.validate_block_size()
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vllm_config)
    cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(
        kv_cache_config, vllm_config, scheduler_block_size, hash_block_size
    )
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
    if vllm_config.cache_config.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(hash_block_size, hash_fn, vllm_config.num_hash_lookahead_tokens)

    meta = {
        "layers": {name: spec_kind(s) for name, s in specs.items()},
        "layout": layout.name,
        "config_path": config_path,
        "startup_check": startup_check,
        "hma_disabled_by_platform": hma_disabled_by_platform,
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
        arrival_time=float(i),  # FCFS tie order = file order
        block_hasher=hasher,
    )


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    assert a.sw_groups >= 1
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
        assert len(arrival_steps) == n, "--arrival-steps needs one entry per request"

    sched, vllm_config, kvc, hasher, meta = build_scheduler(a)
    km = sched.kv_cache_manager
    coord = km.coordinator
    pool = km.block_pool
    managers = coord.single_type_managers
    ngroups = len(managers)
    sc = vllm_config.scheduler_config
    cc = vllm_config.cache_config

    out = open(a.out, "w")

    def emit(obj):
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")

    groups_desc = []
    for gi, (g, m) in enumerate(zip(kvc.kv_cache_groups, managers)):
        s = g.kv_cache_spec
        d = {
            "id": gi,
            "kind": spec_kind(s),
            "spec": type(s).__name__,
            "manager": type(m).__name__,
            "layers": list(g.layer_names),
            "block_size": m.block_size,
            "page_size_bytes": s.page_size_bytes,
        }
        if d["kind"] == "sliding_window":
            d["sliding_window"] = s.sliding_window
            d["extra_retained_tokens"] = s.extra_retained_tokens
            d["contiguous_blocks_for_hit"] = type(m)._contiguous_blocks_for_hit(s.sliding_window, m.block_size, False)
        d["max_admission_blocks_per_request"] = m.max_admission_blocks_per_request
        groups_desc.append(d)

    emit(
        {
            "type": "config",
            "vllm_version": vllm.__version__,
            "driver": "run_vllm_hybrid.py",
            "trace": os.path.basename(a.trace),
            "arrival_steps": os.path.basename(a.arrival_steps) if a.arrival_steps else None,
            "num_requests": n,
            "block_size": a.block_size,
            "sliding_window": a.sliding_window,
            "sw_groups": a.sw_groups,
            "layer_order": a.layer_order,
            "layers": meta["layers"],
            "num_kv_cache_groups": ngroups,
            "groups": groups_desc,
            "coordinator": type(coord).__name__,
            "num_gpu_blocks": kvc.num_blocks,
            "free_blocks_at_start": pool.get_num_free_blocks(),
            "kv_cache_tensors": [
                {
                    "size": t.size,
                    "layers": list(t.layers),
                    "layer_stride": t.layer_stride,
                    "block_stride": t.block_stride,
                    "offset": t.offset,
                }
                for t in kvc.kv_cache_tensors
            ],
            "kv_cache_layout": kvc.kv_cache_layout,
            "bytes_per_block": meta["bytes_per_block"],
            "kv_cache_config_path": meta["config_path"],
            "vllm_startup_check": meta["startup_check"],
            "prefix_cache_retention_interval": kvc.prefix_cache_retention_interval,
            "retention_mode": (
                "dense"
                if kvc.prefix_cache_retention_interval is None
                else ("sparse-semantic" if kvc.prefix_cache_retention_interval == 0 else "sparse-periodic")
            ),
            "scheduler_block_size": meta["scheduler_block_size"],
            "hash_block_size": meta["hash_block_size"],
            "cache_hit_alignment_tokens": meta["cache_hit_alignment_tokens"],
            "enable_partial_hash_hits": bool(getattr(coord, "enable_partial_hash_hits", False)),
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
            "free_order": "vllm-0.33 (unhashed freed blocks to the free-queue front, hashed to the tail)",
            "async_scheduling": bool(sc.async_scheduling),
            "policy": sc.policy,
            "use_v2_model_runner": bool(vllm_config.use_v2_model_runner),
            "speculative_config": None,
            "kv_transfer_config": None,
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            "step_convention": "a step = a schedule() call that scheduled tokens; arrivals are step indices; "
            "when nothing is unfinished the step index jumps to the next arrival",
        }
    )

    def cached_snapshot():
        """{(block_id, hash_key)} of every prefix-cache entry, and per-group counts."""
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

    def cached_evictable(entries):
        return per_group_counts((bid, k) for bid, k in entries if pool.blocks[bid].ref_cnt == 0)

    def group_blocks():
        gb = {}
        for gi, m in enumerate(managers):
            d = {}
            for rid, blks in m.req_to_blocks.items():
                real = sum(1 for b in blks if not b.is_null)
                if blks:
                    d[rid] = real
            gb[str(gi)] = dict(sorted(d.items(), key=lambda kv: int(kv[0])))
        return gb

    def group_table_len():
        gl = {}
        for gi, m in enumerate(managers):
            gl[str(gi)] = {
                rid: len(blks) for rid, blks in sorted(m.req_to_blocks.items(), key=lambda kv: int(kv[0])) if blks
            }
        return gl

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
            if kind[rid] in ("new", "resumed"):
                spb = reqs[rid].shared_prefix_boundary
                row["hit_tokens"] = before[rid]
                row["shared_prefix_boundary"] = spb
                inf = info[rid]
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
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: j for j, rid in enumerate(ids)},
            sampled_token_ids=tokens,
        )
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
                "cached_blocks": per_group_counts(cached_after),
                "cached_evictable": cached_evictable(cached_after),
                "newly_cached": per_group_counts(cached_after - cached_before),
                "evicted_cached": per_group_counts(cached_before - cached_after),
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
