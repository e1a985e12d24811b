#!/usr/bin/env python3
"""Golden per-step schedules from vLLM's own v1 Scheduler under the PRIORITY policy.

The scheduler class vLLM's engine runs (vllm.v1.core.sched.scheduler.Scheduler) is built on
the CPU with no model and no GPU, the way vLLM's unit tests build it, and stepped by hand:

    each step k:  queue the requests that have arrived by step k
                  out = scheduler.schedule()
                  every scheduled request whose computed tokens reach its known tokens
                  samples one token (distinct per request, never EOS)
                  scheduler.update_from_output(out, model_output)

A request stops after `output_len` tokens (max_tokens, ignore_eos).

Trace: cachesim native JSONL, one request per line: `prompt_ids`, `output_len`, optional
`priority` (int, lower is served first, as in vLLM; default 0) and optional `timestamp_ms`.
Request i (file order, from 0) gets request_id str(i) and arrival_time float(i).

Arrivals: a record with `timestamp_ms` t is queued before step ceil(t / 1000) (the cachesim
replay prices every step at exactly one second, so a request sent at (k - 0.5) s is waiting
when step k is scheduled); a record without it is queued before step 0. The file must be in
arrival order. A step is a schedule() call that scheduled tokens; if a call would schedule
nothing while requests are still to arrive (the engine would idle), the driver stops with an
error, because such a gap cannot be lined up with the replay: fix the trace instead.

Output (JSON Lines, the format of the FCFS golden schedules):
    {"type": "config", ...}    vLLM version and every resolved setting
    {"type": "step", ...}      one per step
    {"type": "request", ...}   one per request
    {"type": "summary", ...}
Preemption details (victim's place in the running list, whether the victim had already been
scheduled in the same step, self-preemption) go to stderr.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time

for _k, _v in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("VLLM_LOGGING_LEVEL", "WARNING"),
    ("TORCH_CPP_LOG_LEVEL", "ERROR"),
):
    os.environ.setdefault(_k, _v)

# Sampled tokens: far above every prompt id and distinct per (request, position), so two
# requests never share an output block.
SAMPLE_BASE = 1 << 31
SAMPLE_STRIDE = 1 << 20

# A one-layer Llama config.json, enough for ModelConfig; no weights, nothing downloaded.
MODEL_JSON = {
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

BLOCK_SIZE = 16
MAX_MODEL_LEN = 65536


def cli(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, help="native JSONL trace")
    p.add_argument("--out", required=True, help="schedule to write (JSON Lines)")
    p.add_argument("--policy", choices=["fcfs", "priority"], default="priority")
    p.add_argument("--num-gpu-blocks", type=int, default=16384, help="KV blocks, the null block included")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument(
        "--trace-key",
        default=None,
        help="value of the config line's trace key (default: the trace path relative to the "
        "parent of the --out folder, e.g. traces/x.jsonl)",
    )
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument(
        "--max-loras",
        type=int,
        default=0,
        help="serve LoRA adapters with this many slots (vLLM --enable-lora --max-loras; 0: off); "
        "a record's `lora` key names its adapter",
    )
    p.add_argument(
        "--lora-modules",
        default="a,b,c,d",
        help="the adapters, comma-separated, registered in this order (ids 1, 2, ...)",
    )
    return p.parse_args(argv)


def read_trace(path):
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
    last = -math.inf
    for i, r in enumerate(recs):
        t = float(r.get("timestamp_ms", 0.0))
        if t < last:
            sys.exit(f"{path}: record {i} (timestamp_ms {t}) comes before an earlier record's arrival")
        last = t
    return recs


def arrival_step(rec):
    return math.ceil(float(rec["timestamp_ms"]) / 1000.0) if "timestamp_ms" in rec else 0


def make_scheduler(args, model_dir):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(MODEL_JSON, f)
    model = ModelConfig(
        model=model_dir, dtype="float16", seed=42, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN
    )
    # scheduler_reserve_full_isl and watermark are left at vLLM 0.33's defaults.
    sched_cfg = SchedulerConfig(
        policy=args.policy,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=MAX_MODEL_LEN,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    cache_cfg = CacheConfig(
        block_size=BLOCK_SIZE, gpu_memory_utilization=0.9, cache_dtype="auto", enable_prefix_caching=True
    )
    cache_cfg.num_gpu_blocks = args.num_gpu_blocks
    lora = None
    if args.max_loras > 0:
        from vllm.config import LoRAConfig

        lora = LoRAConfig(max_loras=args.max_loras, max_lora_rank=16)
    config = VllmConfig(
        model_config=model,
        scheduler_config=sched_cfg,
        cache_config=cache_cfg,
        device_config=DeviceConfig(device="cpu"),  # the scheduler never touches a device
        lora_config=lora,
    )
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=args.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    sched = Scheduler(
        vllm_config=config,
        kv_cache_config=kv,
        block_size=BLOCK_SIZE,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(config),
    )
    return sched, config


class PreemptionLog:
    """Watches (without changing) the scheduler: remembers the request whose allocation failed
    and the running list at that moment, then records each victim's place in it."""

    def __init__(self, sched):
        self.events = []
        self.step = 0
        self._current = None
        self._running_at_failure = []
        mgr = sched.kv_cache_manager
        real_allocate = mgr.allocate_slots
        real_preempt = sched._preempt_request

        def allocate_slots(request, *a, **kw):
            blocks = real_allocate(request, *a, **kw)
            if blocks is None:
                self._current = request.request_id
                self._running_at_failure = [r.request_id for r in sched.running]
            return blocks

        def preempt_request(request, *a, **kw):
            running = self._running_at_failure
            rid = request.request_id
            pos = running.index(rid) if rid in running else None
            cur = running.index(self._current) if self._current in running else None
            self.events.append(
                {
                    "step": self.step,
                    "victim": rid,
                    "for": self._current,
                    "victim_index": pos,
                    "running": list(running),
                    "victim_last_in_running": pos == len(running) - 1,
                    "self_preemption": rid == self._current,
                    # Earlier in the running list than the request being allocated: it was
                    # scheduled earlier in this step and its tokens are taken back.
                    "taken_back": pos is not None and cur is not None and pos < cur,
                }
            )
            # The next victim of the same allocation sees the list without this one.
            self._running_at_failure = [x for x in running if x != rid]
            return real_preempt(request, *a, **kw)

        mgr.allocate_slots = allocate_slots
        sched._preempt_request = preempt_request


