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

L3 (this driver extends ../sglang_hicache/driver.py, whose runs it does not replace): the same engine with
--hicache-storage-backend file (SGLang's own HiCacheFile over a temporary directory, or --storage-dir),
--hicache-storage-prefetch-policy, and the scheduler's enable_hicache_storage. Real: URC.prefetch_from_storage
(called by Scheduler._add_request_to_queue -> _prefetch_kvcache on arrival), the controller's storage queues,
the four storage thread FUNCTIONS (query, read, read-progress sync, write), check_hicache_events' drain
(host allocation, tree insertion, backup acks), check_prefetch_progress and the three policies,
pop_prefetch_loaded_span, the retries, write_backup_storage at D->H acks, HiCacheFile and its LRU evictor.
Replaced, in addition to 1-3 above:
  4. the storage THREADS: _start_storage_threads runs with an inert Thread class (queues created, no thread
     started); the driver calls each real thread function synchronously at the step's I/O point (after the
     step's result processing and flush_pending_backups), with storage_stop_event standing in as "stop when
     this queue is empty", over the items that are due: an item put during step k is due at the I/O point
     of step k + lag (--query-lag-steps, --transfer-lag-steps, --backup-lag-steps, default 0), in the order
     writes, queries, reads, read-progress sync. With --read-batches-per-step R > 0 a read's per-batch acks
     (128 pages each) are released R per I/O point; after a termination the rest are released at once with
     the progress frozen, as the real thread emits them once it sees is_terminated() (see _release_read_acks).
     An idle scheduling pass (nothing to run) with storage work outstanding runs all of it at once and
     does not advance the step (storage_waits_before), as the real engine spins until the I/O lands.
  5. the timeout policy's clock: utils/poll_timer's time.perf_counter -> step index x --step-seconds (1.0).
  6. the process's TP/PP ranks are stated (get_parallel().override(tp_rank=0, ...)), as a one-GPU
     server's scheduler process has them; all TP/PP all-reduces are then skipped by SGLang itself.
SGLang's storage threads log and swallow exceptions (a failed query reads as a miss): any ERROR record
fails the run.

Arrival rule (as the sglang-priority goldens): a record with timestamp_ms t is queued before step
ceil(t / 1000); the driver stops with an error if the engine would go idle with requests still to
arrive.
"""
import os, sys, json, argparse, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports()
import logging
class _ErrorCounter(logging.Handler):
    """SGLang's storage threads log and swallow their exceptions (a failed query reads as a miss):
    count every ERROR record, and fail the run if there was any."""
    n = 0
    def emit(self, record): _ErrorCounter.n += 1
logging.getLogger().addHandler(_ErrorCounter(level=logging.ERROR))
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
# ---- L3 (storage tier) options
ap.add_argument("--prefetch-policy", default="timeout", choices=["best_effort", "wait_complete", "timeout"],
                help="--hicache-storage-prefetch-policy (SGLang 0.5.23's default: timeout)")
ap.add_argument("--prefetch-threshold", type=int, default=256, help="extra config prefetch_threshold (SGLang default 256)")
ap.add_argument("--prefetch-timeout-base", type=float, default=1.0, help="extra config prefetch_timeout_base, seconds (default 1)")
ap.add_argument("--prefetch-timeout-per-ki-token", type=float, default=0.25, help="extra config, seconds per 1024 tokens (default 0.25)")
ap.add_argument("--step-seconds", type=float, default=1.0,
                help="the timeout policy's clock: PollTimer reads step index x this (cachesim's golden replays price a step at 1 s)")
ap.add_argument("--retry-poll-interval", type=int, default=8, help="--hicache-storage-prefetch-retry-poll-interval (default 8)")
ap.add_argument("--retry-max-attempts", type=int, default=8, help="--hicache-storage-prefetch-retry-max-attempts (default 8)")
ap.add_argument("--storage-dir", default=None, help="HiCacheFile directory; default a fresh temporary directory, removed at the end")
ap.add_argument("--storage-max-size", default=None, help="HiCacheFile extra config max_size (LRU file eviction; bytes, e.g. 64000)")
ap.add_argument("--query-lag-steps", type=int, default=0, help="storage existence query done at the I/O point of step put+lag")
ap.add_argument("--transfer-lag-steps", type=int, default=0, help="storage->host page reads done at the I/O point of step put+lag")
ap.add_argument("--read-batches-per-step", type=int, default=0,
                help="storage->host reads progress by this many batches (STORAGE_BATCH_SIZE = 128 pages) per I/O point; 0: a whole read at once")
ap.add_argument("--backup-lag-steps", type=int, default=0, help="host->storage page writes done at the I/O point of step put+lag")
A = ap.parse_args(); T0 = time.time()
import tempfile, shutil
STORAGE_DIR_IS_TEMP = A.storage_dir is None
STORAGE_DIR = tempfile.mkdtemp(prefix="hicache_l3_") if STORAGE_DIR_IS_TEMP else os.path.abspath(A.storage_dir)
os.makedirs(STORAGE_DIR, exist_ok=True)
STORAGE_FILES_AT_START = len([f for f in os.listdir(STORAGE_DIR) if f.endswith(".bin")])
EXTRA = {"file_storage_path": STORAGE_DIR, "prefetch_threshold": A.prefetch_threshold,
         "prefetch_timeout_base": A.prefetch_timeout_base, "prefetch_timeout_per_ki_token": A.prefetch_timeout_per_ki_token}
if A.storage_max_size is not None: EXTRA["max_size"] = A.storage_max_size
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
    hicache_storage_backend="file", hicache_storage_prefetch_policy=A.prefetch_policy,
    hicache_storage_backend_extra_config=json.dumps(EXTRA, sort_keys=True),
    hicache_storage_prefetch_retry_poll_interval=A.retry_poll_interval,
    hicache_storage_prefetch_retry_max_attempts=A.retry_max_attempts,
    # an explicit --hicache-ratio / --hicache-size resolves this to None in SGLang (hicache_hook.py)
    hicache_host_memory_fraction=None)
sa = ov.install()
from sglang.srt.runtime_context import get_schedule, get_memory, get_parallel

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

# ---------------------------------------------------------------- replaced storage threads (L3)
# HiCacheController._start_storage_threads creates the storage queues and starts four threads
# (prefetch_thread_func: existence query; prefetch_io_aux_func: page reads; prefetch_sync_thread_func:
# the TP all-reduce of read progress; backup_thread_func: page writes). Here the same method runs
# with threading.Thread replaced by an inert stand-in for the duration of the call, so the queues
# exist but no thread runs; the driver then runs each REAL thread function synchronously at the
# step's I/O point over the items that are due (storage_io below).
import threading, collections, queue as _queue
from sglang.srt.managers.cache_controller import HiCacheController as _HCC
class _NoThread:
    def __init__(self, target=None, daemon=None, **k): self.target = target
    def start(self): pass
    def join(self, timeout=None): pass
    def is_alive(self): return False
_orig_start_threads = _HCC._start_storage_threads
def _start_storage_threads_inert(self):
    saved = _cc.threading.Thread
    _cc.threading.Thread = _NoThread
    try: _orig_start_threads(self)
    finally: _cc.threading.Thread = saved
_HCC._start_storage_threads = _start_storage_threads_inert
# The timeout policy's clock (unified_radix_cache._StoragePrefetchWait.timer, a utils.poll_timer.PollTimer,
# reads time.perf_counter()): the step clock x --step-seconds instead of the wall clock.
import sglang.srt.utils.poll_timer as _poll_timer
_poll_timer.time = SimpleNamespace(perf_counter=lambda: CLOCK.step * A.step_seconds)

# attach_storage_backend reads this process's TP/PP place (HiCacheController._generate_storage_config);
# one rank: state it as the scheduler process of a single-GPU server would have it.
# the page-hash extension (mem_cache/cpp_utils/native_hash.py) is JIT-built by torch; load it now, or fail
from sglang.srt.mem_cache.cpp_utils.native_hash import _load_native_hash_module
_load_native_hash_module()
_PAR = get_parallel().override(tp_rank=0, pp_rank=0, attn_dcp_rank=0, attn_tp_rank=0, attn_dp_rank=0, attn_cp_rank=0); _PAR.__enter__()

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
assert cc.enable_storage and tree.enable_storage and type(cc.storage_backend).__name__ == "HiCacheFile", type(cc.storage_backend)

class _DueQueue:
    """A storage thread's input queue: each item is due at the I/O point of (step it was put at) + lag."""
    def __init__(self, lag): self.lag = lag; self.items = collections.deque()
    def put(self, item, block=True, timeout=None):
        if item is None: return  # stop sentinel of _stop_storage_threads
        self.items.append((CLOCK.step + self.lag, item))
    put_nowait = put
    def qsize(self): return len(self.items)
    def empty(self): return not self.items
    def take_due(self, force):
        out = []
        while self.items and (force or self.items[0][0] <= CLOCK.step): out.append(self.items.popleft()[1])
        return out
PREFETCH_Q = cc.prefetch_queue = _DueQueue(A.query_lag_steps)
BUFFER_Q = cc.prefetch_buffer = _DueQueue(A.transfer_lag_steps)
BACKUP_Q = cc.backup_queue = _DueQueue(A.backup_lag_steps)

class _DrainStop:
    """storage_stop_event while a thread function runs synchronously: 'set' once its queue is empty,
    so the real loop `while not stop.is_set(): item = queue.get(...)` handles every item and returns."""
    def __init__(self, q): self.q = q
    def is_set(self): return self.q.empty()
    def set(self): pass
    def clear(self): pass
def _run_thread_body(func, attr, items):
    if not items: return
    q = _queue.Queue()
    for it in items: q.put(it)
    saved_q, saved_stop = getattr(cc, attr), cc.storage_stop_event
    setattr(cc, attr, q); cc.storage_stop_event = _DrainStop(q)
    try: func()
    finally: setattr(cc, attr, saved_q); cc.storage_stop_event = saved_stop
    assert q.empty()
HELD = collections.OrderedDict()   # id(operation) -> [operation, acks not yet released, last released completed_tokens]
def _release_read_acks(force):
    """Paced reads (--read-batches-per-step R > 0): the read thread's _page_transfer ran whole at its first
    due I/O point, but its per-batch progress acks are released R per I/O point, the way a thread that
    reads R batches per step and checks is_terminated() before each batch would emit them. Once the
    operation is terminated (best_effort / timeout at admission), the rest are released at once with
    completed_tokens frozen at the last released value -- what the real thread emits after it stops --
    so the scheduler never sees pages 'read' after the termination. Pages read past that point sit
    in host slots that the final ack's host_mem_release frees, as SGLang's own path does."""
    out = []
    for key in list(HELD):
        op, acks, last = HELD[key]
        budget = None if (force or A.read_batches_per_step <= 0 or op.is_terminated()) else A.read_batches_per_step
        frozen = op.is_terminated()
        while acks:
            a = acks[0]
            is_progress = a.completed_tokens is not None
            if is_progress and budget is not None:
                if budget == 0: break
                budget -= 1
            acks.pop(0)
            if is_progress:
                if frozen: a.completed_tokens = min(a.completed_tokens, last)
                last = a.completed_tokens
            out.append(a)
        HELD[key][2] = last
        if not acks: del HELD[key]
    return out
def storage_io(force=False):
    """The I/O point: the storage threads' work that is due, in a fixed order (writes, queries, reads,
    then the read-progress sync that feeds ack_prefetch_queue). force: everything queued."""
    _run_thread_body(cc.backup_thread_func, "backup_queue", BACKUP_Q.take_due(force))
    _run_thread_body(cc.prefetch_thread_func, "prefetch_queue", PREFETCH_Q.take_due(force))
    _run_thread_body(cc.prefetch_io_aux_func, "prefetch_buffer", BUFFER_Q.take_due(force))
    while not cc.prefetch_sync_queue.empty():
        a = cc.prefetch_sync_queue.get_nowait()
        HELD.setdefault(id(a.operation), [a.operation, [], 0])[1].append(a)
    _run_thread_body(cc.prefetch_sync_thread_func, "prefetch_sync_queue", _release_read_acks(force))
def storage_pending():
    return bool(BACKUP_Q.items or PREFETCH_Q.items or BUFFER_Q.items or HELD or tree.ongoing_prefetch or tree.ongoing_backup
                or cc.prefetch_hit_queue.qsize() or cc.ack_prefetch_queue.qsize() or cc.ack_backup_queue.qsize()
                or cc.host_mem_release_queue.qsize())
def storage_files():
    return sum(1 for f in os.listdir(STORAGE_DIR) if f.endswith(".bin"))

# ---------------------------------------------------------------- scheduler object (../sglang_common.py)
mc = SimpleNamespace(vocab_size=1 << 30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                     hf_config=SimpleNamespace(), num_key_value_heads=1, is_hybrid_swa=False,
                     self_opened_think_start_ids=None, think_end_id=None)
s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                         max_req_len=CTX - 1, max_req_input_len=CTX - 2, enable_hierarchical_cache=True,
                         enable_hicache_storage=True)

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
        ld = req.host_loaded_length if needs else 0
        ADMIT[req.rid] = (dev, host_match, ld, int(req.storage_hit_length), int(req.fulfilled_storage_hit_len(dev + ld)))
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

