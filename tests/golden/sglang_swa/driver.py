#!/usr/bin/env python3
"""Drive SGLang 0.5.23's own scheduler code for a HYBRID SLIDING-WINDOW-ATTENTION model (some layers
full attention, some sliding-window attention, as gpt-oss), with the radix cache on and no HiCache,
on CPU without a model or GPU, over a cachesim native JSONL trace, and write a golden per-step
schedule as JSON Lines (format: README.md).

What is real SGLang code (pip package sglang 0.5.23):
  * the pool sizes: model_executor.pool_configurator.create_memory_pool_configurator ->
    HybridSWAPoolConfigurator (or SWARequestCapPoolConfigurator, which SGLang picks with
    --disable-radix-cache and an explicit --max-running-requests) .calculate_pool_sizes_from_max_tokens,
    the path a --max-total-tokens cap takes: full pool = max_total_tokens (page-aligned), SWA pool =
    int(full * --swa-full-tokens-ratio) (page-aligned; ratio default 0.8), validate_swa_pool_size;
  * the pools, built as kv_cache_configurator._build_hybrid_swa_kv_pool and
    _build_token_to_kv_pool_allocator build them for is_hybrid_swa: a real SWAKVPool over two real
    MHATokenToKVPool sub-pools (layer 0 sliding-window, layer 1 full attention, as gpt-oss
    alternates them; 1 head, head_dim 1, float64, on CPU) under the real SWATokenToKVPoolAllocator
    (two TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator and the full->SWA index mapping);
    ReqToTokenPool real;
  * the tree cache, built as kv_cache_builder.build_kv_cache builds it: CacheInitParams (with
    sliding_window_size, swa_gates_prefix_match=True) -> registry.create_tree_cache
    (TreeCacheBuildContext, is_hybrid_swa=True, full_tokens_per_layer) -> default_radix_cache_factory
    -> create_unified_radix_cache -> UnifiedRadixCache with components FULL + SWA
    (unified_cache/components/swa.py); its TreeCore is the one SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND
    selects: "rust" (default, the compiled extension in the wheel) or "python"
    (unified_tree_core.UnifiedTreeCore); --tree-core picks it;
  * Scheduler.get_next_batch_to_run with its hybrid-SWA paths (batch_is_full reset for is_hybrid_swa,
    PrefillAdder with SWAPrefillBudget, the SWA-aware chunk cap and retraction checks),
    update_running_batch / retract_decode, ScheduleBatch.prepare_for_extend / prepare_for_decode
    (allocation, evict_for_alloc of both pools, maybe_evict_swa: out-of-window SWA frees every
    SGLANG_SWA_EVICTION_INTERVAL tokens), the batch result processor (cache_unfinished_req /
    cache_finished_req -> insert, SWA tombstones), all in event_loop_normal's order.

What is replaced (and nothing else):
  1. Scheduler.__init__ is not run (needs a model, torch.distributed, sockets): the object is
     assembled by ../sglang_common.py (shared by the SGLang drivers), with inert stubs for features that are
     off (grammar, LoRA, DP attention, metrics, streaming), and the attributes Scheduler.__init__ sets
     from build_kv_cache's result for a hybrid-SWA model (is_hybrid_swa, sliding_window_size,
     full_tokens_per_layer, swa_tokens_per_layer; the model runner's prefill_aware_swa = False, as for
     gpt-oss).
  2. The forward samples one token per row (never EOS) and writes each token's id into the KV rows it
     fills in both sub-pools (full layer: row of the full index; SWA layer: row of its SWA index
     through the allocator's mapping). Before every forward the driver checks that the full layer's
     rows of every scheduled request's whole prefix, and the SWA layer's rows of its last
     `sliding window` prefix tokens, hold that request's token ids (--no-check-kv turns this off).

Arrival rule (as the sglang-priority goldens): a record with timestamp_ms t is queued before step
ceil(t / 1000); the driver stops with an error if the engine would go idle with requests still to
arrive.
"""
import os, sys, argparse, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports()
ap = argparse.ArgumentParser(description="Drive SGLang's own Scheduler + hybrid-SWA radix cache over a cachesim JSONL trace (see README.md)")
C.scheduler_args(ap, pool_help="full-attention pool size (SGLang's --max-total-tokens)")
ap.add_argument("--sliding-window", type=int, default=128,
                help="the model's sliding_window_size as SGLang's scheduler and tree see it (gpt-oss: config sliding_window - 1)")
