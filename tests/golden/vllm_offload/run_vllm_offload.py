#!/usr/bin/env python3
"""Drive the REAL vLLM v1 scheduler WITH vLLM's native CPU KV offloading (OffloadingConnector,
CPUOffloadingSpec, CPUOffloadingManager with the LRU policy) over a trace -- pure Python, no
model, no GPU -- and write a golden per-step schedule as JSON Lines.

Extends the vLLM golden driver run_vllm_scheduler.py (same trace format, same scheduler
construction, same token model); what the vLLM drivers share (trace and arrival reading, the token
model, the step loop, the output writers) is in ../vllm_common.py. What is added:

* Offloading is configured the way `vllm serve --kv-offloading-size X` configures it: the driver
  sets CacheConfig.kv_offloading_size (GiB) and lets VllmConfig._post_init_kv_transfer_config
  build the KVTransferConfig (kv_connector="OffloadingConnector", kv_role="kv_both",
  kv_connector_extra_config={"cpu_bytes_to_use": X * 2**30}).
* The KVCacheConfig describes the tiny model's real attention layer (1 layer, 4 KV heads,
  head size 16, float16, block 16 -> 4096 bytes per block) with one KVCacheTensor, so
  CPUOffloadingSpec sizes the CPU tier from bytes per block exactly as on a GPU.
* The worker side is vLLM's own OffloadingConnectorWorker (the WORKER-role OffloadingConnector),
  called in the model runner's order (handle_preemptions -> [forward] -> start_load_kv ->
  wait_for_save -> get_finished -> build_connector_worker_meta), with its transfer engine
  (CPUOffloadingWorker, CUDA streams/events) replaced by LaggedTransferWorker below: a job
  submitted in engine step s is reported finished by the get_finished poll of step s+lag;
  wait() (flushes) completes a job and, per direction, every job submitted before it (the
  CUDA handler chains each transfer's stream on the previous one).
* Every engine iteration is a step, including iterations that schedule no tokens (the engine
  keeps stepping while Scheduler.has_requests(): unfinished requests, finished ids not yet
  sent to the worker, or connector jobs in flight). When has_requests() is False the engine
  idles and the step counter jumps to the next arrival.

See README.md beside this file.
"""

import mmap
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # for vllm_common
import vllm_common as C

# vLLM iterates Python sets of request-id strings in places that matter here (e.g.
# SchedulerOutput.finished_req_ids decides the order of finished requests' store jobs and of
# on_request_finished LRU re-ranking). String hashing is salted per process, so fix the salt.
if __name__ == "__main__":
    C.pin_hash_seed()
C.offline_env()

TINY_MODEL_CONFIG = C.TINY_LLAMA  # one attention layer
LAYER_NAME = "model.layers.0.self_attn.attn"


def parse_args(argv=None):
    p = C.parser(__doc__)
    C.add_run_args(p, num_gpu_blocks=16384)
    C.add_engine_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--kv-offloading-size", type=float, help="GiB, as `vllm serve --kv-offloading-size`")
    g.add_argument(
        "--cpu-chunks",
        type=int,
        help="size the CPU tier to hold this many chunks: kv_offloading_size = chunks * "
        "round_up(bytes_per_block * blocks_per_chunk, PAGESIZE) / 2**30",
    )
    p.add_argument(
        "--copy-lag-steps",
        type=int,
        default=0,
        help="a transfer submitted to the worker in engine step s is reported finished by the "
        "worker's get_finished poll of step s+LAG. 0 (default) is the earliest the 0.33 code "
        "allows: a load in the metadata of step N is submitted in step N (start_load_kv, after "
        "the forward launch) and reported in step N's ModelRunnerOutput; a store in the metadata "
        "of step N is submitted at the start of step N+1 (handle_preemptions) and reported in "
        "step N+1's output",
    )
    p.add_argument("--load-lag-steps", type=int, default=None, help="override --copy-lag-steps for loads")
    p.add_argument("--store-lag-steps", type=int, default=None, help="override --copy-lag-steps for stores")
    return p.parse_args(argv)


