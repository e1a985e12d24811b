#!/usr/bin/env python3
"""Drive SGLang 0.5.23's own scheduler code for a HYBRID MAMBA / LINEAR-ATTENTION model (full-attention
layers + GDN/Mamba2 layers, as Qwen3-Next or Nemotron-H), radix cache on, no HiCache, on CPU without a
model or GPU, over a cachesim native JSONL trace, and write a golden per-step schedule as JSON Lines
(format: README.md; the SWA goldens' format plus the Mamba fields).

What is real SGLang code (pip package sglang 0.5.23):
  * the request cap: KVCacheConfigurator.resolve_max_num_reqs / _calculate_mamba_ratio (called unbound
    on a stub carrying the attributes they read): max_running_requests = min(requested, pool // 2,
    max_mamba_cache_size // ratio), ratio 3 (no_buffer), 3 + tracking slots (extra_buffer), 1 (radix off);
  * the pools, as kv_cache_configurator builds them for a mambaish model: HybridReqToTokenPool (its
    MambaPool with a real Mamba2CacheParams: 1 linear layer, tiny conv/temporal shapes, float64, on CPU,
    and its MambaSlotAllocator of max_mamba_cache_size slots), HybridLinearKVPool over an MHATokenToKVPool
    for the single full-attention layer, and the plain TokenToKVPoolAllocator / PagedTokenToKVPoolAllocator;
  * the tree cache, as kv_cache_builder.build_kv_cache builds it: CacheInitParams (enable_mamba_extra_buffer
    from the resolved strategy) -> registry.create_tree_cache(TreeCacheBuildContext(is_hybrid_ssm=True)) ->
    create_unified_radix_cache -> UnifiedRadixCache with components FULL + MAMBA; TreeCore "rust"
    (default, the wheel's extension) or "python" (--tree-core);
  * Scheduler.get_next_batch_to_run (waiting-queue match with mamba copy-on-write, alloc_group_begin/end,
    PrefillAdder, chunked prefill), update_running_batch / retract_decode, ScheduleBatch.prepare_for_extend /
    prepare_for_decode (alloc_req_slots -> ensure_mamba_capacity -> evict_for_alloc(mamba_num=..),
    extra-buffer tracking), the batch result processor (checkpoint / release_kv_cache -> the Mamba
    component's prepare_for_caching_req / cleanup_after_caching_req), in event_loop_normal's order.

What is replaced (and nothing else):
  1. Scheduler.__init__ is not run: the object is assembled by ../sglang_common.py (shared by the
     SGLang drivers), with is_hybrid_ssm=True and the attributes Scheduler.__init__ takes from
     build_kv_cache's result.
  2. Server-argument resolution is not run: the strategy is given (--strategy), validated here as
     arg_groups/mamba_hook.validate_mamba_no_buffer / validate_mamba_extra_buffer would (page 1 for
     no_buffer, track interval a multiple of the page), and mamba_cache_chunk_size is pre-seeded on the
     server args (`_mamba_cache_chunk_size`, the hook SGLang's own fixtures use) as max(--mamba-chunk-size,
     page), the value overrides.mamba_cache_chunk_size computes from the HF config (FLA chunk 64 for
     Qwen3-Next, the config's mamba_chunk_size for Nemotron-H).
  3. The forward: it applies the batch's deferred mamba clear / copy-on-write exactly as
     ModelRunner._apply_mamba_init_ops does (MambaPool.clear_slots, copy_mamba_state), then, instead of a
     model, writes into each request's mamba slot the state (n, H(ids[:n])) = number of tokens absorbed
     and a rolling hash of them, and (extra_buffer) the same for the tracked prefix into the ping-pong
     slot the batch names; it samples one token per row (never EOS; token j of request r is
     10_000_000 + r * 100_000 + j) and writes each token's id into its full-attention KV row. Before every
     forward it checks that each scheduled request's full-layer KV rows of its prefix hold its tokens and
     that its mamba slot holds (prefix_len, H(prefix)) -- i.e. that every prefix hit restored the right
     recurrent state (--no-check skips it).
  4. extra_buffer only: torch.Tensor.pin_memory is made the identity when torch has no CUDA (SGLang's
     prepare_for_decode pins the track mask unconditionally; pinning only changes transfer speed).

Arrival rule (as the other SGLang goldens): a record with timestamp_ms t is queued before step
ceil(t / 1000); the driver stops with an error if the engine would go idle with requests still to arrive.
"""
import os, sys, argparse, time
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for sglang_common
import sglang_common as C
C.quiet_imports()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description="Drive SGLang's own Scheduler + hybrid-Mamba radix cache over a cachesim JSONL trace")
    C.scheduler_args(ap, max_running_requests=16, pool_help="full-attention KV pool size (tokens)")
    ap.add_argument("--strategy", default="no_buffer", choices=["no_buffer", "extra_buffer"],
                    help="--mamba-radix-cache-strategy (auto resolves to no_buffer with overlap off and page 1)")
    ap.add_argument("--max-mamba-cache-size", type=int, default=64, help="mamba state slots (SGLang's --max-mamba-cache-size)")
    ap.add_argument("--mamba-chunk-size", type=int, default=64, help="model state chunk (FLA 64 for GDN; Nemotron-H config mamba_chunk_size)")
    ap.add_argument("--mamba-track-interval", type=int, default=256)
    ap.add_argument("--disable-radix-cache", action="store_true")
    ap.add_argument("--tree-core", default="rust", choices=["rust", "python"])
    ap.add_argument("--no-check", action="store_true")
    return ap.parse_args(argv)