ap.add_argument("--swa-full-tokens-ratio", type=float, default=None, help="SWA pool = int(full pool x ratio); SGLang's default 0.8")
ap.add_argument("--swa-tokens", type=int, default=None,
                help="driver convenience: sets --swa-full-tokens-ratio to (N + 0.5) / max_total_tokens, so the SWA pool is N "
                     "tokens (page-aligned down)")
ap.add_argument("--disable-radix-cache", action="store_true")
ap.add_argument("--tree-core", default="rust", choices=["rust", "python"])
ap.add_argument("--no-check-kv", action="store_true")
ap.add_argument("--allow-dropped-chunk", action="store_true",
                help="go on when SGLang admits a second chunked request in one batch (README.md, 'A bug'); "
                     "the request whose chunk is dropped then decodes over KV rows it never computed")
A = ap.parse_args(); T0 = time.time()
os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = A.tree_core
import torch
from types import SimpleNamespace
from sglang.srt.runtime_context import get_context
POOL_ARG = A.max_total_tokens; PAGE = A.page_size; W = A.sliding_window
if A.swa_tokens is not None:
    if A.swa_full_tokens_ratio is not None: sys.exit("--swa-tokens excludes --swa-full-tokens-ratio")
    RATIO_ARG = (A.swa_tokens + 0.5) / POOL_ARG
else:
    RATIO_ARG = A.swa_full_tokens_ratio
sa_kw = dict(device="cpu", attention_backend="torch_native", page_size=PAGE,
    chunked_prefill_size=A.chunked_prefill_size, max_prefill_tokens=A.max_prefill_tokens,
    max_running_requests=A.max_running_requests, schedule_policy=A.schedule_policy,
    schedule_conservativeness=A.schedule_conservativeness, disable_overlap_schedule=True,
    max_total_tokens=POOL_ARG, disable_radix_cache=A.disable_radix_cache)
if RATIO_ARG is not None: sa_kw["swa_full_tokens_ratio"] = RATIO_ARG
ov = get_context().override_server_args(**sa_kw)
sa = ov.install()
from sglang.srt.runtime_context import get_schedule, get_memory
from sglang.srt.environ import envs

from sglang.srt.managers.scheduler import Scheduler  # noqa: F401  (loaded here, before the pools and the tree)
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool, MHATokenToKVPool
from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
import sglang.srt.mem_cache.common as _mc_common

# ---------------------------------------------------------------- pool sizes, as the KV configurator
SWA_LAYERS, FULL_LAYERS = [0], [1]     # gpt-oss alternates sliding / full layers; two layers suffice here
R = A.max_running_requests; CTX = A.context_len
mc = SimpleNamespace(vocab_size=1 << 30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                     hf_config=SimpleNamespace(architectures=["GptOssForCausalLM"]), hf_text_config=SimpleNamespace(),
                     num_key_value_heads=1, is_hybrid_swa=True, sliding_window_size=W, attention_arch=None,
                     head_dim=1, v_head_dim=1, swa_head_dim=1, swa_v_head_dim=1,
                     get_num_kv_heads=lambda *a: 1, get_swa_num_kv_heads=lambda *a: 1,
                     self_opened_think_start_ids=None, think_end_id=None)
kvc = SimpleNamespace(kv_cache_dtype_str="auto", model_config=mc, kv_cache_dtype=torch.float64, is_hybrid_swa=True,
                      layer_info=SimpleNamespace(full_attention_layer_ids=FULL_LAYERS, swa_attention_layer_ids=SWA_LAYERS),
                      sliding_window_size=W, page_size=PAGE, spec_algorithm=SpeculativeAlgorithm.NONE,
                      is_draft_worker=False, spec_aux_config=None, fused_entry_bytes=lambda name: None, attn_dp_size=1)
