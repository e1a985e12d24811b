"""Code shared by the vLLM golden drivers (vllm_hybrid/run_vllm_hybrid.py, vllm_mamba/run_vllm_mamba.py,
vllm_offload/run_vllm_offload.py and vllm-priority/driver.py, which also writes the vllm-lora schedules).
Each driver adds this folder to sys.path and imports it; what each driver builds itself (its model's
per-layer KV cache specs, its KVCacheConfig or connector, its own step and request fields, its config
and summary lines) stays in the driver.

What is here:
  * pin_hash_seed / offline_env: the re-execution with PYTHONHASHSEED=0 (block hashes derive NONE_HASH
    from it, and vLLM iterates sets of request-id strings) and the offline/quiet environment, both
    before vLLM is imported (nothing here imports vLLM at module level);
  * the fake model: sampled_token (token j of request r is 2**31 + r * 2**20 + j: distinct per request,
    never EOS, never a prompt id) and TINY_LLAMA, the config.json of a tiny Llama (no weights);
  * configuration: write_model_config, model_config, scheduler_config, cache_config, vllm_config,
    reenable_hybrid_kv_cache_manager, make_scheduler, request_block_hasher, and init_kv_caches
    (EngineCore._initialize_kv_caches' order, from a dict of per-layer specs, for the hybrid manager);
  * traces: load_trace, load_arrival_steps, make_request (ignore_eos, max_tokens = output_len,
    arrival_time = line number, so FCFS ties keep file order);
  * argparse: add_run_args / add_engine_args (the flags the drivers share), add_retention_arg;
  * StepLoop: the step loop and its convention (arrivals, schedule(), the scheduled rows and their
    admissions, the fake model's samples, update_from_output(), finishes, the step and request lines),
    with hooks for each driver's own fields; GroupLoop adds the per-KV-cache-group ledgers of the
    hybrid-manager drivers (hybrid, Mamba);
  * output: open_jsonl / jsonl_line, scheduler_settings (the config line's scheduler settings, in one
    order), config_head / kv_cache_fields / hybrid_settings (config-line parts of the hybrid-manager
    drivers).
"""
import argparse
import json
import os
import sys

# ---------------------------------------------------------------- environment (before vLLM is imported)


def pin_hash_seed():
    """Re-execute this process with PYTHONHASHSEED=0 unless it is set (call from `if __name__ == "__main__"`
    before vLLM is imported): block hashes (NONE_HASH) and any iteration of a set of strings depend on it."""
    if os.environ.get("PYTHONHASHSEED") is None:
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)


def offline_env():
    """No hub access, vLLM/torch logging at WARNING/ERROR (variables already set are kept)."""
    for k, v in (
        ("HF_HUB_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("VLLM_LOGGING_LEVEL", "WARNING"),
        ("TORCH_CPP_LOG_LEVEL", "ERROR"),
    ):
        os.environ.setdefault(k, v)


# ---------------------------------------------------------------- the fake model

OUT_TOKEN_BASE = 1 << 31
OUT_TOKEN_STRIDE = 1 << 20


def sampled_token(rid, j):
    """Output token j of request `rid`: far above every prompt id and distinct per (request, position), so
    two requests never share an output block."""
    return OUT_TOKEN_BASE + int(rid) * OUT_TOKEN_STRIDE + j


# A tiny Llama config.json, enough for ModelConfig: no weights, nothing downloaded. Attention: 4 KV heads,
# head size 64 / 4 = 16, float16 (4096 bytes per 16-token block and layer).
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


# ---------------------------------------------------------------- configuration


def write_model_config(model_dir, cfg):
    """model_dir/config.json (ModelConfig needs a local model directory)."""
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f)
    return model_dir


def driver_model_dir(a, script, name):
    """--model-dir, or `name` beside the driver script."""
    return a.model_dir or os.path.join(os.path.dirname(os.path.abspath(script)), name)


def model_config(model_dir, max_model_len, dtype="float16"):
    from vllm.config import ModelConfig

    return ModelConfig(model=model_dir, dtype=dtype, seed=42, skip_tokenizer_init=True, max_model_len=max_model_len)


