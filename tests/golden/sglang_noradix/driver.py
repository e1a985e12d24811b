#!/usr/bin/env python3
"""Drive SGLang 0.5.23's own scheduler code for an ordinary model (full attention only, dense) WITH
THE RADIX CACHE DISABLED (--disable-radix-cache), no HiCache, on CPU without a model or GPU, over a
cachesim native JSONL trace, and write a golden per-step schedule as JSON Lines (format: README.md).

What is real SGLang code (pip package sglang 0.5.23):
  * the pool size: model_executor.pool_configurator.create_memory_pool_configurator ->
    DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens, the path a --max-total-tokens cap
    takes (the pool is max_total_tokens, page-aligned down);
  * the pools, as kv_cache_configurator builds them for a dense model: a real MHATokenToKVPool
    (1 layer, 1 head, head_dim 1, float64, on CPU) under the real TokenToKVPoolAllocator (page size 1)
    or PagedTokenToKVPoolAllocator (page size > 1); ReqToTokenPool real;
  * the tree cache, built as kv_cache_builder.build_kv_cache builds it: CacheInitParams(disable=True)
    -> registry.create_tree_cache(TreeCacheBuildContext(disable_radix_cache=True, is_hybrid_swa=False))
    -> default_radix_cache_factory -> (disable_radix_cache, not pure SWA) create_unified_radix_cache
    -> UnifiedRadixCache with component FULL and `disable` set: match_prefix returns an empty match,
    insert / evict_for_alloc do nothing, a finished request's KV is freed, evictable size 0;
  * Scheduler.init_schedule_policy (SchedulePolicy._validate_and_adjust_policy: a cache-aware policy
    such as lpm falls back to FCFS when the tree is disabled), Scheduler.get_next_batch_to_run,
    PrefillAdder (with the tree disabled an ignore_eos request goes through add_one_req_ignore_eos:
    PrefillBudget.can_allocate_prefill, then its req_states future-memory check with
    IGNORE_EOS_RESERVE_TOKENS; other requests through the ordinary add_one_req), update_running_batch
    / retract_decode, ScheduleBatch.prepare_for_extend / prepare_for_decode, the batch result
    processor (cache_unfinished_req / release_kv_cache), all in event_loop_normal's order.

What is replaced (and nothing else):
  1. Scheduler.__init__ is not run (needs a model, torch.distributed, sockets): the object is
     assembled by ../sglang_common.py (shared by the SGLang drivers), with inert stubs for features that are
     off (grammar, LoRA, DP attention, metrics, streaming), and the attributes Scheduler.__init__
     sets from build_kv_cache's result for a dense model (is_hybrid_swa False, no sliding window,
     disable_radix_cache True).
  2. The forward samples one token per row (never EOS) and writes each token's id into the K/V rows
     it fills. Before every forward the driver checks that the rows of every scheduled request's
     whole prefix hold that request's token ids (--no-check-kv turns this off).

Recorders (wrappers that change nothing): PrefillAdder.add_one_req / add_one_req_ignore_eos and
PrefillBudget.can_allocate_prefill, to tell why an ignore_eos request was refused
(`ignore_eos_refusals`: can_allocate_prefill, or the req_states check), and ScheduleBatch.retract_decode.

Arrival rule (as the sglang-priority goldens): a record with timestamp_ms t is queued before step
ceil(t / 1000); the driver stops with an error if the engine would go idle with requests still to
arrive.
"""
import os, sys, argparse, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports()
ap = argparse.ArgumentParser(description="Drive SGLang's own Scheduler with the radix cache disabled over a cachesim JSONL trace (see README.md)")
C.scheduler_args(ap)
ap.add_argument("--no-check-kv", action="store_true")
A = ap.parse_args(); T0 = time.time()
import torch
from types import SimpleNamespace
from sglang.srt.runtime_context import get_context
PAGE = A.page_size
ov = get_context().override_server_args(device="cpu", attention_backend="torch_native", page_size=PAGE,
    chunked_prefill_size=A.chunked_prefill_size, max_prefill_tokens=A.max_prefill_tokens,
    max_running_requests=A.max_running_requests, schedule_policy=A.schedule_policy,
    schedule_conservativeness=A.schedule_conservativeness, disable_overlap_schedule=True,
    max_total_tokens=A.max_total_tokens, disable_radix_cache=True)
sa = ov.install()
from sglang.srt.runtime_context import get_schedule, get_memory
from sglang.srt.managers.scheduler import Scheduler  # noqa: F401  (loaded here, before the pools and the tree)
from sglang.srt.managers.schedule_policy import PrefillAdder, AddReqResult, IGNORE_EOS_RESERVE_TOKENS
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool, MHATokenToKVPool
from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator
from sglang.srt.mem_cache.prefill_budget import PrefillBudget
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator, DefaultPoolConfigurator
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

