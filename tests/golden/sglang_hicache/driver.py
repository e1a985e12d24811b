#!/usr/bin/env python3
"""Drive SGLang 0.5.23's own scheduler code WITH its hierarchical cache (HiCache), on CPU without a
model or GPU, over a cachesim native JSONL trace, and write a golden per-step schedule as JSON Lines
(format: README.md).

What is real SGLang code (pip package sglang 0.5.23):
  * the tree cache is built the way Scheduler.__init__ builds it with --enable-hierarchical-cache:
    kv_cache_builder's CacheInitParams -> registry.create_tree_cache(TreeCacheBuildContext) ->
    default_radix_cache_factory -> create_unified_radix_cache -> UnifiedRadixCache(params) +
    UnifiedRadixCache.init_hicache -> hybrid_pool_assembler.attach_hybrid_pool_to_unified_cache
    (_PlainKvStrategy: HostPoolGroup over a real MHATokenToKVPoolHost + HybridCacheController,
    a subclass of managers/cache_controller.HiCacheController). In 0.5.23 there is no
    HiRadixCache: HiCache lives in UnifiedRadixCache, whose tree logic is the TreeCore selected
    by SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND (default "rust": the bundled compiled extension;
    "python": unified_tree_core.UnifiedTreeCore). --tree-core picks it; default rust, as SGLang.
  * the device pool is a real MHATokenToKVPool (1 layer, 1 head, head_dim 1, float64, on CPU)
    under the real TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator; ReqToTokenPool real;
  * Scheduler.get_next_batch_to_run (which calls _process_hicache_events ->
    tree_cache.check_hicache_events, PrefillAdder.add_one_req -> init_load_back, and
    tree_cache.ready_to_load_host_cache), update_running_batch / retract_decode, the batch result
    processor (cache_unfinished_req / cache_finished_req -> insert -> BackupKV actions) and
    tree_cache.flush_pending_backups after each result, in event_loop_normal's order;
  * HiCacheController's queues (write_queue / load_queue / ack_write_queue / ack_load_queue),
    CacheOperation merging, LayerDoneCounter producer ring, host pool alloc/free, and all of
    UnifiedRadixCache's HiCache logic (writing_check, loading_check, load_back, evict, evict_host).

What is replaced (and nothing else):
  1. the transfer layer: managers.cache_controller.L2TransferEngine (CUDA streams + copy kernels)
     is replaced by _LagTransferEngine below, which copies the K/V rows with plain torch indexing
     at submission time and returns a completion whose finish_event reports done only once the
     driver's step clock has passed `submit step + 1 + --copy-lag-steps` (synchronize() forces it
     done, as a blocking wait on a GPU would); cache_controller.device_module (CUDA events of
     LayerLoadingEvent) is replaced by a CPU stand-in whose events are done when recorded (the
     forward that consumes a load waits for it in SGLang). The tp all-reduces of ack counts are
     not replaced: with tp size 1 (no process group) SGLang itself skips them.
  2. MHATokenToKVPoolHost's pin_memory default True -> False (pinning needs CUDA).
  3. Scheduler.__init__ is not run (needs a model, torch.distributed, sockets): the object is
     assembled by ../sglang_common.py (shared by the SGLang drivers), with inert stubs for features that
     are off (grammar, LoRA, DP attention, metrics, streaming); the forward samples one token
     per row (never EOS) and writes each token's id into the device KV rows it fills, and before
     every forward the driver checks that every prefix row of every scheduled request (device
     hits and host load-backs alike) holds the right token ids (--no-check-kv turns this off).

Arrival rule (as the sglang-priority goldens): a record with timestamp_ms t is queued before step
ceil(t / 1000); the driver stops with an error if the engine would go idle with requests still to
arrive.
"""
import os, sys, argparse, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports()
ap = argparse.ArgumentParser(description="Drive SGLang's own Scheduler + HiCache over a cachesim JSONL trace (see README.md)")
C.scheduler_args(ap)
ap.add_argument("--hicache-ratio", type=float, default=None, help="host pool = ratio x device pool (SGLang's default 2.0)")
ap.add_argument("--hicache-size", type=int, default=0, help="host pool in GB (SGLang's flag; overrides the ratio)")
ap.add_argument("--host-tokens", type=int, default=None,
                help="driver convenience: sets --hicache-ratio to (N + 0.5) / max_total_tokens; SGLang then sizes the "
                     "host pool to (floor(pool*ratio) // page + 1) * page tokens (recorded as host_pool_tokens)")