configurator = create_memory_pool_configurator(kvc)
pool_cfg = configurator.calculate_pool_sizes_from_max_tokens(POOL_ARG, PAGE)
FULL = int(pool_cfg.full_max_total_num_tokens); SWA = int(pool_cfg.swa_max_total_num_tokens)
POOL = int(pool_cfg.max_total_num_tokens)

# ---------------------------------------------------------------- pools and tree cache, as kv_cache_builder
rtp = ReqToTokenPool(size=R, max_context_len=CTX, device="cpu", enable_memory_saver=False)
kv = SWAKVPool(size=FULL, size_swa=SWA, page_size=PAGE, dtype=torch.float64, head_num=1, head_dim=1,
               swa_attention_layer_ids=SWA_LAYERS, full_attention_layer_ids=FULL_LAYERS, device="cpu",
               enable_kv_cache_copy=False, token_to_kv_pool_class=MHATokenToKVPool, enable_memory_saver=False)
alloc = SWATokenToKVPoolAllocator(FULL, SWA, page_size=PAGE, dtype=torch.float64, device="cpu", kvcache=kv,
                                  need_sort=False, req_to_token_pool=rtp)
FWD_STREAM = None
tp_worker = SimpleNamespace(
    model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False, forward_stream=FWD_STREAM),
    register_hicache_layer_transfer_counter=lambda counter: None)
params = CacheInitParams(disable=A.disable_radix_cache, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=PAGE,
                         eviction_policy=get_memory().radix_eviction_policy,
                         eviction_policy_config=get_memory().radix_eviction_policy_config,
                         chunked_prefill_size=get_schedule().chunked_prefill_size,
                         sliding_window_size=W, swa_gates_prefix_match=True,
                         decoder_swa_bounded_replay=False, draft_swa_window=0)
tree = create_tree_cache(TreeCacheBuildContext(server_args=sa, params=params, is_hybrid_swa=True, is_hybrid_ssm=False,
    enable_hierarchical_cache=False, disable_radix_cache=A.disable_radix_cache, tp_worker=tp_worker, model_config=mc,
    tp_size=1, tp_rank=0, tp_group=None, full_tokens_per_layer=FULL))
assert isinstance(tree, UnifiedRadixCache) and tree.supports_swa() and tree.cache_controller is None

# ---------------------------------------------------------------- scheduler object (../sglang_common.py)
max_req_len = min(CTX - 1, FULL - 1)   # tp_worker.get_worker_info: min(context_len, effective capacity) - 1
s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                         max_req_len=max_req_len, max_req_input_len=max_req_len - 5, disable_radix_cache=A.disable_radix_cache,
                         # as Scheduler.__init__ from build_kv_cache's result for a hybrid-SWA model
                         is_hybrid_swa=True, sliding_window_size=W, full_tokens_per_layer=FULL, swa_tokens_per_layer=SWA,
                         kv_shard_widening=1)

trace, ARRIVAL = C.load_trace(A.trace)
ALL = C.make_requests(s, trace, mc, ignore_eos=not A.no_ignore_eos)
C.check_not_clipped(trace, ALL)
ARR = C.Arrivals(s, trace, ARRIVAL, ALL); queue_arrivals = ARR.queue
from sglang.srt.managers.utils import GenerationBatchResult
ABORTED = []   # requests the scheduler ends itself (retract_decode's OOM abort): its report to the tokenizer is the sink
C.finish_scheduler(s, aborted=ABORTED)
OUT_BASE = 10_000_000; OUT_STRIDE = 100_000
import sglang

# ---------------------------------------------------------------- recorders (wrappers that change nothing)
RETRACTED = []; C.record_retractions(RETRACTED)
MATCH = {}   # rid -> (full_kv_hit_length, swa_branching_seqlen) of the request's last match
_orig_match = UnifiedRadixCache.match_prefix
def _rec_match(self, params, *a, **k):
    res = _orig_match(self, params, *a, **k)
    if params.req is not None:
        MATCH[params.req.rid] = (int(res.full_kv_hit_length), res.swa_branching_seqlen)
    return res