# ---------------------------------------------------------------- pool size, as the KV configurator
R = A.max_running_requests; CTX = A.context_len
_HF = SimpleNamespace(architectures=["LlamaForCausalLM"], model_type="llama"); _HF.get_text_config = lambda *a, **k: _HF
mc = SimpleNamespace(vocab_size=1 << 30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                     hf_config=_HF, hf_text_config=_HF,
                     num_key_value_heads=1, is_hybrid_swa=False, sliding_window_size=None, attention_arch=None,
                     head_dim=1, v_head_dim=1, get_num_kv_heads=lambda *a: 1, linear_attn_registry_result=None, is_draft_model=False,
                     self_opened_think_start_ids=None, think_end_id=None)
kvc = SimpleNamespace(kv_cache_dtype_str="auto", model_config=mc, kv_cache_dtype=torch.float64, is_hybrid_swa=False,
                      layer_info=SimpleNamespace(num_effective_layers=1, start_layer=0, end_layer=1),
                      server_args=sa, use_mla_backend=False, pp_size=1, page_size=PAGE,
                      spec_algorithm=SpeculativeAlgorithm.NONE, is_draft_worker=False, spec_aux_config=None,
                      fused_entry_bytes=lambda name: None, attn_dp_size=1, kv_shard_size=1, kv_shard_spec=None)
configurator = create_memory_pool_configurator(kvc)
assert type(configurator) is DefaultPoolConfigurator, type(configurator)
POOL = int(configurator.calculate_pool_sizes_from_max_tokens(A.max_total_tokens, PAGE).max_total_num_tokens)

# ---------------------------------------------------------------- pools and tree cache, as kv_cache_builder
rtp = ReqToTokenPool(size=R, max_context_len=CTX, device="cpu", enable_memory_saver=False)
kv = MHATokenToKVPool(size=POOL, page_size=PAGE, dtype=torch.float64, head_num=1, head_dim=1, layer_num=1,
                      device="cpu", enable_memory_saver=False)
if PAGE == 1:
    alloc = TokenToKVPoolAllocator(POOL, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
else:
    alloc = PagedTokenToKVPoolAllocator(POOL, page_size=PAGE, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
tp_worker = SimpleNamespace(
    model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False, forward_stream=None),
    register_hicache_layer_transfer_counter=lambda counter: None)
params = CacheInitParams(disable=True, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=PAGE,
                         eviction_policy=get_memory().radix_eviction_policy,
                         eviction_policy_config=get_memory().radix_eviction_policy_config,
                         chunked_prefill_size=get_schedule().chunked_prefill_size)
tree = create_tree_cache(TreeCacheBuildContext(server_args=sa, params=params, is_hybrid_swa=False, is_hybrid_ssm=False,
    enable_hierarchical_cache=False, disable_radix_cache=True, tp_worker=tp_worker, model_config=mc,
    tp_size=1, tp_rank=0, tp_group=None))
assert isinstance(tree, UnifiedRadixCache) and tree.disable and tree.cache_controller is None and not tree.supports_swa()

# ---------------------------------------------------------------- scheduler object (../sglang_common.py)
max_req_len = min(CTX - 1, POOL - 1)   # tp_worker.get_worker_info: min(context_len, effective capacity) - 1
s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                         max_req_len=max_req_len, max_req_input_len=max_req_len - 5, disable_radix_cache=True,
                         # as Scheduler.__init__ from build_kv_cache's result for a dense model
                         full_tokens_per_layer=None, swa_tokens_per_layer=None, kv_shard_widening=1)

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
ADMIT = {}       # rid -> prefix at admission (the device hit; 0 with the tree disabled)
REFUSED = []     # ignore_eos requests add_one_req_ignore_eos did not admit: (rid, reason)
REFUSED_OTHER = []  # requests the ordinary add_one_req (no ignore_eos) did not admit: (rid, AddReqResult)
ADMIT_PATH = {"ignore_eos": 0, "default": 0}
_CAP = []        # results of can_allocate_prefill while add_one_req_ignore_eos runs
_IN_IE = [0]
_orig_cap = PrefillBudget.can_allocate_prefill
def _rec_cap(self, *a, **k):
    r = _orig_cap(self, *a, **k)
    if _IN_IE[0]: _CAP.append(bool(r))
    return r
