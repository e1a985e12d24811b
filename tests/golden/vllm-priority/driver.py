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

The step loop, the token model, trace reading and the writers are shared with the other vLLM
drivers in ../vllm_common.py; the arrival rule, the refusals and the preemption log are this
driver's.
"""

import json
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for vllm_common
import vllm_common as C

C.offline_env()

# A one-layer Llama config.json, enough for ModelConfig; no weights, nothing downloaded.
MODEL_JSON = C.TINY_LLAMA

BLOCK_SIZE = 16
MAX_MODEL_LEN = 65536


def cli(argv):
    p = C.parser(__doc__)
    C.add_run_args(p, num_gpu_blocks=16384)
    p.add_argument("--policy", choices=["fcfs", "priority"], default="priority")
    p.add_argument(
        "--trace-key",
        default=None,
        help="value of the config line's trace key (default: the trace path relative to the "
        "parent of the --out folder, e.g. traces/x.jsonl)",
    )
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
    recs = C.load_trace(path)
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
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    model = C.model_config(C.write_model_config(model_dir, MODEL_JSON), MAX_MODEL_LEN)
    # scheduler_reserve_full_isl and watermark are left at vLLM 0.33's defaults.
    sched_cfg = C.scheduler_config(
        policy=args.policy,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=MAX_MODEL_LEN,
        long_prefill_token_threshold=0,
        enable_chunked_prefill=True,
    )
    cache_cfg = C.cache_config(BLOCK_SIZE, True)
    cache_cfg.num_gpu_blocks = args.num_gpu_blocks
    lora = None
    if args.max_loras > 0:
        from vllm.config import LoRAConfig

        lora = LoRAConfig(max_loras=args.max_loras, max_lora_rank=16)
    config = C.vllm_config(model, sched_cfg, cache_cfg, lora_config=lora)
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv = KVCacheConfig(
        num_blocks=args.num_gpu_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)],
    )
    return C.make_scheduler(config, kv, block_size=BLOCK_SIZE), config


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


class PriorityLoop(C.StepLoop):
    """The shared step loop with this driver's refusals: an idle gap before an arrival, a stuck run and
    --max-steps stop with an error (nothing is written)."""

    def __init__(self, args, log, *a, **kw):
        super().__init__(*a, **kw)
        self.args, self.log = args, log
        self.modules = args.lora_modules.split(",")

    def request_kwargs(self, i, rec):
        return {"priority": int(rec.get("priority", 0)), "lora_request": lora_request(rec, self.modules, self.args)}

    def before_schedule(self):
        self.log.step = self.step

    def on_idle(self):
        sys.exit(
            f"{self.args.trace}: the engine would idle before step {self.step} (an empty schedule "
            f"call) while {self.n - self.next_arrival} requests are still to arrive; fix the trace"
        )

    def on_empty_call(self, so, preempted):
        if self.pending():
            self.on_idle()
        return super().on_empty_call(so, preempted)

    def on_stuck(self):
        sys.exit(f"{self.args.trace}: stuck at step {self.step}, nothing schedulable")

    def on_max_steps(self):
        sys.exit(f"{self.args.trace}: still running after --max-steps {self.args.max_steps}")


def run(args):
    t0 = time.time()
    import vllm

    recs = read_trace(args.trace)
    n = len(recs)
    arrive = [arrival_step(r) for r in recs]

    with tempfile.TemporaryDirectory() as model_dir:
        sched, config = make_scheduler(args, model_dir)
    pool = sched.kv_cache_manager.block_pool
    hasher = C.request_block_hasher(BLOCK_SIZE)
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
        }
    ]
    lines[0].update(
        C.scheduler_settings(
            sched,
            config,
            free_order="default",
            omit={"max_num_scheduled_tokens", "max_in_flight_tokens", "prefix_caching_hash_algo", "use_v2_model_runner"},
        )
    )
    loop = PriorityLoop(args, log, sched, recs, arrive, hasher, lines.append, args.num_gpu_blocks, args.max_steps)
    if args.max_loras > 0:
        lines[0]["max_loras"] = config.lora_config.max_loras
        lines[0]["lora_modules"] = loop.modules

    loop.run()
    loop.request_lines()
    unfinished = loop.unfinished()
    step = loop.step
    lines.append(
        {
            "type": "summary",
            "steps": step,
            "schedule_calls": loop.calls,
            "empty_schedule_calls": loop.empty_calls,
            "requests": n,
            "finished": n - len(unfinished),
            "unfinished": unfinished,
            "preemptions": loop.total("preemptions"),
            "hit_tokens_first_admission": loop.hit_tokens_first_admission(),
            "wall_s": round(time.time() - t0, 2),
        }
    )
    with open(args.out, "w") as f:
        for obj in lines:
            f.write(C.jsonl_line(obj))

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