# ---- L3 recorders (wrappers that change nothing)
SC = {}
def reset_storage_counters():
    SC.update(prefetch_issued=[], prefetch_waiting=[], prefetch_revoked=[], prefetch_terminated=[],
              storage_query_hit_tokens=0, prefetch_alloc_tokens=0, prefetch_completed_tokens=0,
              prefetch_inserted_tokens=0, storage_pages_read=0, storage_backup_tokens=0, storage_backup_acked_tokens=0,
              storage_pages_written=0, storage_pages_skipped=0, storage_pages_refused=0)
reset_storage_counters()
ATTEMPTS = collections.defaultdict(list)   # rid -> prefetch attempts
OPS = {}                                    # id(PrefetchOperation) -> its attempt record
def _att(op): return OPS.get(id(op))
_orig_pfs = UnifiedRadixCache.prefetch_from_storage
def _rec_pfs(self, request, *a, **k):
    had = self.ongoing_prefetch.get(request)
    r = _orig_pfs(self, request, *a, **k)
    cur = self.ongoing_prefetch.get(request)
    if cur is not None and cur is not had:
        op = cur.operation
        att = {"issue_step": CLOCK.step, "storage_start": op.storage_start, "requested_tokens": op.stats_requested_tokens,
               "query_hit_tokens": None, "alloc_tokens": None, "completed_tokens": None, "inserted_tokens": None,
               "terminated_step": None, "end": None, "end_step": None}
        OPS[id(op)] = att; ATTEMPTS[request.rid].append(att); SC["prefetch_issued"].append(int(request.rid))
    return r