def scheduler_config(a=None, **kw):
    """SchedulerConfig, synchronous, decoder-only. With `a` (add_run_args + add_engine_args): its sequence
    and token limits, long-prefill threshold, chunked prefill (on unless --no-chunked-prefill) and
    --reserve-full-isl (vLLM's default unless on/off); `kw` overrides or adds fields."""
    from vllm.config import SchedulerConfig

    args = {}
    if a is not None:
        args = dict(
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=a.max_num_batched_tokens,
            max_model_len=a.max_model_len,
            long_prefill_token_threshold=a.long_prefill_token_threshold,
            enable_chunked_prefill=not getattr(a, "no_chunked_prefill", False),
        )
        if a.reserve_full_isl != "default":
            args["scheduler_reserve_full_isl"] = a.reserve_full_isl == "on"
    args.update(async_scheduling=False, is_encoder_decoder=False)
    args.update(kw)
    return SchedulerConfig(**args)


def cache_config(block_size, enable_prefix_caching, **kw):
    from vllm.config import CacheConfig

    return CacheConfig(
        block_size=block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=enable_prefix_caching,
        **kw,
    )


def vllm_config(model, scheduler, cache, **kw):
    """VllmConfig on DeviceConfig("cpu") (the scheduler never touches a device)."""
    from vllm.config import DeviceConfig, VllmConfig

    return VllmConfig(
        scheduler_config=scheduler, model_config=model, cache_config=cache, device_config=DeviceConfig(device="cpu"), **kw
    )


def reenable_hybrid_kv_cache_manager(vc):
    """VllmConfig's post-init turns the hybrid KV cache manager off on a platform without
    support_hybrid_kv_cache() (here: UnspecifiedPlatform, no GPU); CUDA/ROCm/CPU platforms return True and
    leave it on. Set it back to its value on a GPU; returns what post-init had set."""
    disabled_by_platform = vc.scheduler_config.disable_hybrid_kv_cache_manager
    vc.scheduler_config.disable_hybrid_kv_cache_manager = False
    return disabled_by_platform