ap.add_argument("--hicache-write-policy", default="write_through", choices=["write_through", "write_through_selective", "write_back"])
ap.add_argument("--copy-lag-steps", type=int, default=0)
ap.add_argument("--tree-core", default="rust", choices=["rust", "python"])
ap.add_argument("--no-check-kv", action="store_true")
A = ap.parse_args(); T0 = time.time()
os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = A.tree_core
import torch
from types import SimpleNamespace
from sglang.srt.runtime_context import get_context
POOL = A.max_total_tokens; PAGE = A.page_size; LAG = A.copy_lag_steps
if A.host_tokens is not None:
    if A.hicache_ratio is not None or A.hicache_size: sys.exit("--host-tokens excludes --hicache-ratio / --hicache-size")
    RATIO = (A.host_tokens + 0.5) / POOL
else:
    RATIO = 2.0 if A.hicache_ratio is None else A.hicache_ratio
ov = get_context().override_server_args(device="cpu", attention_backend="torch_native", page_size=PAGE,
    chunked_prefill_size=A.chunked_prefill_size, max_prefill_tokens=A.max_prefill_tokens,
    max_running_requests=A.max_running_requests, schedule_policy=A.schedule_policy,
    schedule_conservativeness=A.schedule_conservativeness, disable_overlap_schedule=True,
    max_total_tokens=POOL, enable_hierarchical_cache=True, hicache_ratio=RATIO, hicache_size=A.hicache_size,
    hicache_write_policy=A.hicache_write_policy,
    # an explicit --hicache-ratio / --hicache-size resolves this to None in SGLang (hicache_hook.py)
    hicache_host_memory_fraction=None)
sa = ov.install()
from sglang.srt.runtime_context import get_schedule, get_memory

# ---------------------------------------------------------------- replaced transfer layer
import sglang.srt.managers.cache_controller as _cc
from sglang.srt.mem_cache.l2_transfer import TransferCompletion

class _Clock:
    step = 0          # the engine step being scheduled / run
CLOCK = _Clock()
XFER = {"d2h": 0, "h2d": 0}   # tokens submitted during the current step

class _DoneEvent:
    """Stand-in for a device event recorded on a stream the forward waits on: done once recorded."""
    def record(self, *a, **k): pass
    def query(self): return True
    def synchronize(self): pass
    def wait(self, *a, **k): pass
    def elapsed_time(self, other): return 0.0

class _LagEvent:
    """Finish event of a submitted copy: done when the step clock reaches `due` (or when waited on)."""
    def __init__(self, due): self.due = due; self.forced = False
    def record(self, *a, **k): pass
    def query(self): return self.forced or CLOCK.step >= self.due
    def synchronize(self): self.forced = True
    def wait(self, *a, **k): pass
    def elapsed_time(self, other): return 0.0

class _Stream:
    def wait_stream(self, *a, **k): pass
    def wait_event(self, *a, **k): pass
    def synchronize(self): pass

class _DeviceModule:
    Event = _DoneEvent; Stream = _Stream
    @staticmethod
    def current_stream(): return _Stream()

def _host_view(host_pool, which, layer):
    refs = host_pool.k_data_refs if which == "k" else host_pool.v_data_refs
    return refs[layer]