UnifiedRadixCache.prefetch_from_storage = _rec_pfs
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController as _HyCC
_orig_sync_hit = _HyCC._sync_prefetch_hit_query
def _rec_sync_hit(self, operation, storage_hit_count):
    r = _orig_sync_hit(self, operation, storage_hit_count)
    a = _att(operation)
    if a is not None: a["query_hit_tokens"] = int(r)
    SC["storage_query_hit_tokens"] += int(r)
    return r
_HyCC._sync_prefetch_hit_query = _rec_sync_hit
_orig_alloc_hit = _HyCC.allocate_storage_hit
def _rec_alloc_hit(self, operation, hit_tokens, **k):
    hi, n = _orig_alloc_hit(self, operation, hit_tokens, **k)
    got = 0 if hi is None else int(n)
    a = _att(operation)
    if a is not None: a["alloc_tokens"] = got
    SC["prefetch_alloc_tokens"] += got
    return hi, n
_HyCC.allocate_storage_hit = _rec_alloc_hit
_orig_term = _HCC.terminate_prefetch
def _rec_term(self, operation):
    a = _att(operation)
    if a is not None and a["terminated_step"] is None:
        a["terminated_step"] = CLOCK.step; SC["prefetch_terminated"].append(int(operation.request_id))
    return _orig_term(self, operation)