def make_scheduler(vc, kv_cache_config, **kw):
    """vLLM's own v1 Scheduler, as the engine core builds it (log_stats on)."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    return Scheduler(
        vllm_config=vc,
        kv_cache_config=kv_cache_config,
        structured_output_manager=StructuredOutputManager(vc),
        log_stats=True,
        **kw,
    )


def request_block_hasher(block_size):
    """init_none_hash(sha256) and the request block hasher, as EngineCore.__init__ does (default algorithm)."""
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    init_none_hash(sha256)
    return get_request_block_hasher(block_size, sha256)


def init_kv_caches(vc, specs, num_gpu_blocks):
    """EngineCore._initialize_kv_caches (vllm/v1/engine/core.py), in its order, from `specs` (layer name ->
    KV cache spec, as the GPU worker reports them): register_all_kvcache_specs -> resolve_kv_cache_layout
    -> get_global_kv_cache_groups -> get_kv_cache_configs (num_gpu_blocks_override = num_gpu_blocks) ->
    generate_scheduler_kv_cache_config -> cache_config.block_size / num_gpu_blocks ->
    resolve_kv_cache_block_sizes -> resolve_cache_hit_alignment_tokens -> Scheduler(..., block_size=
    scheduler_block_size, hash_block_size=hash_block_size), and the request block hasher.

    get_kv_cache_configs first checks that one request of max_model_len fits in the pool (the engine
    refuses to start otherwise). When that check rejects the pool, the very function it would have called
    next, the builder's get_kv_cache_config_from_groups(vllm_config, groups, num_blocks), is called and
    the rejection is returned in meta["startup_check"].

    Returns (scheduler, kv_cache_config, hasher or None without prefix caching, meta)."""
    from vllm.utils.hashing import get_hash_fn_by_name
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
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs

    cc = vc.cache_config
    register_all_kvcache_specs(vc)
    # FlashAttention (the CUDA default backend) declares no supported layouts, so the worker reports the
    # default preference (get_supported_kv_cache_layouts).
    layout = resolve_kv_cache_layout(vc, [[l.name for l in _DEFAULT_LAYOUT_PREFERENCE]], list(specs.values()))
    groups = get_global_kv_cache_groups(vc, [dict(specs)])
    cc.num_gpu_blocks_override = num_gpu_blocks
    bytes_per_block = _pool_bytes_per_block(vc, groups)
    available_memory = num_gpu_blocks * bytes_per_block  # replaced by the override anyway
    startup_check = "passed"
    try:
        kv_cache_configs = get_kv_cache_configs(vc, [dict(specs)], [available_memory], groups)
        config_path = "get_kv_cache_configs"
    except ValueError as e:
        startup_check = "rejected: " + " ".join(str(e).split())
        builder = get_kv_cache_config_builder(vc)
        kv_cache_configs = [builder.get_kv_cache_config_from_groups(vc, groups, num_gpu_blocks)]
        config_path = "builder.get_kv_cache_config_from_groups (get_kv_cache_configs' memory check rejected the pool)"
    for c in kv_cache_configs:
        c.kv_cache_layout = cc.kv_cache_layout
    kv_cache_config = generate_scheduler_kv_cache_config(kv_cache_configs)
    cc.num_gpu_blocks = kv_cache_config.num_blocks
    participating = [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups if g.kv_cache_spec.prefix_cacheable]
    cc.block_size = min(participating or [g.kv_cache_spec.block_size for g in kv_cache_config.kv_cache_groups])
    update_kv_cache_capacity(vc, kv_cache_config)
    vc.validate_block_size()
    scheduler_block_size, hash_block_size = resolve_kv_cache_block_sizes(kv_cache_config, vc)
    cache_hit_alignment_tokens = resolve_cache_hit_alignment_tokens(kv_cache_config, vc, scheduler_block_size, hash_block_size)
    for c in (*kv_cache_configs, kv_cache_config):
        c.hash_block_size = hash_block_size
        c.cache_hit_alignment_tokens = cache_hit_alignment_tokens
    assert kv_cache_config.num_blocks == num_gpu_blocks, (kv_cache_config.num_blocks, num_gpu_blocks)

    sched = make_scheduler(
        vc, kv_cache_config, include_finished_set=False, block_size=scheduler_block_size, hash_block_size=hash_block_size
    )
    hasher = None
    if cc.enable_prefix_caching:
        hash_fn = get_hash_fn_by_name(cc.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        hasher = get_request_block_hasher(hash_block_size, hash_fn, vc.num_hash_lookahead_tokens)
    meta = {
        "layout": layout.name,
        "config_path": config_path,
        "startup_check": startup_check,
        "scheduler_block_size": scheduler_block_size,
        "hash_block_size": hash_block_size,
        "cache_hit_alignment_tokens": cache_hit_alignment_tokens,
        "bytes_per_block": bytes_per_block,
    }
    return sched, kv_cache_config, hasher, meta


# ---------------------------------------------------------------- traces


def load_trace(path):
    """cachesim's native JSONL: one request per non-blank line (`prompt_ids`, `output_len`, optional
    fields); request i (line i of the records, from 0) gets request id str(i)."""
    recs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            r = json.loads(line)
            for key in ("prompt_ids", "output_len"):
                if key not in r:
                    sys.exit(f"{path}:{n}: no {key}")
            recs.append(r)
    return recs


def load_arrival_steps(path, n):
    """--arrival-steps: a JSON list, the step at which each request arrives (all at 0 without a file)."""
    if not path:
        return [0] * n
    with open(path) as f:
        steps = [int(x) for x in json.load(f)]
    assert len(steps) == n, "--arrival-steps needs one entry per request"
    return steps


def make_request(i, rec, hasher, **kw):
    """Request `str(i)`: greedy, ignore_eos, max_tokens = output_len, arrival_time = i (FCFS ties keep file
    order); kw adds Request fields (priority, lora_request)."""
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
        **kw,
    )


# ---------------------------------------------------------------- argparse


def parser(doc):
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_run_args(p, num_gpu_blocks):
    """--trace, --out, --num-gpu-blocks, --max-num-seqs, --max-num-batched-tokens, --max-steps."""
    p.add_argument("--trace", required=True, help="native JSONL (prompt_ids, output_len); request id = line number")
    p.add_argument("--out", required=True, help="JSON Lines file to write")
    p.add_argument("--num-gpu-blocks", type=int, default=num_gpu_blocks, help="KV blocks, the null block included (num_gpu_blocks_override)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-steps", type=int, default=100_000)


def add_engine_args(p, chunked_prefill_flag=True, block_size_help="tokens per KV block"):
    """--arrival-steps, --block-size, --max-model-len, --long-prefill-token-threshold, --no-prefix-caching,
    --no-chunked-prefill (unless chunked_prefill_flag is False: always on), --reserve-full-isl, --model-dir."""
    p.add_argument("--arrival-steps", help="JSON file: a list, the step index at which each request arrives")
    p.add_argument("--block-size", type=int, default=16, help=block_size_help)
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--no-prefix-caching", action="store_true")
    if chunked_prefill_flag:
        p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--reserve-full-isl", choices=["default", "on", "off"], default="default")
    p.add_argument("--model-dir", default=None, help="dir for the tiny config.json (default: next to the driver)")


def parse_retention(s):
    if s.lower() == "none":
        return None
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("retention interval must be >= 0 or 'none'")
    return v


def add_retention_arg(p):
    p.add_argument(
        "--prefix-cache-retention-interval",
        type=parse_retention,
        default=0,
        help="CacheConfig.prefix_cache_retention_interval: 0 (vLLM 0.33 default: only replay boundaries and "
        "shared-prefix junctions are kept for sliding-window and Mamba groups), a positive multiple of the "
        "block size (also periodic checkpoints), or 'none' (dense: every block)",
    )


# ---------------------------------------------------------------- output


def jsonl_line(obj):
    return json.dumps(obj, separators=(",", ":")) + "\n"


def open_jsonl(path):
    """(file, emit): emit(o) writes o as one compact JSON line."""
    out = open(path, "w")

    def emit(obj):
        out.write(jsonl_line(obj))

    return out, emit


STEP_CONVENTION = (
    "a step = a schedule() call that scheduled tokens; arrivals are step indices; "
    "when nothing is unfinished the step index jumps to the next arrival"
)


def scheduler_settings(sched, vc, free_order=None, omit=()):
    """The scheduler settings of a config line, in the one order every driver writes them; `omit`: keys a
    driver does not write; free_order: its value (left out when None)."""
    sc, cc = vc.scheduler_config, vc.cache_config
    getters = (
        ("max_num_seqs", lambda: sc.max_num_seqs),
        ("max_num_batched_tokens", lambda: sc.max_num_batched_tokens),
        ("max_num_scheduled_tokens", lambda: sched.max_num_scheduled_tokens),
        ("max_in_flight_tokens", lambda: vc.max_in_flight_tokens),
        ("max_model_len", lambda: vc.model_config.max_model_len),
        ("long_prefill_token_threshold", lambda: sc.long_prefill_token_threshold),
        ("enable_chunked_prefill", lambda: sc.enable_chunked_prefill),
        ("enable_prefix_caching", lambda: cc.enable_prefix_caching),
        ("prefix_caching_hash_algo", lambda: cc.prefix_caching_hash_algo),
        ("scheduler_reserve_full_isl", lambda: sc.scheduler_reserve_full_isl),
        ("watermark", lambda: sc.watermark),
        ("free_order", lambda: free_order),
        ("async_scheduling", lambda: bool(sc.async_scheduling)),
        ("policy", lambda: sc.policy),
        ("use_v2_model_runner", lambda: bool(vc.use_v2_model_runner)),
    )
    omit = set(omit) | ({"free_order"} if free_order is None else set())
    return {k: get() for k, get in getters if k not in omit}


def config_head(driver, a, n):
    """First fields of a hybrid-manager driver's config line."""
    import vllm

    return {
        "type": "config",
        "vllm_version": vllm.__version__,
        "driver": driver,
        "trace": os.path.basename(a.trace),
        "arrival_steps": os.path.basename(a.arrival_steps) if a.arrival_steps else None,
        "num_requests": n,
    }


