#!/usr/bin/env python3
"""Drive SGLang 0.5.23's own scheduler code (no model, no GPU) with priority scheduling over a
cachesim native JSONL trace whose records carry `priority` and `timestamp_ms`, and write a golden
per-step schedule as JSON Lines (format: README.md).

How: a Scheduler object is made with Scheduler.__new__ (its __init__ needs a model worker, NCCL/gloo
groups and ZMQ sockets) and given REAL pools and cache: ReqToTokenPool and TokenToKVPoolAllocator on
CPU tensors (over a buffer-less KVCache, as sglang's own MLX model_runner_stub does), RadixCache,
SchedulePolicy / NewTokenRatioTracker (Scheduler.init_schedule_policy, which also reads
--disable-priority-preemption), Scheduler.init_running_status, and the real
SchedulerBatchResultProcessor. Components of features that are off (grammar, LoRA, DP attention,
ngram embedding, beams, metrics, load reporting) are inert stubs. Each step mirrors
Scheduler.event_loop_normal: the requests that arrive before this step are queued through the real
Scheduler._add_request_to_queue (which sets the default priority and stamps the queue entry), then
get_next_batch_to_run (real: the priority sort, PrefillAdder.preempt_to_schedule, retraction) ->
run_batch (only its counters; the forward is replaced by one sampled token per row) ->
process_batch_result (real) -> last_batch = batch.

Arrival rule: a record with timestamp_ms t is queued before step ceil(t / 1000); the cachesim replay
prices every step at exactly 1 s. The driver stops with an error if the engine would go idle while
requests are still to arrive (the replay cannot line up an idle gap).

Preemptions are recorded by wrapping PrefillAdder.preempt_to_schedule and retractions by wrapping
ScheduleBatch.retract_decode; neither wrapper changes what the method does. SGLang re-queues the
victims of one preempt_to_schedule call from a Python set (object addresses); the driver prints to
stderr whenever that order differs from the running batch's order, which is cachesim's.

The Scheduler assembly, the stubs, the trace reading and the arrival rule, the retraction recorder and
the JSONL writer are shared with the other SGLang drivers in ../sglang_common.py.
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports(disable_logging=False)
import torch
from types import SimpleNamespace
from sglang.srt.runtime_context import get_context
import argparse, time
ap = argparse.ArgumentParser(description="Drive SGLang's own Scheduler methods over a cachesim JSONL trace (see README.md)")
C.scheduler_args(ap)
ap.add_argument("--enable-priority-scheduling", action="store_true")
ap.add_argument("--schedule-low-priority-values-first", action="store_true")
ap.add_argument("--priority-scheduling-preemption-threshold", type=int, default=10)
ap.add_argument("--disable-priority-preemption", action="store_true")
ap.add_argument("--retraction-policy", default="length", choices=["length", "priority"])
A = ap.parse_args(); T0 = time.time()
POOL = A.max_total_tokens
PAGE = A.page_size
ov = get_context().override_server_args(device="cpu", attention_backend="torch_native", page_size=PAGE,
    chunked_prefill_size=A.chunked_prefill_size, max_prefill_tokens=A.max_prefill_tokens,
    max_running_requests=A.max_running_requests, schedule_policy=A.schedule_policy,
    schedule_conservativeness=A.schedule_conservativeness, disable_overlap_schedule=True,
    max_total_tokens=POOL, enable_priority_scheduling=A.enable_priority_scheduling,
    schedule_low_priority_values_first=A.schedule_low_priority_values_first,
    priority_scheduling_preemption_threshold=A.priority_scheduling_preemption_threshold,
    disable_priority_preemption=A.disable_priority_preemption, retraction_policy=A.retraction_policy)
sa = ov.install()
from sglang.srt.runtime_context import get_schedule
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401  (loaded here, before the pools and the tree)
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.memory_pool import KVCache
class _DummyKVCache(KVCache):
    # Same idea as sglang's hardware_backend/mlx/model_runner_stub._DummyKVCache: index
    # bookkeeping only, no buffers.
    def __init__(self, size, dtype, device):
        self.size=size; self.page_size=PAGE; self.dtype=dtype; self.store_dtype=dtype; self.device=device
        self.layer_num=0; self.start_layer=0; self.end_layer=0; self.mem_usage=0
        self.cpu_offloading_chunk_size=8192; self.layer_transfer_counter=None
        self.enable_custom_mem_pool=False; self.custom_mem_pool=None
    def get_key_buffer(self, i): raise RuntimeError
    def get_value_buffer(self, i): raise RuntimeError
    def get_kv_buffer(self, i): raise RuntimeError
    def set_kv_buffer(self, *a, **k): raise RuntimeError
from sglang.srt.mem_cache.radix_cache import RadixCache
from sglang.srt.mem_cache.cache_init_params import CacheInitParams

R=A.max_running_requests; CTX=A.context_len
rtp = ReqToTokenPool(size=R, max_context_len=CTX, device="cpu", enable_memory_saver=False)
kv = _DummyKVCache(size=POOL, dtype=torch.float16, device="cpu")
if PAGE == 1:
    alloc = TokenToKVPoolAllocator(size=POOL, dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
else:
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    alloc = PagedTokenToKVPoolAllocator(size=POOL, page_size=PAGE, dtype=torch.float16, device="cpu", kvcache=kv, need_sort=False)
tree = RadixCache(CacheInitParams(disable=False, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=PAGE, chunked_prefill_size=A.chunked_prefill_size))
from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
class _NS(SimpleNamespace): pass
mc = SimpleNamespace(vocab_size=1<<30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                     hf_config=SimpleNamespace(), num_key_value_heads=1, is_hybrid_swa=False, self_opened_think_start_ids=None, think_end_id=None)
tp_worker = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False))
s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                         max_req_len=CTX-1, max_req_input_len=CTX-2,
                         enable_priority_scheduling=get_schedule().enable_priority_scheduling,
                         schedule_low_priority_values_first=get_schedule().schedule_low_priority_values_first)
trace, ARRIVAL = C.load_trace(A.trace)
ALL = C.make_requests(s, trace, mc, ignore_eos=not A.no_ignore_eos, with_priority=True)
ARR = C.Arrivals(s, trace, ARRIVAL, ALL); queue_arrivals = ARR.queue
from sglang.srt.managers.utils import GenerationBatchResult
C.finish_scheduler(s)
OUT_BASE=10_000_000; OUT_STRIDE=100_000
import sglang
# record retractions: wrap the real ScheduleBatch.retract_decode
RETRACTED = []; C.record_retractions(RETRACTED)
from sglang.srt.managers.schedule_policy import PrefillAdder
PREEMPTED=[]
_orig_preempt = PrefillAdder.preempt_to_schedule
def _rec_preempt(self, req):
    running = [r.rid for r in self.running_batch.reqs]; before = len(self.preempt_list)
    ok = _orig_preempt(self, req)
    victims = [r.rid for r in self.preempt_list[before:]]
    if victims:
        in_running = [x for x in running if x in victims]
        if victims != in_running:
            print(f"step {STEP}: victims re-queued as {victims}, running order {in_running}", file=sys.stderr)
        PREEMPTED.extend(victims)
    return ok
PrefillAdder.preempt_to_schedule = _rec_preempt
STEP=0
out, emit = C.open_jsonl(A.out)
emit({"type":"config","sglang_version":sglang.__version__,"trace":os.path.basename(A.trace),"num_requests":len(trace),
      "max_total_tokens":POOL,"free_tokens_at_start":alloc.available_size(),"max_running_requests":R,
      "chunked_prefill_size":s.chunked_prefill_size,"max_prefill_tokens":s.max_prefill_tokens,
      "schedule_policy":str(s.policy.policy),"schedule_conservativeness":A.schedule_conservativeness,
      "page_size":PAGE,"ignore_eos":not A.no_ignore_eos,"overlap_schedule":False,"mixed_chunk":bool(s.is_mixed_chunk),
      "init_new_token_ratio":s.new_token_ratio_tracker.current,"context_len":CTX,
      "enable_priority_scheduling":A.enable_priority_scheduling,"schedule_low_priority_values_first":A.schedule_low_priority_values_first,
      "priority_scheduling_preemption_threshold":A.priority_scheduling_preemption_threshold,
      "disable_priority_preemption":A.disable_priority_preemption,"retraction_policy":A.retraction_policy})
reqs=ALL
info={rid:{"type":"request","id":int(rid),"prompt_len":len(r.origin_input_ids),"output_len":r.sampling_params.max_new_tokens,
       "first_scheduled_step":None,"first_token_step":None,"finish_step":None,"hit_tokens_first_admission":None,
       "hit_tokens_each_admission":[],"retractions":0,"preemptions":0,"priority":trace[int(rid)].get("priority"),"arrival_step":ARRIVAL[int(rid)]} for rid,r in reqs.items()}
started=set()
step=0; calls=0
while step<10_000_000:
    STEP=step; queue_arrivals(step)
    free_before=alloc.available_size(); ratio_before=s.new_token_ratio_tracker.current
    RETRACTED.clear(); PREEMPTED.clear()
    plan = s.get_next_batch_to_run(s.running_batch, s.last_batch); calls+=1
    s.running_batch = plan.running_batch; b = plan.batch_to_run
    retracted=sorted(RETRACTED, key=int)
    for rid in retracted: info[rid]["retractions"]+=1; started.discard(rid)
    preempted=[int(x) for x in PREEMPTED]
    for rid in PREEMPTED: info[rid]["preemptions"]+=1; started.discard(rid)
    if b is None:
        s.last_batch=None
        if ARR.pending(): sys.exit(f"the engine would go idle at step {step} with requests still to arrive")
        if not s.waiting_queue and s.running_batch.is_empty() and s.chunked_req is None: break
        if preempted: sys.exit(f"step {step}: a schedule call preempted requests and ran nothing")
        if retracted: continue
        print(f"stuck at step {step}", file=sys.stderr); break
    is_ext = b.forward_mode.is_extend()
    rows=[]
    if is_ext:
        for r,el,pl in zip(b.reqs,b.extend_lens,b.prefix_lens):
            row={"id":int(r.rid),"tokens":int(el),"computed_before":int(pl)}
            if r.rid not in started:
                row["kind"]="new"; row["hit_tokens"]=int(pl); started.add(r.rid)
                info[r.rid]["hit_tokens_each_admission"].append(int(pl))
                if info[r.rid]["hit_tokens_first_admission"] is None:
                    info[r.rid]["hit_tokens_first_admission"]=int(pl); info[r.rid]["first_scheduled_step"]=step
            else: row["kind"]="chunk"
            rows.append(row)
    else:
        rows=[{"id":int(r.rid),"tokens":1,"kind":"running"} for r in b.reqs]
    free_after_sched=alloc.available_size(); evict_after_sched=tree.evictable_size()
    # run_batch, minus the forward: counters, then one sampled token per row
    s.forward_ct += 1; b.forward_iter = s.forward_ct
    if b.extend_num_tokens: s.processed_tokens_counter += b.extend_num_tokens
    toks = [OUT_BASE + int(r.rid)*OUT_STRIDE + len(r.output_ids) for r in b.reqs]
    outlen_before={r.rid:len(r.output_ids) for r in b.reqs}
    res = GenerationBatchResult(next_token_ids=torch.tensor(toks, dtype=torch.int64))
    # Scheduler.process_batch_result, minus load publishing / metrics / health checks
    if b.forward_mode.is_decode(): s.batch_result_processor.process_batch_result_decode(b, res)
    else: s.batch_result_processor.process_batch_result_prefill(b, res)
    s.tree_cache.flush_pending_backups()
    s.last_batch=b
    sampled=[r.rid for r in b.reqs if len(r.output_ids)>outlen_before[r.rid]]
    finished=[r.rid for r in b.reqs if r.finished()]
    for rid in sampled:
        if info[rid]["first_token_step"] is None: info[rid]["first_token_step"]=step
    for rid in finished: info[rid]["finish_step"]=step
    ntok=sum(x["tokens"] for x in rows)
    emit({"type":"step","step":step,"forward_mode":"extend" if is_ext else "decode","num_scheduled_tokens":ntok,
          "batch_size":len(rows),"prefill_tokens":ntok if is_ext else 0,"decode_seqs":0 if is_ext else len(rows),
          "scheduled":rows,"retracted":[int(x) for x in retracted],"preempted":preempted,"sampled":[int(x) for x in sampled],
          "finished":[int(x) for x in finished],"chunked_req":int(s.chunked_req.rid) if s.chunked_req is not None else None,
          "free_tokens_before":free_before,"free_tokens_after_schedule":free_after_sched,
          "evictable_tokens_after_schedule":evict_after_sched,"free_tokens_after_update":alloc.available_size(),"evictable_tokens_after_update":tree.evictable_size(),
          "protected_tokens_after_update":tree.protected_size(),
          "new_token_ratio_before":round(ratio_before,6),"new_token_ratio_after":round(s.new_token_ratio_tracker.current,6),
          "running_after_schedule":s.running_batch.batch_size() if not is_ext else None,
          "waiting_after_schedule":len(s.waiting_queue)})
    step+=1
for rid in sorted(info,key=int): emit(info[rid])
unf=[int(r) for r in info if info[r]["finish_step"] is None]
emit({"type":"summary","steps":step,"schedule_calls":calls,"requests":len(info),"finished":len(info)-len(unf),"unfinished":unf,
      "retractions":sum(v["retractions"] for v in info.values()),"preemptions":sum(v["preemptions"] for v in info.values()),
      "hit_tokens_first_admission":sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),"wall_s":round(time.time()-T0,2)})
out.close()
print(f"{A.out}: {step} steps, {len(info)-len(unf)}/{len(info)} finished, {time.time()-T0:.1f}s", file=sys.stderr)