_HCC.terminate_prefetch = _rec_term
_orig_hpr = UnifiedRadixCache._handle_prefetch_result
def _rec_hpr(self, operation):
    done = int(operation.completed_tokens)
    r = _orig_hpr(self, operation)
    loaded = int(self.prefetch_loaded_tokens_by_reqid.get(operation.handle, 0))
    a = _att(operation)
    if a is not None: a.update(completed_tokens=done, inserted_tokens=loaded, end="inserted", end_step=CLOCK.step)
    SC["prefetch_completed_tokens"] += done; SC["prefetch_inserted_tokens"] += loaded
    return r
UnifiedRadixCache._handle_prefetch_result = _rec_hpr
_orig_revoke = UnifiedRadixCache.revoke_pending_prefetch
def _rec_revoke(self, request):
    info = self.ongoing_prefetch.get(request)
    if info is not None:
        a = _att(info.operation)
        if a is not None: a.update(end="revoked", end_step=CLOCK.step)
        SC["prefetch_revoked"].append(int(request.rid))
    return _orig_revoke(self, request)
UnifiedRadixCache.revoke_pending_prefetch = _rec_revoke
_orig_cpp = UnifiedRadixCache.check_prefetch_progress
def _rec_cpp(self, request):
    r = _orig_cpp(self, request)
    if not r: SC["prefetch_waiting"].append(int(request.rid))
    return r