class Sim:
    """Everything built; step() runs one scheduling iteration (one forward) and returns its record."""

    def __init__(self, A, trace=None, arrival=None):
        self.A = A
        os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] = A.tree_core
        import torch
        self.torch = torch
        from types import SimpleNamespace
        from sglang.srt.runtime_context import get_context
        PAGE = A.page_size
        if A.strategy == "no_buffer" and not A.disable_radix_cache:
            assert PAGE == 1, "no_buffer only supports page_size=1 (mamba_hook.validate_mamba_no_buffer)"
        if A.strategy == "extra_buffer":
            assert A.mamba_track_interval % PAGE == 0, "mamba_track_interval % page_size (validate_mamba_extra_buffer)"
            if not torch.cuda.is_available():
                torch.Tensor.pin_memory = lambda self, *a, **k: self   # environment shim, see docstring item 4
        sa_kw = dict(device="cpu", attention_backend="torch_native", page_size=PAGE,
                     chunked_prefill_size=A.chunked_prefill_size, max_prefill_tokens=A.max_prefill_tokens,
                     max_running_requests=A.max_running_requests, schedule_policy=A.schedule_policy,
                     schedule_conservativeness=A.schedule_conservativeness, disable_overlap_schedule=True,
                     max_total_tokens=A.max_total_tokens, disable_radix_cache=A.disable_radix_cache,
                     mamba_radix_cache_strategy=A.strategy, max_mamba_cache_size=A.max_mamba_cache_size,
                     mamba_track_interval=A.mamba_track_interval)
        ov = get_context().override_server_args(**sa_kw)
        sa = ov.install()
        sa._mamba_cache_chunk_size = max(A.mamba_chunk_size, PAGE)   # overrides.mamba_cache_chunk_size's pre-seed hook
        from sglang.srt.runtime_context import get_schedule, get_memory, get_exec, mamba_cache_chunk_size, mamba_checkpoint_grid, mamba_track_grid
        from sglang.srt.managers.scheduler import Scheduler  # noqa: F401 (import order as the SWA driver)
        from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateShape, Mamba2StateDType
        from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool, HybridLinearKVPool
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator, PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
        from sglang.srt.mem_cache.unified_cache.components.mamba import MambaComponent
        self.UnifiedRadixCache = UnifiedRadixCache
        self.extra_buffer = bool(get_exec().mamba.enable_mamba_extra_buffer)
        assert self.extra_buffer == (A.strategy == "extra_buffer" and not A.disable_radix_cache)

        M = A.max_mamba_cache_size
        POOL = A.max_total_tokens // PAGE * PAGE    # DefaultPoolConfigurator.calculate_pool_sizes_from_max_tokens
        CTX = A.context_len
        # ---- request cap, as KVCacheConfigurator.resolve_max_num_reqs (real code on a stub)
        stub = SimpleNamespace(model_config=SimpleNamespace(context_len=CTX), attn_dp_size=1, mambaish_config=object())
        stub._calculate_mamba_ratio = lambda: KVCacheConfigurator._calculate_mamba_ratio(stub)
        self.mamba_ratio = stub._calculate_mamba_ratio()
        R = KVCacheConfigurator.resolve_max_num_reqs(stub, POOL)
        self.R, self.M, self.POOL, self.PAGE, self.CTX = R, M, POOL, PAGE, CTX

        # ---- pools, as kv_cache_configurator._build_hybrid_req_pool / HybridLinearKVPool / allocator
        shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=2, n_groups=1, num_heads=1, head_dim=2,
                                        state_size=1, conv_kernel=2)
        cache_params = Mamba2CacheParams(shape=shape, layers=[0], dtype=Mamba2StateDType(conv=torch.float64, temporal=torch.float64))
        LINEAR_LAYERS, FULL_LAYERS = [0], [1]
        rtp = HybridReqToTokenPool(size=R, mamba_size=M, mamba_spec_state_size=R, max_context_len=CTX, device="cpu",
                                   enable_memory_saver=False, cache_params=cache_params, mamba_layer_ids=LINEAR_LAYERS,
                                   enable_mamba_extra_buffer=self.extra_buffer,
                                   enable_mamba_extra_buffer_lazy=bool(get_exec().mamba.enable_mamba_extra_buffer_lazy),
                                   speculative_num_draft_tokens=None, speculative_eagle_topk=None,
                                   enable_overlap_schedule=False, start_layer=0)
        kv = HybridLinearKVPool(size=POOL, dtype=torch.float64, page_size=PAGE, head_num=1, head_dim=1,
                                full_attention_layer_ids=FULL_LAYERS, device="cpu", mamba_pool=rtp.mamba_pool,
                                enable_memory_saver=False)
        if PAGE == 1:
            alloc = TokenToKVPoolAllocator(POOL, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
        else:
            alloc = PagedTokenToKVPoolAllocator(POOL, page_size=PAGE, dtype=torch.float64, device="cpu", kvcache=kv, need_sort=False)
        self.rtp, self.kv, self.alloc = rtp, kv, alloc
        tp_worker = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=None, prefill_aware_swa=False, forward_stream=None),
                                    register_hicache_layer_transfer_counter=lambda counter: None)
        params = CacheInitParams(disable=A.disable_radix_cache, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=PAGE,
                                 eviction_policy=get_memory().radix_eviction_policy,
                                 eviction_policy_config=get_memory().radix_eviction_policy_config,
                                 chunked_prefill_size=get_schedule().chunked_prefill_size,
                                 enable_mamba_extra_buffer=self.extra_buffer,
                                 enable_mamba_extra_buffer_lazy=bool(get_exec().mamba.enable_mamba_extra_buffer_lazy),
                                 sliding_window_size=None)
        mc = SimpleNamespace(vocab_size=1 << 30, is_multimodal=False, is_encoder_decoder=False, context_len=CTX,
                             hf_config=SimpleNamespace(architectures=["Qwen3NextForCausalLM"]),
                             hf_text_config=SimpleNamespace(mamba_chunk_size=A.mamba_chunk_size),
                             num_key_value_heads=1, attention_arch=None, head_dim=1, v_head_dim=1,
                             get_num_kv_heads=lambda *a: 1, self_opened_think_start_ids=None, think_end_id=None)
        self.mc = mc
        tree = create_tree_cache(TreeCacheBuildContext(server_args=sa, params=params, is_hybrid_swa=False, is_hybrid_ssm=True,
            enable_hierarchical_cache=False, disable_radix_cache=A.disable_radix_cache, tp_worker=tp_worker, model_config=mc,
            tp_size=1, tp_rank=0, tp_group=None))
        assert isinstance(tree, UnifiedRadixCache) and tree.supports_mamba() and tree.cache_controller is None
        self.tree = tree
        self.mamba_chunk = mamba_cache_chunk_size(); self.ckpt_grid = mamba_checkpoint_grid(PAGE); self.track_grid = mamba_track_grid(PAGE)

        max_req_len = min(CTX - 1, POOL - 1)   # tp_worker.get_worker_info: min(context_len, capacity) - 1
        self.max_req_len = max_req_len
        s = C.assemble_scheduler(sa, mc, tp_worker, rtp, alloc, tree, page_size=PAGE, max_total_num_tokens=POOL, max_running_requests=R,
                                 max_req_len=max_req_len, max_req_input_len=max_req_len - 5, disable_radix_cache=A.disable_radix_cache,
                                 is_hybrid_ssm=True, kv_shard_widening=1)
        self.s = s
        self.sa = sa
        self.get_schedule, self.get_memory, self.get_exec = get_schedule, get_memory, get_exec

        # ---- recorders (wrappers that change nothing)
        self.RETRACTED = []; C.record_retractions(self.RETRACTED)
        self.MATCH = {}
        _orig_match = UnifiedRadixCache.match_prefix
        sim = self
        def _rec_match(tc, params, *a, **k):
            res = _orig_match(tc, params, *a, **k)
            if params.req is not None:
                sim.MATCH[params.req.rid] = (int(res.full_kv_hit_length), res.mamba_branching_seqlen)
            return res
        UnifiedRadixCache.match_prefix = _rec_match
        from sglang.srt.managers.schedule_policy import PrefillAdder
        self.ADMIT = {}
        _orig_add = PrefillAdder.add_one_req
        def _rec_add(adder, req, *a, **k):
            dev = req.prefix_len; fm, br = sim.MATCH.get(req.rid, (0, None))
            res = _orig_add(adder, req, *a, **k)
            if adder.can_run_list and adder.can_run_list[-1] is req:
                sim.ADMIT[req.rid] = (dev, fm, br)
            return res
        PrefillAdder.add_one_req = _rec_add
        self.CNT = {"full_evicted": 0, "mamba_evicted": 0, "evict_calls": 0, "mamba_inserted": 0, "mamba_insert_dup": 0}
        _orig_evict = UnifiedRadixCache._evict
        def _rec_evict(tc, *a, **k):
            r = _orig_evict(tc, *a, **k)
            sim.CNT["full_evicted"] += r.num_tokens_evicted; sim.CNT["mamba_evicted"] += r.mamba_num_evicted
            if r.num_tokens_evicted or r.mamba_num_evicted: sim.CNT["evict_calls"] += 1
            return r
        UnifiedRadixCache._evict = _rec_evict
        _orig_cleanup = MambaComponent.cleanup_after_caching_req
        def _rec_cleanup(comp, req, is_finished, insert_result=None, insert_params=None):
            if insert_result is not None and insert_params is not None and insert_params.mamba_value is not None:
                sim.CNT["mamba_insert_dup" if insert_result.mamba_exist else "mamba_inserted"] += 1
            return _orig_cleanup(comp, req, is_finished, insert_result=insert_result, insert_params=insert_params)
        MambaComponent.cleanup_after_caching_req = _rec_cleanup

        self.OUT_BASE, self.OUT_STRIDE = C.OUT_BASE, C.OUT_STRIDE
        self.KF = kv.full_kv_pool.k_buffer[0]; self.VF = kv.full_kv_pool.v_buffer[0]
        self.TEMP = rtp.mamba_pool.mamba_cache.temporal   # [layers, M+1, 1, 2, 1]
        self.CHECKED = {"kv_rows": 0, "mamba_states": 0, "mamba_track_writes": 0}
        self.HASH = {}   # rid -> list of prefix hashes
        self.step_no = 0; self.calls = 0
        self.ABORTED = []
        self.trace = trace; self.arrival = arrival
        if trace is not None:
            self.ALL = C.make_requests(s, trace, mc, ignore_eos=not A.no_ignore_eos)
            C.check_not_clipped(trace, self.ALL)
            self.ARR = C.Arrivals(s, trace, arrival, self.ALL)
        C.finish_scheduler(s, aborted=self.ABORTED)

    # ------------------------------------------------------------ fake forward helpers
    MOD = (1 << 40) - 87
    def prefix_hash(self, req, n):
        ids = list(req.origin_input_ids) + list(req.output_ids)
        h = self.HASH.setdefault(req.rid, [0])
        while len(h) <= n:
            h.append((h[-1] * 1000003 + ids[len(h) - 1]) % self.MOD)
        return h[n]

    def state(self, slot):
        t = self.TEMP[0, int(slot)]
        return int(t[0, 0, 0].item()), int(t[0, 1, 0].item())

    def set_state(self, slot, n, h):
        self.TEMP[0, int(slot), 0, 0, 0] = float(n); self.TEMP[0, int(slot), 0, 1, 0] = float(h)

    def apply_mamba_init_ops(self, b):
        # as ModelRunner._apply_mamba_init_ops (extend forwards only): clear, then copy-on-write
        pool = self.rtp
        if b.mamba_clear_indices is not None and len(b.mamba_clear_indices) > 0:
            pool.mamba_pool.clear_slots(pool.translate_mamba_indices(b.mamba_clear_indices))
        if b.mamba_cow_src_indices is not None and len(b.mamba_cow_src_indices) > 0:
            pool.copy_mamba_state(pool.translate_mamba_indices(b.mamba_cow_src_indices),
                                  pool.translate_mamba_indices(b.mamba_cow_dst_indices))
        b.mamba_clear_indices = None; b.mamba_cow_src_indices = None; b.mamba_cow_dst_indices = None

    def fake_forward(self, b, is_ext):
        torch = self.torch
        check = not self.A.no_check
        if is_ext:
            self.apply_mamba_init_ops(b)
            spans = [(r, int(pl), int(pl) + int(el)) for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens)]
        else:
            spans = []
            for r in b.reqs:
                n = len(r.origin_input_ids) + len(r.output_ids)
                spans.append((r, n - 1, n))
        for i, (r, lo, hi) in enumerate(spans):
            ids_all = list(r.origin_input_ids) + list(r.output_ids)
            ids = torch.tensor(ids_all[:hi], dtype=torch.float64)
            row = self.rtp.req_to_token[r.kv.req_pool_idx, :hi].to(torch.int64)
            slot = int(r.kv.mamba_pool_idx)
            if check:
                if lo > 0:
                    if not (torch.equal(self.KF[row[:lo], 0, 0], ids[:lo]) and torch.equal(self.VF[row[:lo], 0, 0], -ids[:lo])):
                        sys.exit(f"step {self.step_no}: request {r.rid}: full-layer KV rows of its prefix do not hold its tokens")
                    self.CHECKED["kv_rows"] += lo
                got = self.state(slot); want = (lo, self.prefix_hash(r, lo))
                if got != want:
                    sys.exit(f"step {self.step_no}: request {r.rid}: mamba slot {slot} holds state {got}, expected {want} "
                             f"(prefix {lo} tokens)")
                self.CHECKED["mamba_states"] += 1
            self.KF[row[lo:hi], 0, 0] = ids[lo:hi]; self.VF[row[lo:hi], 0, 0] = -ids[lo:hi]
            self.set_state(slot, hi, self.prefix_hash(r, hi))
            if self.extra_buffer:
                # the kernels write the tracked prefix state into the ping-pong slot the batch names
                if is_ext:
                    if b.mamba_prefill_track_mask_cpu is not None and b.mamba_prefill_track_mask_cpu[i]:
                        tl = int(r.kv.mamba_last_track_seqlen)
                        self.set_state(int(b.mamba_track_indices[i]), tl, self.prefix_hash(r, tl))
                        self.CHECKED["mamba_track_writes"] += 1
                else:
                    if b.mamba_track_mask_cpu is not None and b.mamba_track_mask_cpu[i]:
                        self.set_state(int(b.mamba_track_indices[i]), hi, self.prefix_hash(r, hi))
                        self.CHECKED["mamba_track_writes"] += 1

    # ------------------------------------------------------------ counters
    def pools(self):
        t = self.tree
        return dict(full_free=self.alloc.available_size(), full_evictable=t.full_evictable_size(), full_protected=t.full_protected_size(),
                    mamba_free=self.rtp.mamba_allocator.available_size(), mamba_evictable=t.mamba_evictable_size(),
                    mamba_protected=t.mamba_protected_size())

    def reset_counters(self):
        for k in self.CNT: self.CNT[k] = 0

    def step(self):
        """One scheduler iteration. Returns (batch, rows, info) or (None, ...) when nothing ran."""
        from sglang.srt.managers.utils import GenerationBatchResult
        s = self.s
        self.RETRACTED.clear(); self.ADMIT.clear(); self.ABORTED.clear()
        before = self.pools(); ratio_before = s.new_token_ratio_tracker.current
        plan = s.get_next_batch_to_run(s.running_batch, s.last_batch); self.calls += 1
        s.running_batch = plan.running_batch; b = plan.batch_to_run
        retracted = sorted(self.RETRACTED, key=int); aborted = sorted(set(self.ABORTED), key=int)
        if b is None:
            s.last_batch = None
            return None, None, dict(retracted=retracted, aborted=aborted, before=before)
        is_ext = b.forward_mode.is_extend()
        rows = []
        if is_ext:
            for r, el, pl in zip(b.reqs, b.extend_lens, b.prefix_lens):
                row = {"id": int(r.rid), "tokens": int(el), "computed_before": int(pl)}
                if r.rid in self.ADMIT:
                    dev, fm, br = self.ADMIT[r.rid]
                    assert dev == int(pl), (r.rid, dev, int(pl))
                    row.update(kind="new", hit_tokens=dev, full_match_tokens=fm, mamba_branching_seqlen=br)
                else:
                    row["kind"] = "chunk"
                rows.append(row)
        else:
            rows = [{"id": int(r.rid), "tokens": 1, "kind": "running"} for r in b.reqs]
        after_schedule = self.pools()
        s.forward_ct += 1; b.forward_iter = s.forward_ct
        if b.extend_num_tokens: s.processed_tokens_counter += b.extend_num_tokens
        self.fake_forward(b, is_ext)
        toks = [self.OUT_BASE + int(r.rid) * self.OUT_STRIDE + len(r.output_ids) for r in b.reqs]
        outlen_before = {r.rid: len(r.output_ids) for r in b.reqs}
        res = GenerationBatchResult(next_token_ids=self.torch.tensor(toks, dtype=self.torch.int64))
        if b.forward_mode.is_decode(): s.batch_result_processor.process_batch_result_decode(b, res)
        else: s.batch_result_processor.process_batch_result_prefill(b, res)
        s.last_batch = b
        sampled = [r.rid for r in b.reqs if len(r.output_ids) > outlen_before[r.rid]]
        finished = [r.rid for r in b.reqs if r.finished()]
        after_update = self.pools()
        return b, rows, dict(retracted=retracted, aborted=aborted, before=before, after_schedule=after_schedule,
                             after_update=after_update, sampled=sampled, finished=finished, is_ext=is_ext,
                             ratio_before=ratio_before, ratio_after=s.new_token_ratio_tracker.current)