class _LagTransferEngine:
    """CPU stand-in for l2_transfer.L2TransferEngine: same submit API, row copies with torch indexing."""
    def __init__(self, io_backend):
        self.io_backend = io_backend
        self.device_to_host_stream = _Stream(); self.host_to_device_stream = _Stream()
    def _completion(self):
        return TransferCompletion(_DoneEvent(), _LagEvent(CLOCK.step + 1 + LAG), False)
    def submit_device_to_host(self, transfers):
        for t in transfers:
            h = t.host_indices.to(torch.int64).cpu(); d = t.device_indices.to(torch.int64).cpu()
            assert len(h) == len(d)
            for layer in range(t.device_pool.layer_num):
                _host_view(t.host_pool, "k", layer)[h] = t.device_pool.k_buffer[layer][d]
                _host_view(t.host_pool, "v", layer)[h] = t.device_pool.v_buffer[layer][d]
            XFER["d2h"] += len(h)
        return self._completion()
    def submit_host_to_device(self, transfers, *, transfer_layer_id_max, start_event=None, on_layer_done=None):
        for t in transfers:
            h = t.host_indices.to(torch.int64).cpu(); d = t.device_indices.to(torch.int64).cpu()
            assert len(h) == len(d)
            for layer in range(t.device_pool.layer_num):
                t.device_pool.k_buffer[layer][d] = _host_view(t.host_pool, "k", layer)[h]
                t.device_pool.v_buffer[layer][d] = _host_view(t.host_pool, "v", layer)[h]
            XFER["h2d"] += len(h)
        for layer_id in range(transfer_layer_id_max):
            if on_layer_done is not None: on_layer_done(layer_id)
        return self._completion()

_cc.L2TransferEngine = _LagTransferEngine
_cc.device_module = _DeviceModule
# pinning host memory needs CUDA: MHATokenToKVPoolHost(pin_memory=True) default -> False
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
MHATokenToKVPoolHost.__init__.__defaults__ = (False,) + MHATokenToKVPoolHost.__init__.__defaults__[1:]

# ---------------------------------------------------------------- pools and tree cache, as kv_cache_builder
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401  (loaded here, before the pools and the tree)
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool, MHATokenToKVPool
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

R = A.max_running_requests; CTX = A.context_len
rtp = ReqToTokenPool(size=R, max_context_len=CTX, device="cpu", enable_memory_saver=False)
kv = MHATokenToKVPool(size=POOL, page_size=PAGE, dtype=torch.float64, head_num=1, head_dim=1, layer_num=1,
                      device="cpu", enable_memory_saver=False)
if PAGE == 1:
    alloc = TokenToKVPoolAllocator(size=POOL, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
else:
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator
    alloc = PagedTokenToKVPoolAllocator(size=POOL, page_size=PAGE, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
FWD_STREAM = _Stream()
tp_worker = SimpleNamespace(
    model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False, forward_stream=FWD_STREAM),
    register_hicache_layer_transfer_counter=lambda counter: None)
params = CacheInitParams(disable=False, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=PAGE,
                         eviction_policy=get_memory().radix_eviction_policy,
                         eviction_policy_config=get_memory().radix_eviction_policy_config,
                         chunked_prefill_size=get_schedule().chunked_prefill_size)
tree = create_tree_cache(TreeCacheBuildContext(server_args=sa, params=params, is_hybrid_swa=False, is_hybrid_ssm=False,
    enable_hierarchical_cache=True, disable_radix_cache=False, tp_worker=tp_worker, model_config=None,
    tp_size=1, tp_rank=0, tp_group=None))
assert isinstance(tree, UnifiedRadixCache) and tree.cache_controller is not None
cc = tree.cache_controller
# as Scheduler.__init__ with enable_hierarchical_cache
cc.load_fence_stream = FWD_STREAM; cc.write_fence_stream = FWD_STREAM
host_pool = cc.mem_pool_host  # HostPoolGroup; its anchor is the MHATokenToKVPoolHost
HOST_TOKENS = host_pool.size

# ---------------------------------------------------------------- scheduler object (../sglang_common.py)
mc = SimpleNamespace(vocab_size=1 << 30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                     hf_config=SimpleNamespace(), num_key_value_heads=1, is_hybrid_swa=False,
                     self_opened_think_start_ids=None, think_end_id=None)
s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                         max_req_len=CTX - 1, max_req_input_len=CTX - 2, enable_hierarchical_cache=True)

trace, ARRIVAL = C.load_trace(A.trace)
ALL = C.make_requests(s, trace, mc, ignore_eos=not A.no_ignore_eos)
ARR = C.Arrivals(s, trace, ARRIVAL, ALL); queue_arrivals = ARR.queue
from sglang.srt.managers.utils import GenerationBatchResult
C.finish_scheduler(s)
OUT_BASE = 10_000_000; OUT_STRIDE = 100_000
import sglang