PrefillBudget.can_allocate_prefill = _rec_cap
_orig_ie = PrefillAdder.add_one_req_ignore_eos
def _rec_ie(self, req, *a, **k):
    _CAP.clear(); _IN_IE[0] += 1; n0 = len(self.can_run_list)
    try: res = _orig_ie(self, req, *a, **k)
    finally: _IN_IE[0] -= 1
    admitted = len(self.can_run_list) > n0 and self.can_run_list[-1] is req
    if admitted: ADMIT_PATH["ignore_eos"] += 1
    else:
        assert len(_CAP) == 1, _CAP
        if not _CAP[0]: reason = "can_allocate_prefill"
        elif res == AddReqResult.NO_TOKEN: reason = "req_states"   # the only other NO_TOKEN return before admission
        else: reason = "other:" + res.name
        REFUSED.append((req.rid, reason))
    return res
PrefillAdder.add_one_req_ignore_eos = _rec_ie
_orig_add = PrefillAdder.add_one_req
def _rec_add(self, req, *a, **k):
    dev = req.prefix_len; n0 = len(self.can_run_list)
    res = _orig_add(self, req, *a, **k)
    admitted = len(self.can_run_list) > n0 and self.can_run_list[-1] is req
    if admitted:
        ADMIT[req.rid] = dev
        if not req.sampling_params.ignore_eos: ADMIT_PATH["default"] += 1
    elif not req.sampling_params.ignore_eos:
        REFUSED_OTHER.append((req.rid, res.name))
    return res
PrefillAdder.add_one_req = _rec_add

# ---------------------------------------------------------------- fake forward: KV rows hold token ids
ROWS = C.TokenRows(kv, rtp, check=not A.no_check_kv)
def check_and_fill(b, is_ext): ROWS(b, is_ext, CLOCK)

# ---------------------------------------------------------------- run
def pools(): return (alloc.available_size(), tree.evictable_size())
out, emit = C.open_jsonl(A.out)
emit({"type": "config", "sglang_version": sglang.__version__, "torch_version": torch.__version__.split("+")[0],
      "trace": os.path.basename(A.trace), "num_requests": len(trace), "max_total_tokens": POOL,
      "pool_configurator": type(configurator).__name__, "free_tokens_at_start": alloc.available_size(),
      "max_running_requests": R, "chunked_prefill_size": s.chunked_prefill_size, "max_prefill_tokens": s.max_prefill_tokens,
      "schedule_policy": str(s.policy.policy), "schedule_policy_arg": A.schedule_policy,
      "schedule_conservativeness": A.schedule_conservativeness, "page_size": PAGE, "ignore_eos": not A.no_ignore_eos,
      "overlap_schedule": False, "mixed_chunk": bool(s.is_mixed_chunk), "init_new_token_ratio": s.new_token_ratio_tracker.current,
      "context_len": CTX, "max_req_len": max_req_len, "is_hybrid_swa": False, "disable_radix_cache": True,
      "tree_cache": type(tree).__name__, "tree_components": [str(c.name) for c in tree.tree_components],
      "allocator": type(alloc).__name__, "kv_pool": type(kv).__name__,
      "ignore_eos_reserve_tokens": IGNORE_EOS_RESERVE_TOKENS})
info = {rid: {"type": "request", "id": int(rid), "prompt_len": len(r.origin_input_ids), "output_len": r.sampling_params.max_new_tokens,
        "arrival_step": ARRIVAL[int(rid)], "first_scheduled_step": None, "first_token_step": None, "finish_step": None,
        "hit_tokens_first_admission": None, "hit_tokens_each_admission": [], "retractions": 0,
        "ignore_eos_refusals": 0, "aborted_step": None} for rid, r in ALL.items()}