def lora_request(rec, modules, args):
    """The record's adapter as vLLM's LoRARequest (its id: its place in --lora-modules + 1)."""
    name = rec.get("lora")
    if name is None:
        return None
    if args.max_loras <= 0 or name not in modules:
        sys.exit(f"a record names adapter {name!r}: give --max-loras and list it in --lora-modules")
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=modules.index(name) + 1, lora_path="/nonexistent/" + name)


def run(args):
    t0 = time.time()
    import vllm
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus

    recs = read_trace(args.trace)
    n = len(recs)
    arrive = [arrival_step(r) for r in recs]

    with tempfile.TemporaryDirectory() as model_dir:
        sched, config = make_scheduler(args, model_dir)
    sc = config.scheduler_config
    pool = sched.kv_cache_manager.block_pool
    init_none_hash(sha256)
    hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
    log = PreemptionLog(sched)

    trace_key = args.trace_key
    if trace_key is None:
        base = os.path.dirname(os.path.dirname(os.path.abspath(args.out)))
        trace_key = os.path.relpath(os.path.abspath(args.trace), base)

    lines = [
        {
            "type": "config",
            "vllm_version": vllm.__version__,
            "trace": trace_key,
            "num_requests": n,
            "block_size": BLOCK_SIZE,
            "num_gpu_blocks": args.num_gpu_blocks,
            "free_blocks_at_start": pool.get_num_free_blocks(),
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_model_len": config.model_config.max_model_len,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "enable_prefix_caching": config.cache_config.enable_prefix_caching,
            "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
            "watermark": sc.watermark,
            "free_order": "default",
            "async_scheduling": bool(sc.async_scheduling),
            "policy": sc.policy,
        }
    ]
    modules = args.lora_modules.split(",")
    if args.max_loras > 0:
        lines[0]["max_loras"] = config.lora_config.max_loras
        lines[0]["lora_modules"] = modules

    requests = {}
    per_req = {}
    admitted_before = set()
    queued = 0  # records 0..queued-1 have been added (file order is arrival order)
    step = 0
    calls = empty_calls = 0

    while True:
        while queued < n and arrive[queued] <= step:
            rec = recs[queued]
            req = Request(
                request_id=str(queued),
                prompt_token_ids=[int(t) for t in rec["prompt_ids"]],
                sampling_params=SamplingParams(
                    max_tokens=int(rec["output_len"]), ignore_eos=True, temperature=0.0
                ),
                pooling_params=None,
                arrival_time=float(queued),
                priority=int(rec.get("priority", 0)),
                block_hasher=hasher,
                lora_request=lora_request(rec, modules, args),
            )
            requests[req.request_id] = req
            per_req[req.request_id] = {
                "type": "request",
                "id": req.request_id,
                "prompt_len": len(req.prompt_token_ids),
                "output_len": int(rec["output_len"]),
                "arrival_step": arrive[queued],
                "first_scheduled_step": None,
                "first_token_step": None,
                "finish_step": None,
                "hit_tokens_first_admission": None,
                "hit_tokens_each_admission": [],
                "preemptions": 0,
            }
            sched.add_request(req)
            queued += 1
        if queued == n and sched.get_num_unfinished_requests() == 0:
            break
        if step >= args.max_steps:
            sys.exit(f"{args.trace}: still running after --max-steps {args.max_steps}")

        log.step = step
        free_before = pool.get_num_free_blocks()
        out = sched.schedule()
        calls += 1
        free_sched = pool.get_num_free_blocks()
        run_sched, wait_sched = sched.get_request_counts()
        preempted = sorted(out.preempted_req_ids, key=int)
        for rid in preempted:
            per_req[rid]["preemptions"] += 1

        if out.total_num_scheduled_tokens == 0:
            empty_calls += 1
            if queued < n:
                sys.exit(
                    f"{args.trace}: the engine would idle before step {step} (an empty schedule "
                    f"call) while {n - queued} requests are still to arrive; fix the trace"
                )
            sched.update_from_output(out, ModelRunnerOutput(req_ids=[], req_id_to_index={}))
            if preempted:
                continue
            sys.exit(f"{args.trace}: stuck at step {step}, nothing schedulable")

        cached = out.scheduled_cached_reqs
        seen = {}
        for j, rid in enumerate(cached.req_ids):
            seen[rid] = (cached.num_computed_tokens[j], "resumed" if rid in cached.resumed_req_ids else "running")
        for nr in out.scheduled_new_reqs:
            seen[nr.req_id] = (nr.num_computed_tokens, "resumed" if nr.req_id in admitted_before else "new")

        order = list(out.num_scheduled_tokens)
        rows = []
        for rid in order:
            before, kind = seen[rid]
            row = {"id": rid, "tokens": out.num_scheduled_tokens[rid], "kind": kind, "computed_before": before}
            if kind != "running":
                row["hit_tokens"] = before
                info = per_req[rid]
                info["hit_tokens_each_admission"].append(before)
                if info["hit_tokens_first_admission"] is None:
                    info["hit_tokens_first_admission"] = before
                    info["first_scheduled_step"] = step
                admitted_before.add(rid)
            rows.append(row)

        sampled, token_lists = [], []
        for rid in order:
            r = requests[rid]
            if r.num_computed_tokens >= r.num_tokens:
                token_lists.append([SAMPLE_BASE + int(rid) * SAMPLE_STRIDE + r.num_output_tokens])
                sampled.append(rid)
            else:
                token_lists.append([])
        sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=order,
                req_id_to_index={rid: j for j, rid in enumerate(order)},
                sampled_token_ids=token_lists,
            ),
        )
        finished = []
        for rid in sampled:
            info = per_req[rid]
            if info["first_token_step"] is None:
                info["first_token_step"] = step
            if RequestStatus.is_finished(requests[rid].status):
                info["finish_step"] = step
                finished.append(rid)
        run_upd, wait_upd = sched.get_request_counts()
        sizes = out.num_scheduled_tokens.values()
        lines.append(
            {
                "type": "step",
                "step": step,
                "num_scheduled_tokens": out.total_num_scheduled_tokens,
                "batch_size": len(order),
                "prefill_tokens": sum(k for k in sizes if k > 1),
                "decode_seqs": sum(1 for k in sizes if k == 1),
                "scheduled": rows,
                "preempted": preempted,
                "sampled": sampled,
                "finished": finished,
                "free_blocks_before": free_before,
                "free_blocks_after_schedule": free_sched,
                "free_blocks_after_update": pool.get_num_free_blocks(),
                "used_blocks_after_schedule": args.num_gpu_blocks - 1 - free_sched,
                "running_after_schedule": run_sched,
                "waiting_after_schedule": wait_sched,
                "running_after_update": run_upd,
                "waiting_after_update": wait_upd,
            }
        )
        step += 1

    lines.extend(per_req[rid] for rid in sorted(per_req, key=int))
    unfinished = sorted((rid for rid, v in per_req.items() if v["finish_step"] is None), key=int)
    lines.append(
        {
            "type": "summary",
            "steps": step,
            "schedule_calls": calls,
            "empty_schedule_calls": empty_calls,
            "requests": n,
            "finished": n - len(unfinished),
            "unfinished": unfinished,
            "preemptions": sum(v["preemptions"] for v in per_req.values()),
            "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in per_req.values()),
            "wall_s": round(time.time() - t0, 2),
        }
    )
    with open(args.out, "w") as f:
        for obj in lines:
            f.write(json.dumps(obj, separators=(",", ":")) + "\n")

    for e in log.events:
        print("preemption " + json.dumps(e, separators=(",", ":")), file=sys.stderr)
    not_last = sum(1 for e in log.events if not e["victim_last_in_running"])
    print(
        f"{args.out}: {step} steps, {n - len(unfinished)}/{n} finished, "
        f"{len(log.events)} preemptions ({not_last} of a request not last in running, "
        f"{sum(e['taken_back'] for e in log.events)} taken back, "
        f"{sum(e['self_preemption'] for e in log.events)} self), {time.time() - t0:.1f}s",
        file=sys.stderr,
    )
    return 1 if unfinished else 0


if __name__ == "__main__":
    sys.exit(run(cli(sys.argv[1:])))