def tiny_bytes_per_block(block_size):
    """K and V, per layer: 2 * block_size * num_kv_heads * head_size * dtype bytes."""
    c = TINY_MODEL_CONFIG
    head_size = c["hidden_size"] // c["num_attention_heads"]
    return c["num_hidden_layers"] * 2 * block_size * c["num_key_value_heads"] * head_size * 2


def round_up(x, m):
    return (x + m - 1) // m * m


def build_scheduler(a, kv_offloading_size):
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor

    model_dir = C.write_model_config(C.driver_model_dir(a, __file__, "tiny-llama-config"), TINY_MODEL_CONFIG)
    model_config = C.model_config(model_dir, a.max_model_len)
    cache_config = C.cache_config(
        a.block_size,
        not a.no_prefix_caching,
        kv_offloading_size=kv_offloading_size,
        kv_offloading_backend="native",
    )
    vllm_config = C.vllm_config(model_config, C.scheduler_config(a), cache_config)
    ktc = vllm_config.kv_transfer_config
    assert ktc is not None and ktc.kv_connector == "OffloadingConnector", ktc
    # The tiny model's one attention layer, as the GPU worker would report it.
    spec = FullAttentionSpec(
        block_size=a.block_size,
        num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
        head_size=model_config.get_head_size(),
        dtype=model_config.dtype,
    )
    page = spec.page_size_bytes
    kv_cache_config = KVCacheConfig(
        num_blocks=a.num_gpu_blocks,
        kv_cache_tensors=[
            KVCacheTensor(
                size=page * a.num_gpu_blocks,
                layers=[LAYER_NAME],
                layer_stride=page * a.num_gpu_blocks,
                block_stride=page,
            )
        ],
        kv_cache_groups=[KVCacheGroupSpec([LAYER_NAME], spec)],
    )
    cache_config.num_gpu_blocks = a.num_gpu_blocks
    sched = C.make_scheduler(vllm_config, kv_cache_config, block_size=a.block_size)
    return sched, vllm_config, kv_cache_config, page


class Clock:
    step = 0


def make_lagged_worker(clock, load_lag, store_lag):
    from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult

    class LaggedTransferWorker(OffloadingWorker):
        """Stands in for CPUOffloadingWorker (vllm/v1/kv_offload/cpu/gpu_worker.py): the same
        submit/get_finished/wait contract, with a copy taking `lag` engine steps."""

        def __init__(self):
            # per direction, in submission order: [job_id, due_step, done]
            self.queues = {"store": [], "load": [], "expedited": []}
            self.kind = {}
            self.submitted_this_step = []

        def _submit(self, q, job_id, lag):
            self.queues[q].append([job_id, clock.step + lag, False])
            self.kind[job_id] = q
            self.submitted_this_step.append((q, job_id))
            return True

        def submit_store(self, job_id, src_spec, dst_spec):
            return self._submit("store", job_id, store_lag)

        def submit_load(self, job_id, src_spec, dst_spec, expedited=False):
            return self._submit("expedited" if expedited else "load", job_id, load_lag)

        def get_finished(self):
            # Same order as CPUOffloadingWorker.get_finished: stores, loads, expedited loads;
            # each direction in submission order, stopping at the first unfinished one.
            out = []
            for q in ("store", "load", "expedited"):
                lst = self.queues[q]
                while lst and (lst[0][2] or lst[0][1] <= clock.step):
                    job_id = lst.pop(0)[0]
                    out.append(TransferResult(job_id=job_id, success=True))
            return out

        def wait(self, job_ids):
            for q, lst in self.queues.items():
                idx = [i for i, e in enumerate(lst) if e[0] in job_ids]
                if idx:
                    for e in lst[: max(idx) + 1]:
                        e[2] = True

        def pending(self):
            return sum(len(v) for v in self.queues.values())

    return LaggedTransferWorker()