UnifiedRadixCache.check_prefetch_progress = _rec_cpp
BACKUP_OPS = {}   # storage operation id -> tokens
_orig_ws = _HyCC.write_storage
def _rec_ws(self, host_indices, token_ids, *a, **k):
    op_id = _orig_ws(self, host_indices, token_ids, *a, **k)
    BACKUP_OPS[op_id] = len(host_indices); SC["storage_backup_tokens"] += len(host_indices)
    return op_id
_HyCC.write_storage = _rec_ws
_orig_che = UnifiedRadixCache.check_hicache_events
def _rec_che(self):
    before = set(self.ongoing_backup)
    _orig_che(self)
    for op_id in before - set(self.ongoing_backup): SC["storage_backup_acked_tokens"] += BACKUP_OPS.pop(op_id, 0)
UnifiedRadixCache.check_hicache_events = _rec_che
from sglang.srt.mem_cache.hicache_storage import HiCacheFile
_orig_fset = HiCacheFile.set
def _rec_fset(self, key, value=None, *a, **k):
    existed = self.exists(key)
    ok = _orig_fset(self, key, value, *a, **k)
    SC["storage_pages_skipped" if existed else ("storage_pages_written" if ok else "storage_pages_refused")] += 1
    return ok
HiCacheFile.set = _rec_fset
_orig_fget = HiCacheFile.get
def _rec_fget(self, key, *a, **k):
    r = _orig_fget(self, key, *a, **k)
    if r is not None: SC["storage_pages_read"] += 1
    return r
HiCacheFile.get = _rec_fget

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
      "radix_eviction_policy": get_memory().radix_eviction_policy, "copy_lag_steps": LAG,
      "hicache_storage_backend": get_memory().hicache_storage_backend, "storage_backend_class": type(cc.storage_backend).__name__,
      "hicache_storage_prefetch_policy": tree.prefetch_stop_policy, "prefetch_threshold": tree.prefetch_threshold,
      "controller_prefetch_threshold": cc.prefetch_threshold, "prefetch_timeout_base": tree.prefetch_timeout_base,
      "prefetch_timeout_per_page": tree.prefetch_timeout_per_page, "prefetch_capacity_limit": cc.prefetch_capacity_limit,
      "hicache_storage_prefetch_retry_poll_interval": get_memory().hicache_storage_prefetch_retry_poll_interval,
      "hicache_storage_prefetch_retry_max_attempts": get_memory().hicache_storage_prefetch_retry_max_attempts,
      "storage_max_size": A.storage_max_size, "storage_files_at_start": STORAGE_FILES_AT_START,
      "step_seconds": A.step_seconds, "query_lag_steps": A.query_lag_steps,
      "transfer_lag_steps": A.transfer_lag_steps, "read_batches_per_step": A.read_batches_per_step,
      "storage_batch_pages": __import__("sglang.srt.mem_cache.hicache_storage", fromlist=["x"]).STORAGE_BATCH_SIZE, "backup_lag_steps": A.backup_lag_steps})
info = {rid: {"type": "request", "id": int(rid), "prompt_len": len(r.origin_input_ids), "output_len": r.sampling_params.max_new_tokens,
        "arrival_step": ARRIVAL[int(rid)], "first_scheduled_step": None, "first_token_step": None, "finish_step": None,
        "hit_tokens_first_admission": None, "hit_tokens_each_admission": [], "host_hit_tokens_each_admission": [],
        "host_match_tokens_each_admission": [], "host_hit_tokens": 0, "retractions": 0,
        "storage_hit_tokens_each_admission": [], "storage_loaded_tokens_each_admission": [], "prefetch_attempts": ATTEMPTS[rid]} for rid, r in ALL.items()}
TOT = {"loaded_tokens": 0, "backup_tokens": 0, "backup_acked_tokens": 0, "load_acked_tokens": 0, "backup_failed_tokens": 0,
       "device_evicted_tokens": 0, "host_evicted_tokens": 0, "host_freed_tokens": 0}