def group_desc(gi, g, m, kind):
    """A KV cache group of the config line's `groups` (the driver adds its kind's own fields)."""
    s = g.kv_cache_spec
    return {
        "id": gi,
        "kind": kind,
        "spec": type(s).__name__,
        "manager": type(m).__name__,
        "layers": list(g.layer_names),
        "block_size": m.block_size,
        "page_size_bytes": s.page_size_bytes,
    }


def kv_cache_fields(loop, kvc, meta, groups_desc, tensor_strides=True, retention_mode=False):
    """The KV cache part of a hybrid-manager driver's config line (groups, pool, tensors, how the config
    was built, retention, block sizes)."""
    coord = loop.sched.kv_cache_manager.coordinator
    tensor_keys = ("size", "layers", "layer_stride", "block_stride", "offset") if tensor_strides else ("size", "layers", "offset")
    f = {
        "num_kv_cache_groups": loop.ngroups,
        "groups": groups_desc,
        "coordinator": type(coord).__name__,
        "num_gpu_blocks": kvc.num_blocks,
        "free_blocks_at_start": loop.pool.get_num_free_blocks(),
        "kv_cache_tensors": [
            {k: (list(t.layers) if k == "layers" else getattr(t, k)) for k in tensor_keys} for t in kvc.kv_cache_tensors
        ],
        "kv_cache_layout": kvc.kv_cache_layout,
        "bytes_per_block": meta["bytes_per_block"],
        "kv_cache_config_path": meta["config_path"],
        "vllm_startup_check": meta["startup_check"],
        "prefix_cache_retention_interval": kvc.prefix_cache_retention_interval,
    }
    if retention_mode:
        r = kvc.prefix_cache_retention_interval
        f["retention_mode"] = "dense" if r is None else ("sparse-semantic" if r == 0 else "sparse-periodic")
    f.update(
        scheduler_block_size=meta["scheduler_block_size"],
        hash_block_size=meta["hash_block_size"],
        cache_hit_alignment_tokens=meta["cache_hit_alignment_tokens"],
        enable_partial_hash_hits=bool(getattr(coord, "enable_partial_hash_hits", False)),
    )
    return f