# ---------------------------------------------------------------- recorders (wrappers that change nothing)
RETRACTED = []; C.record_retractions(RETRACTED)
from sglang.srt.managers.schedule_policy import PrefillAdder
ADMIT = {}   # rid -> (device prefix at admission, host_hit_length matched, host tokens loaded)
_orig_add = PrefillAdder.add_one_req
def _rec_add(self, req, *a, **k):
    dev, host_match, needs = req.prefix_len, req.host_hit_length, req.needs_host_load_back()
    res = _orig_add(self, req, *a, **k)
    if self.can_run_list and self.can_run_list[-1] is req:
        ADMIT[req.rid] = (dev, host_match, req.host_loaded_length if needs else 0)
    return res
PrefillAdder.add_one_req = _rec_add
CNT = {"device_evicted": 0, "host_evicted": 0, "host_freed": 0, "backup_failed": 0}
_orig_evict = UnifiedRadixCache._evict
def _rec_evict(self, *a, **k):
    r = _orig_evict(self, *a, **k); CNT["device_evicted"] += r.num_tokens_evicted; return r
UnifiedRadixCache._evict = _rec_evict
_orig_evict_host = UnifiedRadixCache.evict_host
def _rec_evict_host(self, *a, **k):
    n = _orig_evict_host(self, *a, **k); CNT["host_evicted"] += n; return n
UnifiedRadixCache.evict_host = _rec_evict_host
_orig_exec_backup = UnifiedRadixCache._execute_kv_backup
def _rec_exec_backup(self, node_id, device_value, *a, **k):
    r = _orig_exec_backup(self, node_id, device_value, *a, **k)
    if r is None: CNT["backup_failed"] += len(device_value)  # no host room even after evict_host
    return r
UnifiedRadixCache._execute_kv_backup = _rec_exec_backup
anchor_host = host_pool.anchor_entry.host_pool
_orig_host_free = anchor_host.free
def _rec_host_free(indices):
    n = _orig_host_free(indices); CNT["host_freed"] += int(n); return n
anchor_host.free = _rec_host_free
ACKS = {"write": 0, "load": 0}
_orig_wack = UnifiedRadixCache._log_write_ack_metrics
def _rec_wack(self, ack):  # called once per processed write ack, by both writing_check paths
    ACKS["write"] += ack.num_tokens; return _orig_wack(self, ack)
UnifiedRadixCache._log_write_ack_metrics = _rec_wack
_orig_lc = UnifiedRadixCache.loading_check
def _rec_lc(self, finish_count=None):
    before = sum(a.num_tokens for a in self.cache_controller.ack_load_queue)
    _orig_lc(self, finish_count=finish_count)
    ACKS["load"] += before - sum(a.num_tokens for a in self.cache_controller.ack_load_queue)
UnifiedRadixCache.loading_check = _rec_lc

# ---------------------------------------------------------------- fake forward: KV rows hold token ids
ROWS = C.TokenRows(kv, rtp, check=not A.no_check_kv)
def check_and_fill(b, is_ext): ROWS(b, is_ext, CLOCK.step)

# ---------------------------------------------------------------- run
out, emit = C.open_jsonl(A.out)
emit({"type": "config", "sglang_version": sglang.__version__, "torch_version": torch.__version__.split("+")[0],
      "trace": os.path.basename(A.trace), "num_requests": len(trace),
      "max_total_tokens": POOL, "free_tokens_at_start": alloc.available_size(), "max_running_requests": R,
      "chunked_prefill_size": s.chunked_prefill_size, "max_prefill_tokens": s.max_prefill_tokens,
      "schedule_policy": str(s.policy.policy), "schedule_conservativeness": A.schedule_conservativeness,
      "page_size": PAGE, "ignore_eos": not A.no_ignore_eos, "overlap_schedule": False, "mixed_chunk": bool(s.is_mixed_chunk),
      "init_new_token_ratio": s.new_token_ratio_tracker.current, "context_len": CTX,
      "enable_hierarchical_cache": True, "tree_cache": type(tree).__name__, "tree_core": type(tree.tree_core).__name__,
      "cache_controller": type(cc).__name__, "host_pool": type(anchor_host).__name__,
      "hicache_write_policy": cc.write_policy, "write_through_threshold": tree.write_through_threshold,
      "load_back_threshold": tree.load_back_threshold,
      "hicache_ratio": get_memory().hicache_ratio, "hicache_size_gb": get_memory().hicache_size,
      "hicache_mem_layout": get_memory().hicache_mem_layout, "hicache_io_backend": get_memory().hicache_io_backend,
      "host_pool_tokens": HOST_TOKENS, "host_free_tokens_at_start": host_pool.available_size(),
      "radix_eviction_policy": get_memory().radix_eviction_policy, "copy_lag_steps": LAG})