started = set(); TOT_L3 = {}
step = 0; calls = 0; ACK_WAITS = 0; ACK_WAITS_TOTAL = 0; STORAGE_WAITS = 0; STORAGE_WAITS_TOTAL = 0
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
        if storage_pending():
            # Nothing runnable while storage work is outstanding (a request waits for its prefetch):
            # the real scheduler spins while the storage threads progress; the driver runs all of
            # the queued storage work now (no step passes) and counts it in storage_waits_before.
            storage_io(force=True); STORAGE_WAITS += 1
            if STORAGE_WAITS > 50: sys.exit(f"step {step}: storage work does not drain")
            continue
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
                dev, host_match, loaded, l3, l3_used = ADMIT[r.rid]
                assert dev + loaded == int(pl), (r.rid, dev, loaded, int(pl))
                row.update(kind="new", hit_tokens=dev, host_hit_tokens=loaded, host_match_tokens=host_match, storage_hit_tokens=l3,
                           storage_loaded_tokens=l3_used)
                started.add(r.rid)
                ir = info[r.rid]
                ir["hit_tokens_each_admission"].append(dev); ir["host_hit_tokens_each_admission"].append(loaded)
                ir["host_match_tokens_each_admission"].append(host_match); ir["host_hit_tokens"] += loaded
                ir["storage_hit_tokens_each_admission"].append(l3); ir["storage_loaded_tokens_each_admission"].append(l3_used)
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
    storage_io()   # the storage threads' due work, at the end of the step
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
          "ack_waits_before": ACK_WAITS, "storage_waits_before": STORAGE_WAITS,
          **{k3: (sorted(v3) if isinstance(v3, list) else v3) for k3, v3 in SC.items()},
          "storage_files_after_update": storage_files(), "prefetch_tokens_occupied": int(cc.prefetch_tokens_occupied),
          "ongoing_prefetch_after_update": sorted(int(h.rid) for h in tree.ongoing_prefetch), "pending_backup_acks": len(cc.ack_write_queue), "pending_load_acks": len(cc.ack_load_queue),
          "new_token_ratio_before": round(ratio_before, 6), "new_token_ratio_after": round(s.new_token_ratio_tracker.current, 6),
          "running_after_schedule": s.running_batch.batch_size() if not is_ext else None,
          "waiting_after_schedule": len(s.waiting_queue)})
    for k3, v3 in SC.items():
        if not isinstance(v3, list): TOT_L3[k3] = TOT_L3.get(k3, 0) + v3
    reset_counters(); reset_storage_counters(); ACK_WAITS_TOTAL += ACK_WAITS; ACK_WAITS = 0
    STORAGE_WAITS_TOTAL += STORAGE_WAITS; STORAGE_WAITS = 0
    step += 1
for rid in sorted(info, key=int): emit(info[rid])
unf = [int(r) for r in info if info[r]["finish_step"] is None]
emit({"type": "summary", "steps": step, "schedule_calls": calls, "requests": len(info), "finished": len(info) - len(unf),
      "unfinished": unf, "retractions": sum(v["retractions"] for v in info.values()),
      "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
      "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
      "host_hit_tokens": sum(v["host_hit_tokens"] for v in info.values()),
      "host_match_tokens": sum(sum(v["host_match_tokens_each_admission"]) for v in info.values()),
      **TOT, "ack_waits": ACK_WAITS_TOTAL, "kv_rows_checked": ROWS.checked,
      "storage_hit_tokens": sum(sum(v["storage_hit_tokens_each_admission"]) for v in info.values()),
      "storage_loaded_tokens": sum(sum(v["storage_loaded_tokens_each_admission"]) for v in info.values()),
      **TOT_L3, "storage_waits": STORAGE_WAITS_TOTAL,
      "prefetch_attempts": sum(len(v) for v in ATTEMPTS.values()),
      "prefetch_outcomes": dict(sorted(collections.Counter(str(a["end"]) for v in ATTEMPTS.values() for a in v).items())),
      "storage_files_at_start": STORAGE_FILES_AT_START, "storage_files_at_end": storage_files()})
out.close()
if _ErrorCounter.n: sys.exit(f"{_ErrorCounter.n} ERROR log records (a storage thread failed); the schedule is not valid")
tree.shutdown()   # SGLang's own atexit detach, run now (stops the inert threads, releases what is tracked)
if STORAGE_DIR_IS_TEMP: shutil.rmtree(STORAGE_DIR, ignore_errors=True)
print(f"{A.out}: {step} steps, {len(info) - len(unf)}/{len(info)} finished, host hits {sum(v['host_hit_tokens'] for v in info.values())}, "
      f"{time.time() - T0:.1f}s", file=sys.stderr)