UnifiedRadixCache.match_prefix = _rec_match
from sglang.srt.managers.schedule_policy import PrefillAdder
ADMIT = {}   # rid -> (device prefix at admission, full-KV match, swa branching seqlen)
_orig_add = PrefillAdder.add_one_req
def _rec_add(self, req, *a, **k):
    dev = req.prefix_len; fm, br = MATCH.get(req.rid, (0, None))
    res = _orig_add(self, req, *a, **k)
    if self.can_run_list and self.can_run_list[-1] is req:
        ADMIT[req.rid] = (dev, fm, br)
    return res
PrefillAdder.add_one_req = _rec_add
CAPPED = []   # requests whose chunk the SWA budget cut below the remaining chunk budget
DROPPED = []  # requests admitted as chunked whose new_chunked_req slot a later request of the same batch took
_orig_commit = PrefillAdder._commit_prefill_admission
def _rec_commit(self, req, admission, *a, **k):
    prev = self.new_chunked_req
    if admission.is_chunked and self.rem_chunk_tokens is not None and admission.extend_len + PAGE <= self.rem_chunk_tokens:
        CAPPED.append(req.rid)   # a chunk cut below the chunk budget: SWAPrefillBudget's SWA cap
    r = _orig_commit(self, req, admission, *a, **k)
    if admission.is_chunked and prev is not None and prev is not req: DROPPED.append(prev.rid)
    return r
PrefillAdder._commit_prefill_admission = _rec_commit
CNT = {"full_evicted": 0, "swa_evicted": 0, "swa_window_freed": 0, "evict_calls": 0}
_orig_evict = UnifiedRadixCache._evict
def _rec_evict(self, *a, **k):
    r = _orig_evict(self, *a, **k)
    CNT["full_evicted"] += r.num_tokens_evicted; CNT["swa_evicted"] += r.swa_num_tokens_evicted
    if r.num_tokens_evicted or r.swa_num_tokens_evicted: CNT["evict_calls"] += 1
    return r
UnifiedRadixCache._evict = _rec_evict
# SWA slots a running request frees once they slide out of its window (common.free_swa_out_of_window_slots
# -> allocator.free_swa_segment): counted while that function runs, passed through unchanged.
_IN_WINDOW_FREE = [0]
_orig_fsoow = _mc_common.free_swa_out_of_window_slots
def _rec_fsoow(*a, **k):
    _IN_WINDOW_FREE[0] += 1
    try: return _orig_fsoow(*a, **k)
    finally: _IN_WINDOW_FREE[0] -= 1
_mc_common.free_swa_out_of_window_slots = _rec_fsoow
import sglang.srt.mem_cache.unified_cache.components.swa as _swa_comp
_swa_comp.free_swa_out_of_window_slots = _rec_fsoow
_orig_fss = SWATokenToKVPoolAllocator.free_swa_segment
def _rec_fss(self, free_index, *a, **k):
    if _IN_WINDOW_FREE[0]: CNT["swa_window_freed"] += int(free_index.numel())
    return _orig_fss(self, free_index, *a, **k)
SWATokenToKVPoolAllocator.free_swa_segment = _rec_fss

