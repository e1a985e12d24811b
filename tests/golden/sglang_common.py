"""Code shared by the SGLang golden drivers (sglang-priority, sglang_hicache, sglang_hicache_storage,
sglang_swa, sglang_noradix, sglang_mamba). Each driver adds this folder to sys.path and imports it; what each
driver builds itself (its pools, its tree cache, its recorders, its step records) stays in the driver.

What is here:
  * quiet_imports: HF_HUB_OFFLINE, warnings off, and (optionally) logging below ERROR off;
  * assemble_scheduler: a Scheduler made with Scheduler.__new__ (its __init__ needs a model worker,
    NCCL/gloo groups and ZMQ sockets) and given the attributes Scheduler.__init__ would set, the real
    init_running_status / init_schedule_policy, init_chunked_prefill minus its multimodal check, and
    inert stubs for features that are off (grammar, load reporting, beams, DP attention, ngram
    embedding, metrics);
  * finish_scheduler: the output sinks (streaming, abort reporting) and the real
    init_batch_result_processor;
  * load_trace / make_requests / check_not_clipped / Arrivals: trace reading and the arrival rule
    (a record with timestamp_ms t is queued, through the real Scheduler._add_request_to_queue,
    before step ceil(t / 1000));
  * record_retractions: a wrapper of ScheduleBatch.retract_decode that changes nothing;
  * open_jsonl: the compact JSON Lines writer;
  * scheduler_args: the argparse flags every driver takes (trace, output, the scheduler's limits
    and policy, page size, ignore_eos), so that each driver adds only its own;
  * seq_ids / batch_spans / first_bad / TokenRows: the fake forward, whose KV rows hold token ids
    (a position's K row its token id, its V row minus it), checked on every prefix a batch reads.
"""
import os, sys, json, math
from types import SimpleNamespace
from array import array


def quiet_imports(disable_logging=True):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import warnings; warnings.filterwarnings("ignore")
    if disable_logging:
        import logging; logging.disable(logging.WARNING)


class NoMetrics:
    # metrics/logging sink: counters accepted, every report_* call a no-op
    def __init__(self): self.enable_metrics = False; self.num_retracted_reqs = 0; self.num_generated_tokens = 0; self.forward_ct_decode = 0
    def __getattr__(self, name): return lambda *a, **k: None


def assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, *, page_size, max_total_num_tokens,
                       max_running_requests, max_req_len, max_req_input_len, **attrs_own):
    """A Scheduler without Scheduler.__init__. attrs_own overrides or adds attributes (the cache kind's
    flags, e.g. enable_hierarchical_cache, is_hybrid_swa); the defaults are those of a dense model with
    the radix cache on and every optional feature off."""
    from sglang.srt.runtime_context import get_context, get_schedule, get_parallel
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.disaggregation.utils import DisaggregationMode
    R = max_running_requests
    s = Scheduler.__new__(Scheduler)
    attrs = dict(server_args=sa, schedule_policy=get_schedule().schedule_policy, enable_priority_scheduling=False,
      abort_on_priority_when_disabled=False, schedule_low_priority_values_first=False,
      priority_scheduling_preemption_threshold=get_schedule().priority_scheduling_preemption_threshold,
      enable_lora=False, enable_overlap=False, enable_overlap_mlx=False, enable_pdmux=False,
      spec_algorithm=SpeculativeAlgorithm.NONE, page_size=page_size, enable_hierarchical_cache=False, enable_lmcache=False,
      enable_session_radix_cache=False, enable_hicache_storage=False, enable_unified_cache_external_linker=False,
      enable_decode_hicache=False, enable_hisparse=False, attn_dp_enabled=False, enable_unified_memory=False,
      max_new_tokens_limit=None, dllm_config=None, model_config=mc, is_generation=True,
      tp_worker=tp_worker, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, tree_cache=tree,
      disable_radix_cache=False, max_total_num_tokens=max_total_num_tokens, max_prefill_tokens=get_schedule().max_prefill_tokens,
      max_running_requests=R, max_req_len=max_req_len, max_req_input_len=max_req_input_len, device="cpu",
      is_hybrid_swa=False, is_hybrid_ssm=False, sliding_window_size=None, disaggregation_mode=DisaggregationMode.NULL,
      hisparse_coordinator=None, min_free_slots_delayer=None, decode_offload_manager=None, processed_tokens_counter=0,
      truncation_align_size=None, max_queued_requests=None, scheduler_stage_metrics=None, require_mlp_sync=False,
      draft_worker=None,
    )
    attrs.update(attrs_own)
    for k, v in attrs.items(): setattr(s, k, v)
    s.model_worker = s.tp_worker
    if not get_parallel().pp_max_micro_batch_size:  # as Scheduler.init_model_worker does
        get_context().override("scheduler.pp_max_micro_batch_size_default", pp_max_micro_batch_size=max(R // get_parallel().pp_size, 1))
    s.metrics_reporter = NoMetrics()
    s.init_running_status()
    # init_chunked_prefill, minus its multimodal/transformers-backend check (needs a real ModelConfig)
    s.chunked_prefill_size = get_schedule().chunked_prefill_size
    s.prefill_decode_interval = get_schedule().prefill_decode_interval or 0
    s._prefill_decode_interval_remaining = 0
    s.prefill_decode_interval_min_bs = get_schedule().prefill_decode_interval_min_bs
    s.chunked_req = None; s._pending_chunked_abort_req = None
    s.is_mixed_chunk = s.chunked_prefill_size is not None and get_schedule().enable_mixed_chunk
    s.dynamic_chunk_sizer = None; s.init_schedule_policy()
    s.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
    s.load_inquirer = SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0)
    s.beam_coordinator = SimpleNamespace(pending_member_rows=lambda b: 0, retire_group=lambda r: None)
    s.dp_attn_adapter = SimpleNamespace(maybe_prepare_mlp_sync_batch=lambda b, need_sync=False: b, maybe_convert_decode_to_extend=lambda b: b)
    s.ngram_embedding_manager = SimpleNamespace(prepare_for_forward=lambda b, chunked_req=None: b)
    return s


def finish_scheduler(s, aborted=None):
    """Output sinks, then the real batch result processor. aborted: a list that collects the requests the
    scheduler ends itself (retract_decode's OOM abort; its report to the tokenizer is the sink), or None
    to leave Scheduler.send_abort_output as it is."""
    s.metrics_collector = None; s.future_map = None
    s.metrics_reporter.num_generated_tokens = 0
    s.output_streamer = SimpleNamespace(stream_output=lambda *a, **k: None)
    s.abort_request = lambda *a, **k: None
    if aborted is not None:
        s.send_abort_output = lambda abort_req, req: aborted.append(req.rid)
    s.init_batch_result_processor()


def load_trace(path):
    """The trace's records and each one's arrival step (ceil(timestamp_ms / 1000))."""
    trace = [json.loads(l) for l in open(path) if l.strip()]
    arrival = [math.ceil(r.get("timestamp_ms", 0) / 1000) for r in trace]
    if arrival != sorted(arrival): sys.exit("the trace's lines are not in arrival order")
    return trace, arrival


def make_requests(s, trace, mc, ignore_eos, with_priority=False):
    """One real Req per record (rid = its line number), max_new_tokens as Scheduler.init_req_max_new_tokens sets it."""
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams
    def make_req(i, r):
        sp = SamplingParams(max_new_tokens=int(r["output_len"]), ignore_eos=ignore_eos, temperature=0.0)
        sp.normalize(None); sp.verify(mc.vocab_size)
        kw = dict(priority=r.get("priority")) if with_priority else {}
        req = Req(str(i), "", array("q", r["prompt_ids"]), sp, vocab_size=mc.vocab_size, **kw)
        s.init_req_max_new_tokens(req)
        return req
    return {str(i): make_req(i, r) for i, r in enumerate(trace)}


def check_not_clipped(trace, all_reqs):
    clipped = {rid: int(trace[int(rid)]["output_len"]) for rid, r in all_reqs.items()
               if r.sampling_params.max_new_tokens != int(trace[int(rid)]["output_len"])}
    if clipped: sys.exit(f"SGLang would clip max_new_tokens of requests {sorted(clipped, key=int)} (pool too small for the trace)")


class Arrivals:
    """queue(step) queues every request that arrives before `step`; next: the first request not yet queued."""
    def __init__(self, s, trace, arrival, all_reqs):
        self.s, self.trace, self.arrival, self.all = s, trace, arrival, all_reqs; self.next = 0
    def queue(self, step):
        while self.next < len(self.trace) and self.arrival[self.next] <= step:
            self.s._add_request_to_queue(self.all[str(self.next)]); self.next += 1
    def pending(self): return self.next < len(self.trace)


def record_retractions(retracted):
    """Wrap the real ScheduleBatch.retract_decode: the rids it retracts are appended to `retracted`."""
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    orig = ScheduleBatch.retract_decode
    def rec(self, *a, **k):
        out = orig(self, *a, **k); retracted.extend(r.rid for r in out[0]); return out
    ScheduleBatch.retract_decode = rec


def open_jsonl(path):
    """(file, emit): emit(o) writes o as one compact JSON line."""
    out = open(path, "w")
    def emit(o): out.write(json.dumps(o, separators=(",", ":")) + "\n")
    return out, emit


# ---------------------------------------------------------------- trace generation (the gen_traces.py scripts)
# Everything above imports SGLang only inside functions, so the gen_traces.py scripts run with a plain python3.
OUT_BASE, OUT_STRIDE = 10_000_000, 100_000   # the fake forward samples OUT_BASE + rid * OUT_STRIDE + j as output token j


def arrive_at(step):
    """timestamp_ms of a request arriving before step `step` (queued before step ceil(t / 1000))."""
    return int((step - 0.5) * 1000) if step > 0 else 0


class Ids:
    """Fresh, never repeated token ids (below the fake model's output ids)."""

    def __init__(self, start):
        self.next = start

    def take(self, n):
        out = list(range(self.next, self.next + n))
        self.next += n
        return out


def build_conversations(events):
    """events: dicts with `step` (arrival), `order` (tie-break) and either `prompt` (a list of ids)
    or `conv` with `new` user tokens (the first turn's `new` is its whole prompt); conversation
    prompts (earlier prompt + the earlier turn's output ids + `new`) are built once the earlier
    turn's request id is known."""
    events = sorted(events, key=lambda e: (e["step"], e["order"]))
    history = {}  # conv -> (prompt so far, rid of the last turn, its output_len)
    out = []
    for rid, e in enumerate(events):
        if "conv" in e:
            prev = history.get(e["conv"])
            if prev is None:
                prompt = list(e["new"])
            else:
                p, prid, plen = prev
                prompt = p + [OUT_BASE + prid * OUT_STRIDE + j for j in range(plen)] + list(e["new"])
            history[e["conv"]] = (prompt, rid, e["output_len"])
        else:
            prompt = list(e["prompt"])
        out.append({"prompt_ids": prompt, "output_len": e["output_len"], "timestamp_ms": arrive_at(e["step"])})
    return out


def write_traces(folder, makers, output_ids=True):
    """folder/traces/<maker name>.jsonl for each maker; output_ids: add each record's `output_ids`
    (the ids the fake forward will sample)."""
    os.makedirs(os.path.join(folder, "traces"), exist_ok=True)
    for f in makers:
        with open(os.path.join(folder, "traces", f.__name__ + ".jsonl"), "w") as out:
            for i, rec in enumerate(f()):
                if output_ids:
                    rec["output_ids"] = [OUT_BASE + i * OUT_STRIDE + j for j in range(rec["output_len"])]
                out.write(json.dumps(rec) + "\n")


def scheduler_args(ap, *, max_running_requests=64, pool_help=None):
    """Adds the flags every driver takes to `ap`: --trace and --out, SGLang's scheduler limits and
    policy under their server-argument names with the drivers' small defaults, --page-size and
    --no-ignore-eos (requests stop at max_new_tokens either way: the fake forward samples no EOS)."""
    ap.add_argument("--trace", required=True); ap.add_argument("--out", required=True)
    ap.add_argument("--max-total-tokens", type=int, default=4096, help=pool_help)
    ap.add_argument("--max-running-requests", type=int, default=max_running_requests)
    ap.add_argument("--chunked-prefill-size", type=int, default=512)
    ap.add_argument("--max-prefill-tokens", type=int, default=16384)
    ap.add_argument("--schedule-policy", default="fcfs")
    ap.add_argument("--schedule-conservativeness", type=float, default=1.0)
    ap.add_argument("--context-len", type=int, default=1 << 17)
    ap.add_argument("--page-size", type=int, default=1)
    ap.add_argument("--no-ignore-eos", action="store_true")


def seq_ids(r):
    """A request's tokens so far: its prompt, then its outputs."""
    return list(r.origin_input_ids) + list(r.output_ids)


def batch_spans(b, is_ext):
    """(request, lo, hi) for each request of batch `b`: the positions [lo, hi) its forward computes,
    an extend's new tokens after its prefix or a decode's one token."""
    if is_ext:
        return [(r, int(pl), int(pl) + int(el)) for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens)]
    spans = []
    for r in b.reqs:
        n = len(r.origin_input_ids) + len(r.output_ids)
        spans.append((r, n - 1, n))
    return spans