info = {rid: {"type": "request", "id": int(rid), "prompt_len": len(r.origin_input_ids), "output_len": r.sampling_params.max_new_tokens,
        "arrival_step": ARRIVAL[int(rid)], "first_scheduled_step": None, "first_token_step": None, "finish_step": None,
        "hit_tokens_first_admission": None, "hit_tokens_each_admission": [], "host_hit_tokens_each_admission": [],
        "host_match_tokens_each_admission": [], "host_hit_tokens": 0, "retractions": 0} for rid, r in ALL.items()}
TOT = {"loaded_tokens": 0, "backup_tokens": 0, "backup_acked_tokens": 0, "load_acked_tokens": 0, "backup_failed_tokens": 0,
       "device_evicted_tokens": 0, "host_evicted_tokens": 0, "host_freed_tokens": 0}
started = set()
step = 0; calls = 0; ACK_WAITS = 0; ACK_WAITS_TOTAL = 0
def reset_counters():
    XFER["d2h"] = XFER["h2d"] = 0; ACKS["write"] = ACKS["load"] = 0
    for k in CNT: CNT[k] = 0
reset_counters()
while step < 10_000_000:
    CLOCK.step = step
    queue_arrivals(step)
    free_before = alloc.available_size(); ratio_before = s.new_token_ratio_tracker.current
    host_free_before = host_pool.available_size()
    RETRACTED.clear(); ADMIT.clear()
    plan = s.get_next_batch_to_run(s.running_batch, s.last_batch); calls += 1
    s.running_batch = plan.running_batch; b = plan.batch_to_run
    retracted = sorted(RETRACTED, key=int)
    for rid in retracted: info[rid]["retractions"] += 1; started.discard(rid)
    if b is None:
        s.last_batch = None
        if not ARR.pending() and not s.waiting_queue and s.running_batch.is_empty() and s.chunked_req is None: break
        if retracted: continue
        if cc.ack_write_queue or cc.ack_load_queue:
            # Nothing runnable while copies are still in flight (only with --copy-lag-steps > 0): the
            # real scheduler would spin until the events complete; the driver lets them complete now.
            for ack in cc.ack_write_queue + cc.ack_load_queue: ack.finish_event.synchronize()
            ACK_WAITS += 1; continue
        if ARR.pending(): sys.exit(f"the engine would go idle at step {step} with requests still to arrive")
        sys.exit(f"stuck at step {step}")
    is_ext = b.forward_mode.is_extend()
    rows = []
    if is_ext:
        for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens):
            row = {"id": int(r.rid), "tokens": int(el), "computed_before": int(pl)}
            if r.rid not in started:
                dev, host_match, loaded = ADMIT[r.rid]
                assert dev + loaded == int(pl), (r.rid, dev, loaded, int(pl))
                row.update(kind="new", hit_tokens=dev, host_hit_tokens=loaded, host_match_tokens=host_match)
                started.add(r.rid)
                ir = info[r.rid]
                ir["hit_tokens_each_admission"].append(dev); ir["host_hit_tokens_each_admission"].append(loaded)
                ir["host_match_tokens_each_admission"].append(host_match); ir["host_hit_tokens"] += loaded
                if ir["hit_tokens_first_admission"] is None:
                    ir["hit_tokens_first_admission"] = dev; ir["first_scheduled_step"] = step
            else:
                row["kind"] = "chunk"
            rows.append(row)
    else:
        rows = [{"id": int(r.rid), "tokens": 1, "kind": "running"} for r in b.reqs]
    free_after_sched = alloc.available_size(); evict_after_sched = tree.evictable_size()
    host_free_after_sched = host_pool.available_size()
    # run_batch, minus the forward: counters, then one sampled token per row
    s.forward_ct += 1; b.forward_iter = s.forward_ct
    if b.extend_num_tokens: s.processed_tokens_counter += b.extend_num_tokens
    check_and_fill(b, is_ext)
    toks = [OUT_BASE + int(r.rid) * OUT_STRIDE + len(r.output_ids) for r in b.reqs]
    outlen_before = {r.rid: len(r.output_ids) for r in b.reqs}
    res = GenerationBatchResult(next_token_ids=torch.tensor(toks, dtype=torch.int64))
    # Scheduler.process_batch_result, minus load publishing / metrics / health checks
    if b.forward_mode.is_decode(): s.batch_result_processor.process_batch_result_decode(b, res)
    else: s.batch_result_processor.process_batch_result_prefill(b, res)
    s.tree_cache.flush_pending_backups()
    s.last_batch = b
    sampled = [r.rid for r in b.reqs if len(r.output_ids) > outlen_before[r.rid]]
    finished = [r.rid for r in b.reqs if r.finished()]
    for rid in sampled:
        if info[rid]["first_token_step"] is None: info[rid]["first_token_step"] = step
    for rid in finished: info[rid]["finish_step"] = step
    ntok = sum(x["tokens"] for x in rows)
    st = {"loaded_tokens": XFER["h2d"], "backup_tokens": XFER["d2h"], "backup_acked_tokens": ACKS["write"],
          "load_acked_tokens": ACKS["load"], "backup_failed_tokens": CNT["backup_failed"],
          "device_evicted_tokens": CNT["device_evicted"],
          "host_evicted_tokens": CNT["host_evicted"], "host_freed_tokens": CNT["host_freed"]}
    for k2, v2 in st.items(): TOT[k2] += v2
    emit({"type": "step", "step": step, "forward_mode": "extend" if is_ext else "decode", "num_scheduled_tokens": ntok,
          "batch_size": len(rows), "prefill_tokens": ntok if is_ext else 0, "decode_seqs": 0 if is_ext else len(rows),
          "scheduled": rows, "retracted": [int(x) for x in retracted], "sampled": [int(x) for x in sampled],
          "finished": [int(x) for x in finished], "chunked_req": int(s.chunked_req.rid) if s.chunked_req is not None else None,
          "free_tokens_before": free_before, "free_tokens_after_schedule": free_after_sched,
          "evictable_tokens_after_schedule": evict_after_sched, "free_tokens_after_update": alloc.available_size(),
          "evictable_tokens_after_update": tree.evictable_size(), "protected_tokens_after_update": tree.protected_size(),
          "host_free_tokens_before": host_free_before, "host_free_tokens_after_schedule": host_free_after_sched,
          "host_free_tokens_after_update": host_pool.available_size(), **st,
          "ack_waits_before": ACK_WAITS, "pending_backup_acks": len(cc.ack_write_queue), "pending_load_acks": len(cc.ack_load_queue),
          "new_token_ratio_before": round(ratio_before, 6), "new_token_ratio_after": round(s.new_token_ratio_tracker.current, 6),
          "running_after_schedule": s.running_batch.batch_size() if not is_ext else None,
          "waiting_after_schedule": len(s.waiting_queue)})
    reset_counters(); ACK_WAITS_TOTAL += ACK_WAITS; ACK_WAITS = 0
    step += 1
for rid in sorted(info, key=int): emit(info[rid])
unf = [int(r) for r in info if info[r]["finish_step"] is None]
emit({"type": "summary", "steps": step, "schedule_calls": calls, "requests": len(info), "finished": len(info) - len(unf),
      "unfinished": unf, "retractions": sum(v["retractions"] for v in info.values()),
      "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
      "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
      "host_hit_tokens": sum(v["host_hit_tokens"] for v in info.values()),
      "host_match_tokens": sum(sum(v["host_match_tokens_each_admission"]) for v in info.values()),
      **TOT, "ack_waits": ACK_WAITS_TOTAL, "kv_rows_checked": ROWS.checked})
out.close()
print(f"{A.out}: {step} steps, {len(info) - len(unf)}/{len(info)} finished, host hits {sum(v['host_hit_tokens'] for v in info.values())}, "
      f"{time.time() - T0:.1f}s", file=sys.stderr)