# ---------------------------------------------------------------- fake forward: KV rows hold token ids
KF = kv.full_kv_pool.k_buffer[0]; VF = kv.full_kv_pool.v_buffer[0]
KS = kv.swa_kv_pool.k_buffer[0]; VS = kv.swa_kv_pool.v_buffer[0]
MAP = alloc.full_to_swa_index_mapping
KV_CHECKED = {"full": 0, "swa": 0}
def check_and_fill(b, is_ext):
    for r, lo, hi in C.batch_spans(b, is_ext):
        ids = torch.tensor(C.seq_ids(r)[:hi], dtype=torch.float64)
        row = rtp.req_to_token[r.kv.req_pool_idx, :hi].to(torch.int64)
        if not A.no_check_kv and lo > 0:
            # full layer: every prefix row
            if not (torch.equal(KF[row[:lo], 0, 0], ids[:lo]) and torch.equal(VF[row[:lo], 0, 0], -ids[:lo])):
                sys.exit(f"step {CLOCK}: request {r.rid}: full-layer KV rows of its prefix do not hold its tokens "
                         f"(first bad position {C.first_bad(KF[row[:lo], 0, 0], ids[:lo])})")
            KV_CHECKED["full"] += lo
            # SWA layer: the last W prefix rows (what the first new token attends to)
            w0 = max(0, lo - W)
            srow = MAP[row[w0:lo]]
            if bool((srow <= 0).any()):
                sys.exit(f"step {CLOCK}: request {r.rid}: a position in [{w0}, {lo}) has no SWA slot")
            if not (torch.equal(KS[srow, 0, 0], ids[w0:lo]) and torch.equal(VS[srow, 0, 0], -ids[w0:lo])):
                sys.exit(f"step {CLOCK}: request {r.rid}: SWA-layer KV rows of its window do not hold its tokens "
                         f"(first bad position {w0 + C.first_bad(KS[srow, 0, 0], ids[w0:lo])})")
            KV_CHECKED["swa"] += lo - w0
        KF[row[lo:hi], 0, 0] = ids[lo:hi]; VF[row[lo:hi], 0, 0] = -ids[lo:hi]
        srow = MAP[row[lo:hi]]
        live = srow > 0   # positions the allocator gave no SWA slot (none expected) are not written
        KS[srow[live], 0, 0] = ids[lo:hi][live]; VS[srow[live], 0, 0] = -ids[lo:hi][live]

# ---------------------------------------------------------------- run
def pools():
    return (alloc.full_available_size(), alloc.swa_available_size(), tree.full_evictable_size(), tree.swa_evictable_size())
out, emit = C.open_jsonl(A.out)
emit({"type": "config", "sglang_version": sglang.__version__, "torch_version": torch.__version__.split("+")[0],
      "trace": os.path.basename(A.trace), "num_requests": len(trace),
      "max_total_tokens": POOL, "full_pool_tokens": FULL, "swa_pool_tokens": SWA,
      "swa_full_tokens_ratio": get_schedule().swa_full_tokens_ratio, "pool_configurator": type(configurator).__name__,
      "free_tokens_at_start": alloc.available_size(), "full_free_tokens_at_start": alloc.full_available_size(),
      "swa_free_tokens_at_start": alloc.swa_available_size(), "max_running_requests": R,
      "chunked_prefill_size": s.chunked_prefill_size, "max_prefill_tokens": s.max_prefill_tokens,
      "schedule_policy": str(s.policy.policy), "schedule_conservativeness": A.schedule_conservativeness,
      "page_size": PAGE, "ignore_eos": not A.no_ignore_eos, "overlap_schedule": False, "mixed_chunk": bool(s.is_mixed_chunk),
      "init_new_token_ratio": s.new_token_ratio_tracker.current, "context_len": CTX, "max_req_len": max_req_len,
      "is_hybrid_swa": True, "sliding_window_size": W, "swa_retain_window": tree.swa_retain_window,
      "swa_layer_ids": SWA_LAYERS, "full_layer_ids": FULL_LAYERS, "prefill_aware_swa": False,
      "swa_eviction_interval": max(1, envs.SGLANG_SWA_EVICTION_INTERVAL.get()),
      "release_prefill_swa": bool(envs.SGLANG_OPT_RELEASE_PREFILL_SWA.get()),
      "free_out_of_window_slots": bool(envs.SGLANG_OPT_UNIFIED_CACHE_FREE_OUT_OF_WINDOW_SLOTS.get()),
      "disable_radix_cache": A.disable_radix_cache, "tree_cache": type(tree).__name__,
      "tree_components": [str(c.name) for c in tree.tree_components], "tree_core": type(tree.tree_core).__name__,
      "allocator": type(alloc).__name__, "kv_pool": type(kv).__name__,
      "radix_eviction_policy": get_memory().radix_eviction_policy})