def hybrid_settings(loop, vc, meta, **settings):
    """The last fields of a hybrid-manager driver's config line: the hybrid manager's switch, the scheduler
    settings (scheduler_settings(**settings)), no speculation or connector, the hash seed, the step
    convention."""
    f = {
        "disable_hybrid_kv_cache_manager": vc.scheduler_config.disable_hybrid_kv_cache_manager,
        "hma_disabled_by_unspecified_platform_then_reenabled": meta["hma_disabled_by_platform"],
    }
    f.update(scheduler_settings(loop.sched, vc, **settings))
    f.update(
        speculative_config=None,
        kv_transfer_config=None,
        pythonhashseed=os.environ.get("PYTHONHASHSEED"),
        step_convention=STEP_CONVENTION,
    )
    return f


# ---------------------------------------------------------------- the step loop


class StepLoop:
    """Steps vLLM's scheduler over a trace with the fake model, emitting one `step` line per step:

        each step: queue the requests whose arrival step is <= the step (in (arrival step, line) order);
                   so = scheduler.schedule()
                   every scheduled request whose computed tokens reach its known tokens samples one
                   token (sampled_token: distinct per request, never EOS)
                   scheduler.update_from_output(so, model_runner_output)

    Convention (STEP_CONVENTION): a step is a schedule() call that scheduled tokens; a call that
    scheduled nothing is retried at the same step index if it preempted, else the index jumps to the
    next arrival (or the run is stuck); when nothing is unfinished the index jumps to the next arrival.
    With EMPTY_CALLS_ARE_STEPS every engine iteration is a step (its line has `empty`), and the driver's
    has_work / after_step decide when the engine idles.

    Hooks (no-ops by default) add each driver's own fields and instrumentation; on_idle, on_empty_call,
    on_stuck and on_max_steps may be overridden to refuse instead. After run(): request_lines() emits the
    `request` lines; unfinished(), counters and totals serve the summary."""

    EMPTY_CALLS_ARE_STEPS = False

    def __init__(self, sched, trace, arrival_steps, hasher, emit, num_blocks, max_steps):
        self.sched = sched
        self.pool = sched.kv_cache_manager.block_pool
        self.trace, self.n, self.arrival_steps = trace, len(trace), arrival_steps
        self.hasher, self.emit, self.num_blocks, self.max_steps = hasher, emit, num_blocks, max_steps
        self.order = sorted(range(self.n), key=lambda i: (arrival_steps[i], i))
        self.next_arrival = 0
        self.reqs, self.info = {}, {}
        self.ever_admitted = set()
        self.step = 0
        self.calls = 0
        self.empty_calls = 0
        self.stuck = False

    # ---- hooks
    def request_kwargs(self, i, rec):
        """Extra Request fields for record i."""
        return {}

    def request_fields(self):
        """The driver's own fields of a request line (between hit_tokens_each_admission and preemptions)."""
        return {}

    def on_request_added(self, r):
        pass

    def has_work(self):
        return self.sched.get_num_unfinished_requests() > 0

    def before_schedule(self):
        pass

    def after_schedule(self, so):
        pass

    def on_row(self, rid, tokens, computed_before):
        """Every scheduled row, before its admission fields."""

    def admission_fields(self, rid, computed_before):
        """Fields of a `new`/`resumed` row (and the driver's bookkeeping of the admission)."""
        return {"hit_tokens": computed_before}

    def connector_output(self, so):
        """Extra ModelRunnerOutput fields (a KV connector's output)."""
        return {}

    def step_fields_mid(self, so):
        """The driver's step fields between `finished` and `free_blocks_before`."""
        return {}

    def step_fields_tail(self, so):
        """The driver's step fields after `waiting_after_update`."""
        return {}

    def after_step(self, so, total, preempted):
        """After a step's line; True stops the loop."""
        return False

    # ---- convention
    def pending(self):
        return self.next_arrival < self.n

    def on_idle(self):
        """Nothing runnable and requests still to arrive: jump to the next arrival."""
        self.step = max(self.step, self.arrival_steps[self.order[self.next_arrival]])

    def on_stuck(self):
        print(f"stuck at step {self.step}: {self.sched.get_num_unfinished_requests()} unfinished", file=sys.stderr)
        self.stuck = True

    def on_max_steps(self):
        print(f"stopped at --max-steps {self.max_steps}", file=sys.stderr)

    def on_empty_call(self, so, preempted):
        """A schedule() call that scheduled nothing (not a step); True: go on, False: stop."""
        from vllm.v1.outputs import ModelRunnerOutput

        self.sched.update_from_output(so, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
        if preempted:
            return True
        if self.pending():
            self.on_idle()
            return True
        self.on_stuck()
        return False

    def queue_arrivals(self):
        while self.next_arrival < self.n and self.arrival_steps[self.order[self.next_arrival]] <= self.step:
            i = self.order[self.next_arrival]
            rec = self.trace[i]
            r = make_request(i, rec, self.hasher, **self.request_kwargs(i, rec))
            self.reqs[r.request_id] = r
            info = {
                "type": "request",
                "id": r.request_id,
                "prompt_len": len(r.prompt_token_ids),
                "output_len": int(rec["output_len"]),
                "arrival_step": self.arrival_steps[i],
                "first_scheduled_step": None,
                "first_token_step": None,
                "finish_step": None,
                "hit_tokens_first_admission": None,
                "hit_tokens_each_admission": [],
            }
            info.update(self.request_fields())
            info["preemptions"] = 0
            self.info[r.request_id] = info
            self.on_request_added(r)
            self.sched.add_request(r)
            self.next_arrival += 1

    def rows(self, so):
        """The scheduled rows in the scheduler's order: id, tokens, kind (new/resumed/running),
        computed_before, and at an admission the admission fields."""
        before, kind = {}, {}
        cached = so.scheduled_cached_reqs
        for j, rid in enumerate(cached.req_ids):
            before[rid] = cached.num_computed_tokens[j]
            kind[rid] = "resumed" if rid in cached.resumed_req_ids else "running"
        for nrd in so.scheduled_new_reqs:
            before[nrd.req_id] = nrd.num_computed_tokens
            kind[nrd.req_id] = "resumed" if nrd.req_id in self.ever_admitted else "new"
        rows = []
        for rid, k in so.num_scheduled_tokens.items():
            row = {"id": rid, "tokens": k, "kind": kind[rid], "computed_before": before[rid]}
            self.on_row(rid, k, before[rid])
            if kind[rid] in ("new", "resumed"):
                row.update(self.admission_fields(rid, before[rid]))
                inf = self.info[rid]
                inf["hit_tokens_each_admission"].append(before[rid])
                if inf["hit_tokens_first_admission"] is None:
                    inf["hit_tokens_first_admission"] = before[rid]
                    inf["first_scheduled_step"] = self.step
                self.ever_admitted.add(rid)
            rows.append(row)
        return rows

    def run(self):
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import RequestStatus

        sched, pool = self.sched, self.pool
        while True:
            self.queue_arrivals()
            if not self.has_work():
                if self.pending():
                    self.on_idle()
                    continue
                break
            if self.step >= self.max_steps:
                self.on_max_steps()
                break

            self.before_schedule()
            free_before = pool.get_num_free_blocks()
            so = sched.schedule()
            self.calls += 1
            free_after_sched = pool.get_num_free_blocks()
            running_after_sched, waiting_after_sched = sched.get_request_counts()
            preempted = sorted(so.preempted_req_ids, key=int)
            for rid in preempted:
                self.info[rid]["preemptions"] += 1
            self.after_schedule(so)
            total = so.total_num_scheduled_tokens
            if total == 0:
                self.empty_calls += 1
                if not self.EMPTY_CALLS_ARE_STEPS:
                    if self.on_empty_call(so, preempted):
                        continue
                    break

            rows = self.rows(so)
            mro_extra = self.connector_output(so)
            # ---- the model
            ids = list(so.num_scheduled_tokens.keys())
            sampled, tokens = [], []
            for rid in ids:
                r = self.reqs[rid]
                if r.num_computed_tokens >= r.num_tokens:
                    tokens.append([sampled_token(rid, r.num_output_tokens)])
                    sampled.append(rid)
                else:
                    tokens.append([])
            mro = ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={rid: j for j, rid in enumerate(ids)},
                sampled_token_ids=tokens,
                **mro_extra,
            )
            sched.update_from_output(so, mro)
            finished = []
            for rid in sampled:
                inf = self.info[rid]
                if inf["first_token_step"] is None:
                    inf["first_token_step"] = self.step
                if RequestStatus.is_finished(self.reqs[rid].status):
                    finished.append(rid)
                    inf["finish_step"] = self.step
            num_running, num_waiting = sched.get_request_counts()
            line = {"type": "step", "step": self.step}
            if self.EMPTY_CALLS_ARE_STEPS:
                line["empty"] = total == 0
            sizes = so.num_scheduled_tokens.values()
            line.update(
                num_scheduled_tokens=total,
                batch_size=len(ids),
                prefill_tokens=sum(k for k in sizes if k > 1),
                decode_seqs=sum(1 for k in sizes if k == 1),
                scheduled=rows,
                preempted=preempted,
                sampled=sampled,
                finished=finished,
            )
            line.update(self.step_fields_mid(so))
            line.update(
                free_blocks_before=free_before,
                free_blocks_after_schedule=free_after_sched,
                free_blocks_after_update=pool.get_num_free_blocks(),
                used_blocks_after_schedule=self.num_blocks - 1 - free_after_sched,
                running_after_schedule=running_after_sched,
                waiting_after_schedule=waiting_after_sched,
                running_after_update=num_running,
                waiting_after_update=num_waiting,
            )
            line.update(self.step_fields_tail(so))
            self.emit(line)
            self.step += 1
            if self.after_step(so, total, preempted):
                break

    # ---- after the run
    def request_lines(self):
        for rid in sorted(self.info, key=int):
            self.emit(self.info[rid])

    def unfinished(self):
        return sorted((rid for rid, v in self.info.items() if v["finish_step"] is None), key=int)

    def total(self, key):
        """Sum over requests of a counter (preemptions, ...)."""
        return sum(v[key] for v in self.info.values())

    def hit_tokens_first_admission(self):
        return sum(v["hit_tokens_first_admission"] or 0 for v in self.info.values())

    def total_of_lists(self, key):
        """Sum over requests and admissions of a per-admission list (hit_tokens_each_admission, ...)."""
        return sum(sum(v[key]) for v in self.info.values())