def first_bad(got, want):
    """The first position where two equal-length tensors differ, or -1."""
    import torch
    return int((got != want).nonzero()[0]) if not torch.equal(got, want) else -1


class TokenRows:
    """The fake forward over one KV pool (`kv`'s first layer, rows indexed through `rtp`): each
    computed position's K row gets its token id and its V row minus it; before that, unless `check`
    is off, the rows of the prefix each request reads must hold its tokens (`checked` counts them),
    else the run stops naming the step, the request and the first bad position."""

    def __init__(self, kv, rtp, check=True):
        self.k, self.v = kv.k_buffer[0], kv.v_buffer[0]
        self.rtp, self.check, self.checked = rtp, check, 0

    def __call__(self, b, is_ext, step):
        import torch
        for r, lo, hi in batch_spans(b, is_ext):
            ids = torch.tensor(seq_ids(r)[:hi], dtype=torch.float64)
            row = self.rtp.req_to_token[r.kv.req_pool_idx, :hi].to(torch.int64)
            if self.check and lo > 0:
                got_k, got_v = self.k[row[:lo], 0, 0], self.v[row[:lo], 0, 0]
                if not (torch.equal(got_k, ids[:lo]) and torch.equal(got_v, -ids[:lo])):
                    sys.exit(f"step {step}: request {r.rid}: KV rows of its prefix do not hold its tokens "
                             f"(first bad position {first_bad(got_k, ids[:lo])})")
                self.checked += lo
            self.k[row[lo:hi], 0, 0] = ids[lo:hi]
            self.v[row[lo:hi], 0, 0] = -ids[lo:hi]