info = {rid: {"type": "request", "id": int(rid), "prompt_len": len(r.origin_input_ids), "output_len": r.sampling_params.max_new_tokens,
        "arrival_step": ARRIVAL[int(rid)], "first_scheduled_step": None, "first_token_step": None, "finish_step": None,
        "hit_tokens_first_admission": None, "hit_tokens_each_admission": [], "full_match_tokens_each_admission": [],
        "retractions": 0, "aborted_step": None} for rid, r in ALL.items()}
TOT = {"swa_capped_chunks": 0, "full_evicted_tokens": 0, "swa_evicted_tokens": 0, "swa_window_freed_tokens": 0, "evict_calls": 0}
started = set()
CARRY = {"retracted": [], "aborted": []}
step = 0; calls = 0; CLOCK = 0
def reset_counters():
    for k in CNT: CNT[k] = 0
reset_counters()
while step < 10_000_000:
    CLOCK = step
    queue_arrivals(step)
    fb, sb, feb, seb = pools(); ratio_before = s.new_token_ratio_tracker.current
    RETRACTED.clear(); ADMIT.clear(); CAPPED.clear(); ABORTED.clear()
    plan = s.get_next_batch_to_run(s.running_batch, s.last_batch); calls += 1
    s.running_batch = plan.running_batch; b = plan.batch_to_run
    retracted = sorted(RETRACTED, key=int)
    if DROPPED:
        if not A.allow_dropped_chunk:
            sys.exit(f"step {step}: SGLang admitted request {DROPPED[-1]} as a chunked prefill and then another chunked request "
                     f"in the same batch, which drops the rest of {DROPPED[-1]}'s prompt (README.md, 'A bug'); "
                     f"--allow-dropped-chunk goes on (with --no-check-kv)")
        print(f"step {step}: dropped chunk of request(s) {DROPPED}", file=sys.stderr); DROPPED.clear()
    for rid in retracted: info[rid]["retractions"] += 1; started.discard(rid)
    aborted = sorted(set(ABORTED), key=int)
    for rid in aborted: info[rid]["aborted_step"] = step
    if b is not None and (CARRY["retracted"] or CARRY["aborted"]):
        retracted = CARRY["retracted"] + retracted; aborted = CARRY["aborted"] + aborted
        CARRY["retracted"], CARRY["aborted"] = [], []
    if b is None:
        s.last_batch = None
        if not ARR.pending() and not s.waiting_queue and s.running_batch.is_empty() and s.chunked_req is None: break
        # nothing to run after a retraction / abort: SGLang schedules again; they are reported with the next step
        if retracted or aborted: CARRY["retracted"] += retracted; CARRY["aborted"] += aborted; continue
        if ARR.pending(): sys.exit(f"the engine would go idle at step {step} with requests still to arrive")
        sys.exit(f"stuck at step {step}")
    is_ext = b.forward_mode.is_extend()
    rows = []
    if is_ext:
        for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens):
            row = {"id": int(r.rid), "tokens": int(el), "computed_before": int(pl)}
            if r.rid not in started:
                dev, fm, br = ADMIT[r.rid]
                assert dev == int(pl), (r.rid, dev, int(pl))
                row.update(kind="new", hit_tokens=dev, full_match_tokens=fm, swa_branching_seqlen=br)
                started.add(r.rid)
                ir = info[r.rid]
                ir["hit_tokens_each_admission"].append(dev); ir["full_match_tokens_each_admission"].append(fm)
                if ir["hit_tokens_first_admission"] is None:
                    ir["hit_tokens_first_admission"] = dev; ir["first_scheduled_step"] = step
            else:
                row["kind"] = "chunk"
            rows.append(row)
    else:
        rows = [{"id": int(r.rid), "tokens": 1, "kind": "running"} for r in b.reqs]
    fa, sa_, fea, sea = pools()
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
    s.last_batch = b
    sampled = [r.rid for r in b.reqs if len(r.output_ids) > outlen_before[r.rid]]
    finished = [r.rid for r in b.reqs if r.finished()]
    for rid in sampled:
        if info[rid]["first_token_step"] is None: info[rid]["first_token_step"] = step
    for rid in finished: info[rid]["finish_step"] = step
    ntok = sum(x["tokens"] for x in rows)
    fu, su, feu, seu = pools()
    fpu, spu = tree.full_protected_size(), tree.swa_protected_size()
    st = {"full_evicted_tokens": CNT["full_evicted"], "swa_evicted_tokens": CNT["swa_evicted"],
          "swa_window_freed_tokens": CNT["swa_window_freed"], "evict_calls": CNT["evict_calls"]}
    for k2, v2 in st.items(): TOT[k2] += v2
    TOT["swa_capped_chunks"] += len(CAPPED)
    emit({"type": "step", "step": step, "forward_mode": "extend" if is_ext else "decode", "num_scheduled_tokens": ntok,
          "batch_size": len(rows), "prefill_tokens": ntok if is_ext else 0, "decode_seqs": 0 if is_ext else len(rows),
          "scheduled": rows, "retracted": [int(x) for x in retracted], "aborted": [int(x) for x in aborted], "sampled": [int(x) for x in sampled],
          "finished": [int(x) for x in finished], "swa_capped_chunks": [int(x) for x in CAPPED], "chunked_req": int(s.chunked_req.rid) if s.chunked_req is not None else None,
          "free_tokens_before": min(fb, sb), "free_tokens_after_schedule": min(fa, sa_), "free_tokens_after_update": min(fu, su),
          "full_free_tokens_before": fb, "full_free_tokens_after_schedule": fa, "full_free_tokens_after_update": fu,
          "swa_free_tokens_before": sb, "swa_free_tokens_after_schedule": sa_, "swa_free_tokens_after_update": su,
          "full_evictable_tokens_before": feb, "full_evictable_tokens_after_schedule": fea, "full_evictable_tokens_after_update": feu,
          "swa_evictable_tokens_before": seb, "swa_evictable_tokens_after_schedule": sea, "swa_evictable_tokens_after_update": seu,
          "full_protected_tokens_after_update": fpu, "swa_protected_tokens_after_update": spu,
          "swa_tombstone_tokens_after_update": (feu + fpu) - (seu + spu), **st,
          "new_token_ratio_before": round(ratio_before, 6), "new_token_ratio_after": round(s.new_token_ratio_tracker.current, 6),
          "running_after_schedule": s.running_batch.batch_size() if not is_ext else None,
          "waiting_after_schedule": len(s.waiting_queue)})
    reset_counters()
    step += 1