class GroupLoop(StepLoop):
    """StepLoop of the hybrid-manager drivers (vllm_hybrid, vllm_mamba): per KV cache group, the real
    (non-null) blocks each request holds after scheduling and its block-table length, and the prefix-cache
    entries (hashed blocks) after the step: how many, how many evictable, how many newly cached / evicted
    this step; at each admission the request's shared_prefix_boundary. Its summary() is their summary
    line."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.managers = self.sched.kv_cache_manager.coordinator.single_type_managers
        self.ngroups = len(self.managers)

    def cached_snapshot(self):
        """{(block_id, hash_key)} of every prefix-cache entry."""
        pool = self.pool
        entries = set()
        for b in pool.blocks:
            if b.block_hash is not None:
                entries.add((b.block_id, b.block_hash))
            for k in pool.cached_block_hashes_by_block.get(b.block_id, ()):
                entries.add((b.block_id, k))
        return entries

    def per_group_counts(self, entries):
        from vllm.v1.core.kv_cache_utils import get_group_id

        c = {str(g): 0 for g in range(self.ngroups)}
        for _, k in entries:
            c[str(get_group_id(k))] += 1
        return c

    def group_blocks(self):
        gb = {}
        for gi, m in enumerate(self.managers):
            d = {}
            for rid, blks in m.req_to_blocks.items():
                if blks:
                    d[rid] = sum(1 for b in blks if not b.is_null)
            gb[str(gi)] = dict(sorted(d.items(), key=lambda kv: int(kv[0])))
        return gb

    def group_table_len(self):
        return {
            str(gi): {rid: len(blks) for rid, blks in sorted(m.req_to_blocks.items(), key=lambda kv: int(kv[0])) if blks}
            for gi, m in enumerate(self.managers)
        }

    def request_fields(self):
        return {"shared_prefix_boundary_each_admission": [], "admission_steps": []}

    def admission_fields(self, rid, computed_before):
        """hit_tokens and shared_prefix_boundary: what vLLM stored in request.shared_prefix_boundary at that
        lookup (KVCacheManager.get_computed_blocks; the junction where a group's tail is then cached)."""
        spb = self.reqs[rid].shared_prefix_boundary
        inf = self.info[rid]
        inf["shared_prefix_boundary_each_admission"].append(spb)
        inf["admission_steps"].append(self.step)
        return {"hit_tokens": computed_before, "shared_prefix_boundary": spb}

    # hooks of a GroupLoop's driver
    def table_fields(self):
        """Fields after group_table_len (taken after scheduling)."""
        return {}

    def cache_fields(self, before, after):
        """Fields after evicted_cached, from the prefix-cache entries before and after the step."""
        return {}

    def before_schedule(self):
        self.cached_before = self.cached_snapshot()

    def after_schedule(self, so):
        self.tables = {"group_blocks": self.group_blocks(), "group_table_len": self.group_table_len()}
        self.tables.update(self.table_fields())

    def step_fields_tail(self, so):
        before, after = self.cached_before, self.cached_snapshot()
        f = dict(self.tables)
        f.update(
            cached_blocks=self.per_group_counts(after),
            cached_evictable=self.per_group_counts((bid, k) for bid, k in after if self.pool.blocks[bid].ref_cnt == 0),
            newly_cached=self.per_group_counts(after - before),
            evicted_cached=self.per_group_counts(before - after),
        )
        f.update(self.cache_fields(before, after))
        return f

    def finish(self, out, t0):
        """After run(): the request lines and the summary, `out` closed, a line to stderr; the exit code."""
        import time

        self.request_lines()
        self.emit(self.summary())
        out.close()
        unfinished = self.unfinished()
        print(
            f"{out.name}: last step {self.step - 1}, {self.calls - self.empty_calls} non-empty steps, "
            f"{self.n - len(unfinished)}/{self.n} finished, {time.time() - t0:.1f}s",
            file=sys.stderr,
        )
        return 0 if not unfinished else 1

    def summary(self):
        unfinished = self.unfinished()
        return {
            "type": "summary",
            "steps": self.step,
            "last_step": self.step - 1,
            "nonempty_steps": self.calls - self.empty_calls,
            "schedule_calls": self.calls,
            "empty_schedule_calls": self.empty_calls,
            "requests": self.n,
            "finished": self.n - len(unfinished),
            "unfinished": unfinished,
            "stuck": self.stuck,
            "preemptions": self.total("preemptions"),
            "hit_tokens_first_admission": self.hit_tokens_first_admission(),
            "hit_tokens_all_admissions": self.total_of_lists("hit_tokens_each_admission"),
        }