REF_TOT = {}
started = set()
CARRY = {"retracted": [], "aborted": [], "refused": [], "refused_other": []}
step = 0; calls = 0; CLOCK = 0
while step < 10_000_000:
    CLOCK = step
    queue_arrivals(step)
    fb, eb = pools(); ratio_before = s.new_token_ratio_tracker.current
    RETRACTED.clear(); ADMIT.clear(); ABORTED.clear(); REFUSED.clear(); REFUSED_OTHER.clear()
    plan = s.get_next_batch_to_run(s.running_batch, s.last_batch); calls += 1
    s.running_batch = plan.running_batch; b = plan.batch_to_run
    retracted = sorted(RETRACTED, key=int)
    for rid in retracted: info[rid]["retractions"] += 1; started.discard(rid)
    aborted = sorted(set(ABORTED), key=int)
    for rid in aborted: info[rid]["aborted_step"] = step
    refused = [{"id": int(rid), "reason": why} for rid, why in REFUSED]
    refused_other = [{"id": int(rid), "result": why} for rid, why in REFUSED_OTHER]
    for rid, why in REFUSED:
        info[rid]["ignore_eos_refusals"] += 1; REF_TOT[why] = REF_TOT.get(why, 0) + 1
    for rid, why in REFUSED_OTHER: REF_TOT["default_path:" + why] = REF_TOT.get("default_path:" + why, 0) + 1
    if b is not None and any(CARRY.values()):
        retracted = CARRY["retracted"] + retracted; aborted = CARRY["aborted"] + aborted
        refused = CARRY["refused"] + refused; refused_other = CARRY["refused_other"] + refused_other
        for k2 in CARRY: CARRY[k2] = []
    if b is None:
        s.last_batch = None
        if not ARR.pending() and not s.waiting_queue and s.running_batch.is_empty() and s.chunked_req is None: break
        # nothing to run after a retraction / abort: SGLang schedules again; they are reported with the next step
        if retracted or aborted:
            CARRY["retracted"] += retracted; CARRY["aborted"] += aborted
            CARRY["refused"] += refused; CARRY["refused_other"] += refused_other; continue
        if ARR.pending(): sys.exit(f"the engine would go idle at step {step} with requests still to arrive")
        sys.exit(f"stuck at step {step}")
    is_ext = b.forward_mode.is_extend()
    rows = []
    if is_ext:
        for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens):
            row = {"id": int(r.rid), "tokens": int(el), "computed_before": int(pl)}
            if r.rid not in started:
                dev = ADMIT[r.rid]
                assert dev == int(pl), (r.rid, dev, int(pl))
                row.update(kind="new", hit_tokens=dev)
                started.add(r.rid)
                ir = info[r.rid]
                ir["hit_tokens_each_admission"].append(dev)
                if ir["hit_tokens_first_admission"] is None:
                    ir["hit_tokens_first_admission"] = dev; ir["first_scheduled_step"] = step
            else:
                row["kind"] = "chunk"
            rows.append(row)
    else:
        rows = [{"id": int(r.rid), "tokens": 1, "kind": "running"} for r in b.reqs]
    fa, ea = pools()
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
    fu, eu = pools()
    emit({"type": "step", "step": step, "forward_mode": "extend" if is_ext else "decode", "num_scheduled_tokens": ntok,
          "batch_size": len(rows), "prefill_tokens": ntok if is_ext else 0, "decode_seqs": 0 if is_ext else len(rows),
          "scheduled": rows, "retracted": [int(x) for x in retracted], "aborted": [int(x) for x in aborted],
          "sampled": [int(x) for x in sampled], "finished": [int(x) for x in finished],
          "chunked_req": int(s.chunked_req.rid) if s.chunked_req is not None else None,
          "ignore_eos_refusals": refused, "other_refusals": refused_other,
          "free_tokens_before": fb, "free_tokens_after_schedule": fa, "free_tokens_after_update": fu,
          "evictable_tokens_before": eb, "evictable_tokens_after_schedule": ea, "evictable_tokens_after_update": eu,
          "protected_tokens_after_update": tree.protected_size(),
          "new_token_ratio_before": round(ratio_before, 6), "new_token_ratio_after": round(s.new_token_ratio_tracker.current, 6),
          "running_after_schedule": s.running_batch.batch_size() if not is_ext else None,
          "waiting_after_schedule": len(s.waiting_queue)})
    step += 1
for rid in sorted(info, key=int): emit(info[rid])
unf = [int(r) for r in info if info[r]["finish_step"] is None and info[r]["aborted_step"] is None]
emit({"type": "summary", "steps": step, "schedule_calls": calls, "requests": len(info), "finished": len(info) - len(unf),
      "unfinished": unf, "aborted": [int(r) for r in info if info[r]["aborted_step"] is not None],
      "retractions": sum(v["retractions"] for v in info.values()),
      "admissions": sum(len(v["hit_tokens_each_admission"]) for v in info.values()),
      "admissions_ignore_eos_path": ADMIT_PATH["ignore_eos"], "admissions_default_path": ADMIT_PATH["default"],
      "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
      "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
      "ignore_eos_refusals_can_allocate_prefill": REF_TOT.get("can_allocate_prefill", 0),
      "ignore_eos_refusals_req_states": REF_TOT.get("req_states", 0),
      "ignore_eos_refusals_other": sum(v for k2, v in REF_TOT.items() if k2.startswith("other:")),
      "default_path_refusals": {k2.split(":", 1)[1]: v for k2, v in sorted(REF_TOT.items()) if k2.startswith("default_path:")},
      "kv_rows_checked": ROWS.checked})
out.close()
print(f"{A.out}: {step} steps, {len(info) - len(unf)}/{len(info)} finished, "
      f"retractions {sum(v['retractions'] for v in info.values())}, refusals {dict(sorted(REF_TOT.items()))}, "
      f"{time.time() - T0:.1f}s", file=sys.stderr)