class OffloadLoop(C.StepLoop):
    """The step loop with the connector: every engine iteration is a step (Scheduler.has_requests()
    decides when the engine idles), the worker-side OffloadingConnectorWorker runs between the
    schedule and the model, and connector / manager calls are wrapped (not changed) to record them."""

    EMPTY_CALLS_ARE_STEPS = True

    def __init__(self, vllm_config, kv_cache_config, load_lag, store_lag, *args, **kw):
        from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
        from vllm.forward_context import ForwardContext

        super().__init__(*args, **kw)
        conn = self.sched.connector
        assert isinstance(conn, OffloadingConnector)
        self.cs = conn.connector_scheduler  # OffloadingConnectorScheduler
        self.manager = self.cs.manager  # CPUOffloadingManager
        self.policy = self.manager._policy  # LRUCachePolicy
        self.tokens_per_chunk = self.cs.config.kv_group_configs[0].tokens_per_chunk

        # Worker side: vLLM's OffloadingConnectorWorker with a lagged transfer engine.
        self.wconn = OffloadingConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        self.clock = Clock()
        self.xfer = make_lagged_worker(self.clock, load_lag, store_lag)
        self.wconn.connector_worker.worker = self.xfer
        self.fwd_ctx = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={})
        self.load_admission = {}  # id -> {"step", "gpu_hit", "host_hit"} pending until first scheduled after the load
        self.instrument(conn)

    # ---- instrumentation: wrap (not change) connector / manager calls to record them ----
    def chunk_idx(self, req_context, key):
        pos = req_context.get_offload_key_position(key)
        return None if pos is None else pos // self.tokens_per_chunk - 1

    def instrument(self, conn):
        cs, manager, pool = self.cs, self.manager, self.pool
        chunk_idx = self.chunk_idx
        ev = self.ev = {"lookups": [], "allocs": [], "store_offers": []}
        key_owner = self.key_owner = {}  # offload key -> [request id, chunk index] of the first request that stored it

        orig_gnmt = conn.get_num_new_matched_tokens

        def gnmt(request, num_computed_tokens):
            res = orig_gnmt(request, num_computed_tokens)
            rs = cs._req_status.get(request.request_id)
            rec = {
                "id": request.request_id,
                "gpu_hit": num_computed_tokens,
                "host_hit": res[0],
                "async": bool(res[1]),
            }
            if res[0] is None:
                rec["deferred"] = "in_flight_jobs" if rs is not None and rs.transfer_jobs else "chunk_pending"
            ev["lookups"].append(rec)
            return res

        conn.get_num_new_matched_tokens = gnmt

        orig_usaa = conn.update_state_after_alloc

        def usaa(request, blocks, num_external_tokens):
            orig_usaa(request, blocks, num_external_tokens)
            if num_external_tokens:
                rs = cs._req_status[request.request_id]
                ev["allocs"].append(
                    {
                        "id": request.request_id,
                        "gpu_hit": rs.num_locally_computed_tokens,
                        "host_hit": num_external_tokens,
                    }
                )

        conn.update_state_after_alloc = usaa

        orig_ps = manager.prepare_store

        def prepare_store(keys, req_context):
            keys = list(keys)
            res = orig_ps(keys, req_context)
            rid = req_context.req_id
            offered = [chunk_idx(req_context, k) for k in keys]
            rec = {"id": rid, "offered": offered}
            if res is None:
                rec["refused"] = True
            else:
                stored = [chunk_idx(req_context, k) for k in res.keys_to_store]
                rec["stored"] = stored
                for k in res.keys_to_store:
                    key_owner.setdefault(k, [rid, chunk_idx(req_context, k)])
                if res.evicted_keys:
                    rec["evicted"] = [key_owner.get(k, ["?", None]) for k in res.evicted_keys]
            ev["store_offers"].append(rec)
            return res

        manager.prepare_store = prepare_store

        # GPU prefix-cache evictions (a cached block handed out by get_new_blocks), labelled with
        # the first request whose prompt block has that hash.
        from vllm.v1.core.kv_cache_utils import get_block_hash

        block_owner = self.block_owner = {}  # block hash -> [request id, block index]
        ev["gpu_evict"] = []
        orig_evict = pool._maybe_evict_cached_block

        def maybe_evict(block):
            h = block.block_hash
            evicted = orig_evict(block)
            if evicted and h is not None:
                ev["gpu_evict"].append(block_owner.get(get_block_hash(h), ["?", None]) + [block.block_id])
            return evicted

        pool._maybe_evict_cached_block = maybe_evict

    def cpu_state(self):
        chunks = self.policy.chunks
        held = len(chunks)
        pending = sum(1 for c in chunks.values() if not c.is_ready)
        pinned = sum(1 for c in chunks.values() if c.ref_cnt > 0)
        return {
            "held": held,
            "storing": pending,
            "loading": pinned,
            "evictable": self.manager._num_evictable_cache_chunks,
            "capacity": self.manager._num_chunks,
        }

    def cpu_contents(self):
        # [request id, chunk index] of every chunk held, in LRU eviction order (first = next out)
        policy = self.policy
        ranks = policy._ranks
        items = sorted(policy.chunks.keys(), key=lambda k: ranks.get(k, (0, 0)))
        return [self.key_owner.get(k, ["?", None]) + ([] if policy.chunks[k].is_ready else ["storing"]) for k in items]

    def job_rows(self, jobs):
        rows = []
        for job_id, tj in jobs.items():
            st = self.cs._jobs.get(job_id)
            rs = self.cs._req_status.get(tj.req_id)
            idx = None
            if st is not None and rs is not None:
                idx = sorted(self.chunk_idx(rs.req_context, k) for k in st.keys)
            rows.append(
                {
                    "job": job_id,
                    "id": tj.req_id,
                    "chunks": len(tj.dst_spec.block_ids) if hasattr(tj.src_spec, "group_sizes") else len(tj.src_spec.block_ids),
                    "chunk_indices": idx,
                    "gpu_blocks": [int(b) for b in (tj.src_spec.block_ids if hasattr(tj.src_spec, "group_sizes") else tj.dst_spec.block_ids)],
                    "cpu_slots": [int(b) for b in (tj.dst_spec.block_ids if hasattr(tj.src_spec, "group_sizes") else tj.src_spec.block_ids)],
                }
            )
        return rows

    # ---- StepLoop hooks
    def request_fields(self):
        return {
            "gpu_hit_each_admission": [],
            "host_hit_each_admission": [],
            "admission_steps": [],
            "load_admission_steps": [],
            "deferred_lookups": 0,
        }

    def on_request_added(self, r):
        for bi, bh in enumerate(r.block_hashes):
            self.block_owner.setdefault(bh, [r.request_id, bi])

    def has_work(self):
        return self.sched.has_requests()

    def before_schedule(self):
        for k in self.ev:
            self.ev[k] = []
        self.clock.step = self.step
        self.xfer.submitted_this_step = []
        self.cpu_before = self.cpu_state()

    def after_schedule(self, so):
        from vllm.v1.request import RequestStatus

        meta = self.meta = so.kv_connector_metadata
        self.load_jobs = self.job_rows(meta.load_jobs)
        self.store_jobs = self.job_rows(meta.store_jobs)
        self.flush = sorted(meta.jobs_to_flush or ())
        self.cpu_after_sched = self.cpu_state()
        self.waiting_for_load = sorted(
            (rid for rid, r in self.sched.requests.items() if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS), key=int
        )

        # lookups and load admissions of this step
        self.lookups = list(self.ev["lookups"])
        for lk in self.lookups:
            if lk["host_hit"] is None:
                self.info[lk["id"]]["deferred_lookups"] += 1
        load_ids = {j["id"] for j in self.load_jobs}
        self.admitted_for_load = []
        for al in self.ev["allocs"]:
            rid = al["id"]
            if rid in load_ids and self.reqs[rid].status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                self.admitted_for_load.append(al)
                self.load_admission[rid] = {"step": self.step, "gpu_hit": al["gpu_hit"], "host_hit": al["host_hit"]}
                self.info[rid]["load_admission_steps"].append(self.step)

    def admission_fields(self, rid, computed_before):
        row = {}
        la = self.load_admission.pop(rid, None)
        if la is not None:
            gpu_hit, host_hit = la["gpu_hit"], la["host_hit"]
            row["load_admitted_step"] = la["step"]
        else:
            gpu_hit, host_hit = computed_before, 0
        row.update(hit_tokens=computed_before, gpu_hit_tokens=gpu_hit, host_hit_tokens=host_hit)
        inf = self.info[rid]
        inf["gpu_hit_each_admission"].append(gpu_hit)
        inf["host_hit_each_admission"].append(host_hit)
        inf["admission_steps"].append(self.step)
        return row

    def connector_output(self, so):
        """The worker: vLLM's OffloadingConnectorWorker, in the model runner's order."""
        from vllm.v1.outputs import KVConnectorOutput

        wconn, meta = self.wconn, self.meta
        wconn.handle_preemptions(meta)  # submits last step's stores + flushed jobs (and waits on flushes)
        wconn.bind_connector_metadata(meta)
        # (the forward would be launched here)
        wconn.start_load_kv(self.fwd_ctx)  # submits this step's loads
        wconn.wait_for_save()  # queues this step's stores for the next step
        finished_sending, self.finished_recving = wconn.get_finished(so.finished_req_ids)
        wmeta = wconn.build_connector_worker_meta()
        wconn.clear_connector_metadata()
        kv_out = KVConnectorOutput(
            finished_sending=finished_sending or None,
            finished_recving=self.finished_recving or None,
            kv_connector_worker_meta=wmeta,
        )
        completed = sorted(wmeta.completed_jobs) if wmeta is not None else []
        kinds = self.xfer.kind
        self.loads_finished = [j for j in completed if kinds.get(j) in ("load", "expedited")]
        self.stores_finished = [j for j in completed if kinds.get(j) == "store"]
        self.submitted = [{"job": j, "dir": q} for q, j in self.xfer.submitted_this_step]
        return {"kv_connector_output": kv_out}

    def step_fields_mid(self, so):
        return {
            "finished_req_ids_to_worker": sorted(so.finished_req_ids, key=int),
            "lookups": self.lookups,
            "admitted_for_load": self.admitted_for_load,
            "waiting_for_load": self.waiting_for_load,
            "load_jobs": self.load_jobs,
            "store_jobs": self.store_jobs,
            "store_offers": list(self.ev["store_offers"]),
            "gpu_evicted": list(self.ev["gpu_evict"]),
            "jobs_to_flush": self.flush,
            "submitted": self.submitted,
            "loads_finished": self.loads_finished,
            "stores_finished": self.stores_finished,
            "finished_recving": sorted(self.finished_recving or (), key=int),
            "cpu_before": self.cpu_before,
            "cpu_after_schedule": self.cpu_after_sched,
            "cpu_after_update": self.cpu_state(),
            "cpu_lru_order": self.cpu_contents(),
        }

    def after_step(self, so, total, preempted):
        # A real engine would spin here forever; stop if nothing can change any more.
        sched = self.sched
        if total == 0 and sched.has_requests() and not self.loads_finished and not self.stores_finished \
                and not self.xfer.pending() and not self.cs._jobs and not self.finished_recving \
                and not sched.finished_req_ids and not preempted:
            if self.pending():
                self.on_idle()
                return False
            self.on_stuck()
            return True
        return False


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    import vllm

    load_lag = a.copy_lag_steps if a.load_lag_steps is None else a.load_lag_steps
    store_lag = a.copy_lag_steps if a.store_lag_steps is None else a.store_lag_steps
    assert load_lag >= 0 and store_lag >= 0

    bytes_per_block = tiny_bytes_per_block(a.block_size)
    blocks_per_chunk = 1  # --kv-offloading-size sets no block_size/blocks_per_chunk extra config
    aligned_chunk_bytes = round_up(bytes_per_block * blocks_per_chunk, mmap.PAGESIZE)
    if a.cpu_chunks is not None:
        kv_offloading_size = a.cpu_chunks * aligned_chunk_bytes / float(1 << 30)
    else:
        kv_offloading_size = a.kv_offloading_size

    trace = C.load_trace(a.trace)
    n = len(trace)
    arrival_steps = C.load_arrival_steps(a.arrival_steps, n)

    sched, vllm_config, kv_cache_config, page = build_scheduler(a, kv_offloading_size)
    assert page == bytes_per_block, (page, bytes_per_block)
    hasher = C.request_block_hasher(a.block_size)
    out, emit = C.open_jsonl(a.out)
    loop = OffloadLoop(
        vllm_config, kv_cache_config, load_lag, store_lag, sched, trace, arrival_steps, hasher, emit, a.num_gpu_blocks, a.max_steps
    )

    spec_cfg = loop.cs.config
    config = {
        "type": "config",
        "vllm_version": vllm.__version__,
        "driver": "run_vllm_offload.py",
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
        "trace": a.trace,  # as given: relative to the folder, as run_all.sh gives it
        "num_requests": n,
        "arrival_steps": arrival_steps,
        "block_size": a.block_size,
        "num_gpu_blocks": a.num_gpu_blocks,
        "free_blocks_at_start": loop.pool.get_num_free_blocks(),
    }
    config.update(
        C.scheduler_settings(
            sched,
            vllm_config,
            omit={"max_num_scheduled_tokens", "max_in_flight_tokens", "prefix_caching_hash_algo", "watermark", "use_v2_model_runner"},
        )
    )
    config.update(
        {
            "kv_offloading_size_gib": kv_offloading_size,
            "kv_transfer_config": {
                "kv_connector": vllm_config.kv_transfer_config.kv_connector,
                "kv_role": vllm_config.kv_transfer_config.kv_role,
                "kv_connector_extra_config": dict(vllm_config.kv_transfer_config.kv_connector_extra_config),
            },
            "gpu_bytes_per_block": page,
            "page_size": mmap.PAGESIZE,
            "blocks_per_chunk": spec_cfg.blocks_per_chunk,
            "tokens_per_chunk": loop.tokens_per_chunk,
            "cpu_num_chunks": loop.manager._num_chunks,
            "cpu_eviction_policy": type(loop.policy).__name__,
            "offload_prompt_only": spec_cfg.offload_prompt_only,
            "load_lag_steps": load_lag,
            "store_lag_steps": store_lag,
        }
    )
    emit(config)

    loop.run()
    loop.request_lines()
    unfinished = loop.unfinished()
    emit(
        {
            "type": "summary",
            "last_step": loop.step - 1,
            "nonempty_steps": loop.calls - loop.empty_calls,
            "empty_steps": loop.empty_calls,
            "requests": n,
            "finished": n - len(unfinished),
            "unfinished": unfinished,
            "stuck": loop.stuck,
            "preemptions": loop.total("preemptions"),
            "deferred_lookups": loop.total("deferred_lookups"),
            "hit_tokens_first_admission": loop.hit_tokens_first_admission(),
            "host_hit_tokens_all_admissions": loop.total_of_lists("host_hit_each_admission"),
            "cpu_final": loop.cpu_state(),
            "wall_s": round(time.time() - t0, 2),
        }
    )
    out.close()
    print(f"{a.out}: last step {loop.step - 1}, {n - len(unfinished)}/{n} finished, {time.time() - t0:.1f}s", file=sys.stderr)
    return 0 if not unfinished else 1


if __name__ == "__main__":
    sys.exit(main())