def main(argv=None):
    A = parse_args(argv); T0 = time.time()
    trace, ARRIVAL = C.load_trace(A.trace)
    sim = Sim(A, trace, ARRIVAL)
    import sglang, torch
    s = sim.s; tree = sim.tree
    out, emit = C.open_jsonl(A.out)
    P0 = sim.pools()
    emit({"type": "config", "sglang_version": sglang.__version__, "torch_version": torch.__version__.split("+")[0],
          "trace": os.path.basename(A.trace), "num_requests": len(trace),
          "max_total_tokens": sim.POOL, "full_pool_tokens": sim.POOL, "free_tokens_at_start": P0["full_free"],
          "mamba_cache_size": sim.M, "mamba_free_slots_at_start": P0["mamba_free"],
          "mamba_radix_cache_strategy": A.strategy, "enable_mamba_extra_buffer": sim.extra_buffer,
          "mamba_slots_per_request_ratio": sim.mamba_ratio, "max_running_requests_requested": A.max_running_requests,
          "max_running_requests": sim.R, "mamba_cache_chunk_size": sim.mamba_chunk, "mamba_checkpoint_grid": sim.ckpt_grid,
          "mamba_track_interval": A.mamba_track_interval, "mamba_track_grid": sim.track_grid,
          "chunked_prefill_size": s.chunked_prefill_size, "max_prefill_tokens": s.max_prefill_tokens,
          "schedule_policy": str(s.policy.policy), "schedule_conservativeness": A.schedule_conservativeness,
          "page_size": sim.PAGE, "ignore_eos": not A.no_ignore_eos, "overlap_schedule": False, "mixed_chunk": bool(s.is_mixed_chunk),
          "init_new_token_ratio": s.new_token_ratio_tracker.current, "context_len": sim.CTX, "max_req_len": sim.max_req_len,
          "is_hybrid_ssm": True, "disable_radix_cache": A.disable_radix_cache, "tree_cache": type(tree).__name__,
          "tree_components": [str(c.name) for c in tree.tree_components], "tree_core": type(tree.tree_core).__name__,
          "allocator": type(sim.alloc).__name__, "kv_pool": type(sim.kv).__name__, "req_to_token_pool": type(sim.rtp).__name__,
          "radix_eviction_policy": sim.get_memory().radix_eviction_policy})
    info = {rid: {"type": "request", "id": int(rid), "prompt_len": len(r.origin_input_ids), "output_len": r.sampling_params.max_new_tokens,
                  "arrival_step": ARRIVAL[int(rid)], "first_scheduled_step": None, "first_token_step": None, "finish_step": None,
                  "hit_tokens_first_admission": None, "hit_tokens_each_admission": [], "full_match_tokens_each_admission": [],
                  "retractions": 0, "aborted_step": None} for rid, r in sim.ALL.items()}
    TOT = {"full_evicted_tokens": 0, "mamba_evicted_states": 0, "evict_calls": 0, "mamba_states_inserted": 0, "mamba_inserts_deduplicated": 0}
    CARRY = {"retracted": [], "aborted": []}
    step = 0
    sim.reset_counters()
    while step < 10_000_000:
        sim.step_no = step
        sim.ARR.queue(step)
        b, rows, inf = sim.step()
        retracted, aborted = inf["retracted"], inf["aborted"]
        for rid in retracted: info[rid]["retractions"] += 1
        for rid in aborted: info[rid]["aborted_step"] = step
        if b is not None and (CARRY["retracted"] or CARRY["aborted"]):
            retracted = CARRY["retracted"] + retracted; aborted = CARRY["aborted"] + aborted
            CARRY["retracted"], CARRY["aborted"] = [], []
        if b is None:
            if not sim.ARR.pending() and not s.waiting_queue and s.running_batch.is_empty() and s.chunked_req is None: break
            if retracted or aborted: CARRY["retracted"] += retracted; CARRY["aborted"] += aborted; continue
            if sim.ARR.pending(): sys.exit(f"the engine would go idle at step {step} with requests still to arrive")
            sys.exit(f"stuck at step {step}")
        for row in rows:
            if row["kind"] == "new":
                ir = info[str(row["id"])]
                ir["hit_tokens_each_admission"].append(row["hit_tokens"]); ir["full_match_tokens_each_admission"].append(row["full_match_tokens"])
                if ir["hit_tokens_first_admission"] is None:
                    ir["hit_tokens_first_admission"] = row["hit_tokens"]; ir["first_scheduled_step"] = step
        for rid in inf["sampled"]:
            if info[rid]["first_token_step"] is None: info[rid]["first_token_step"] = step
        for rid in inf["finished"]: info[rid]["finish_step"] = step
        ntok = sum(x["tokens"] for x in rows)
        st = {"full_evicted_tokens": sim.CNT["full_evicted"], "mamba_evicted_states": sim.CNT["mamba_evicted"],
              "evict_calls": sim.CNT["evict_calls"], "mamba_states_inserted": sim.CNT["mamba_inserted"],
              "mamba_inserts_deduplicated": sim.CNT["mamba_insert_dup"]}
        for k2, v2 in st.items(): TOT[k2] += v2
        B, S_, U = inf["before"], inf["after_schedule"], inf["after_update"]
        is_ext = inf["is_ext"]
        held = [r for r in s.running_batch.reqs if r.kv.holds_mamba]
        emit({"type": "step", "step": step, "forward_mode": "extend" if is_ext else "decode", "num_scheduled_tokens": ntok,
              "batch_size": len(rows), "prefill_tokens": ntok if is_ext else 0, "decode_seqs": 0 if is_ext else len(rows),
              "scheduled": rows, "retracted": [int(x) for x in retracted], "aborted": [int(x) for x in aborted],
              "sampled": [int(x) for x in inf["sampled"]], "finished": [int(x) for x in inf["finished"]],
              "chunked_req": int(s.chunked_req.rid) if s.chunked_req is not None else None,
              "free_tokens_before": B["full_free"], "free_tokens_after_schedule": S_["full_free"], "free_tokens_after_update": U["full_free"],
              "evictable_tokens_before": B["full_evictable"], "evictable_tokens_after_schedule": S_["full_evictable"],
              "evictable_tokens_after_update": U["full_evictable"], "protected_tokens_after_update": U["full_protected"],
              "mamba_free_slots_before": B["mamba_free"], "mamba_free_slots_after_schedule": S_["mamba_free"],
              "mamba_free_slots_after_update": U["mamba_free"],
              "mamba_evictable_states_before": B["mamba_evictable"], "mamba_evictable_states_after_schedule": S_["mamba_evictable"],
              "mamba_evictable_states_after_update": U["mamba_evictable"], "mamba_protected_states_after_update": U["mamba_protected"],
              "mamba_request_slots_after_update": sim.M - U["mamba_free"] - U["mamba_evictable"] - U["mamba_protected"],
              **st,
              "new_token_ratio_before": round(inf["ratio_before"], 6), "new_token_ratio_after": round(inf["ratio_after"], 6),
              "running_after_schedule": s.running_batch.batch_size() if not is_ext else None,
              "waiting_after_schedule": len(s.waiting_queue)})
        sim.reset_counters()
        step += 1
    for rid in sorted(info, key=int): emit(info[rid])
    unf = [int(r) for r in info if info[r]["finish_step"] is None and info[r]["aborted_step"] is None]
    emit({"type": "summary", "steps": step, "schedule_calls": sim.calls, "requests": len(info), "finished": len(info) - len(unf),
          "unfinished": unf, "aborted": [int(r) for r in info if info[r]["aborted_step"] is not None],
          "retractions": sum(v["retractions"] for v in info.values()),
          "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
          "hit_tokens_all_admissions": sum(sum(v["hit_tokens_each_admission"]) for v in info.values()),
          "full_match_tokens_all_admissions": sum(sum(v["full_match_tokens_each_admission"]) for v in info.values()),
          "admissions_with_hit": sum(sum(1 for h in v["hit_tokens_each_admission"] if h > 0) for v in info.values()),
          "admissions_hit_below_full_match": sum(sum(1 for h, f in zip(v["hit_tokens_each_admission"], v["full_match_tokens_each_admission"]) if h < f)
                                                 for v in info.values()),
          **TOT, "kv_rows_checked": sim.CHECKED["kv_rows"], "mamba_states_checked": sim.CHECKED["mamba_states"],
          "mamba_track_writes": sim.CHECKED["mamba_track_writes"]})
    out.close()
    print(f"{A.out}: {step} steps, {len(info) - len(unf)}/{len(info)} finished, hits {sum(sum(v['hit_tokens_each_admission']) for v in info.values())}, "
          f"retractions {sum(v['retractions'] for v in info.values())}, full evicted {TOT['full_evicted_tokens']}, "
          f"mamba evicted {TOT['mamba_evicted_states']}, R={sim.R}, {time.time() - T0:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