for rid in sorted(info, key=int): emit(info[rid])
unf = [int(r) for r in info if info[r]["finish_step"] is None and info[r]["aborted_step"] is None]
emit({"type": "summary", "steps": step, "schedule_calls": calls, "requests": len(info), "finished": len(info) - len(unf),
      "unfinished": unf, "aborted": [int(r) for r in info if info[r]["aborted_step"] is not None], "retractions": sum(v["retractions"] for v in info.values()),
      "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
      "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
      "full_match_tokens_all_admissions": sum(sum(v["full_match_tokens_each_admission"]) for v in info.values()),
      "admissions_with_hit": sum(sum(1 for h in v["hit_tokens_each_admission"] if h > 0) for v in info.values()),
      "admissions_hit_below_full_match": sum(sum(1 for h, f in zip(v["hit_tokens_each_admission"], v["full_match_tokens_each_admission"]) if h < f)
                                             for v in info.values()),
      **TOT, "kv_rows_checked_full": KV_CHECKED["full"], "kv_rows_checked_swa": KV_CHECKED["swa"]})
out.close()
print(f"{A.out}: {step} steps, {len(info) - len(unf)}/{len(info)} finished, hits {sum(sum(v['hit_tokens_each_admission']) for v in info.values())}, "
      f"retractions {sum(v['retractions'] for v in info.values())}, full evicted {TOT['full_evicted_tokens']}, "
      f"swa evicted {TOT['swa_evicted_tokens']}, {time.time() - T0:.1f}s", file=sys.stderr)
