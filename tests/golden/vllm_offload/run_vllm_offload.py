#!/usr/bin/env python3
"""Drive the REAL vLLM v1 scheduler WITH vLLM's native CPU KV offloading (OffloadingConnector,
CPUOffloadingSpec, CPUOffloadingManager with the LRU policy) over a trace -- pure Python, no
model, no GPU -- and write a golden per-step schedule as JSON Lines.

Extends the vLLM golden driver run_vllm_scheduler.py (same trace format, same scheduler
construction, same token model). What is added:

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

import argparse
import json
import mmap
import os
import sys
import time

# vLLM iterates Python sets of request-id strings in places that matter here (e.g.
# SchedulerOutput.finished_req_ids decides the order of finished requests' store jobs and of
# on_request_finished LRU re-ranking). String hashing is salted per process, so fix the salt.
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") is None:
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

OUT_TOKEN_BASE = 1 << 31
OUT_TOKEN_STRIDE = 1 << 20

TINY_MODEL_CONFIG = {
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
LAYER_NAME = "model.layers.0.self_attn.attn"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, help="native JSONL (prompt_ids, output_len)")
    p.add_argument("--out", required=True, help="JSON Lines file to write")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-gpu-blocks", type=int, default=16384, help="blocks, null block included")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=65536)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--reserve-full-isl", choices=["default", "on", "off"], default="default")
    p.add_argument("--arrival-steps", help="JSON file: a list, the engine step at which each request arrives")
    p.add_argument("--max-steps", type=int, default=100_000)
    p.add_argument("--model-dir", default=None, help="dir for the tiny config.json (default: next to this script)")
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


def load_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if "prompt_ids" not in r or "output_len" not in r:
                sys.exit(f"{path}: every record needs prompt_ids and output_len")
            reqs.append(r)
    return reqs


def tiny_bytes_per_block(block_size):
    """K and V, per layer: 2 * block_size * num_kv_heads * head_size * dtype bytes."""
    c = TINY_MODEL_CONFIG
    head_size = c["hidden_size"] // c["num_attention_heads"]
    return c["num_hidden_layers"] * 2 * block_size * c["num_key_value_heads"] * head_size * 2


def round_up(x, m):
    return (x + m - 1) // m * m


def build_scheduler(a, kv_offloading_size):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from vllm.v1.structured_output import StructuredOutputManager

    model_dir = a.model_dir or os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny-llama-config")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(TINY_MODEL_CONFIG, f)

    model_config = ModelConfig(
        model=model_dir, dtype="float16", seed=42, skip_tokenizer_init=True, max_model_len=a.max_model_len
    )
    sched_kwargs = dict(
        max_num_seqs=a.max_num_seqs,
        max_num_batched_tokens=a.max_num_batched_tokens,
        max_model_len=a.max_model_len,
        long_prefill_token_threshold=a.long_prefill_token_threshold,
        enable_chunked_prefill=not a.no_chunked_prefill,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    if a.reserve_full_isl != "default":
        sched_kwargs["scheduler_reserve_full_isl"] = a.reserve_full_isl == "on"
    scheduler_config = SchedulerConfig(**sched_kwargs)
    cache_config = CacheConfig(
        block_size=a.block_size,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=not a.no_prefix_caching,
        kv_offloading_size=kv_offloading_size,
        kv_offloading_backend="native",
    )
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        device_config=DeviceConfig(device="cpu"),
    )
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
    sched = Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=a.block_size,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )
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


def make_request(i, rec, hasher):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    sp = SamplingParams(max_tokens=int(rec["output_len"]), ignore_eos=True, temperature=0.0)
    return Request(
        request_id=str(i),
        prompt_token_ids=[int(t) for t in rec["prompt_ids"]],
        sampling_params=sp,
        pooling_params=None,
        arrival_time=float(i),
        block_hasher=hasher,
    )


def main(argv=None):
    a = parse_args(argv)
    t0 = time.time()
    import vllm
    from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector
    from vllm.forward_context import ForwardContext
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import RequestStatus

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

    trace = load_trace(a.trace)
    n = len(trace)
    arrival_steps = [0] * n
    if a.arrival_steps:
        with open(a.arrival_steps) as f:
            arrival_steps = [int(x) for x in json.load(f)]
        assert len(arrival_steps) == n, "--arrival-steps needs one entry per request"

    sched, vllm_config, kv_cache_config, page = build_scheduler(a, kv_offloading_size)
    assert page == bytes_per_block, (page, bytes_per_block)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(a.block_size, sha256)
    pool = sched.kv_cache_manager.block_pool
    sc = vllm_config.scheduler_config

    conn = sched.connector
    assert isinstance(conn, OffloadingConnector)
    cs = conn.connector_scheduler  # OffloadingConnectorScheduler
    manager = cs.manager  # CPUOffloadingManager
    policy = manager._policy  # LRUCachePolicy
    tokens_per_chunk = cs.config.kv_group_configs[0].tokens_per_chunk

    # Worker side: vLLM's OffloadingConnectorWorker with a lagged transfer engine.
    wconn = OffloadingConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    clock = Clock()
    xfer = make_lagged_worker(clock, load_lag, store_lag)
    wconn.connector_worker.worker = xfer
    fwd_ctx = ForwardContext(no_compile_layers={}, attn_metadata={}, slot_mapping={})

    # ---- instrumentation: wrap (not change) connector / manager calls to record them ----
    ev = {"lookups": [], "allocs": [], "store_offers": []}
    key_owner = {}  # offload key -> [request id, chunk index] of the first request that stored it

    def chunk_idx(req_context, key):
        pos = req_context.get_offload_key_position(key)
        return None if pos is None else pos // tokens_per_chunk - 1

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

    block_owner = {}  # block hash -> [request id, block index]
    ev["gpu_evict"] = []
    orig_evict = pool._maybe_evict_cached_block

    def maybe_evict(block):
        h = block.block_hash
        evicted = orig_evict(block)
        if evicted and h is not None:
            ev["gpu_evict"].append(block_owner.get(get_block_hash(h), ["?", None]) + [block.block_id])
        return evicted

    pool._maybe_evict_cached_block = maybe_evict

    def cpu_state():
        chunks = policy.chunks
        held = len(chunks)
        pending = sum(1 for c in chunks.values() if not c.is_ready)
        pinned = sum(1 for c in chunks.values() if c.ref_cnt > 0)
        return {
            "held": held,
            "storing": pending,
            "loading": pinned,
            "evictable": manager._num_evictable_cache_chunks,
            "capacity": manager._num_chunks,
        }

    def cpu_contents():
        # [request id, chunk index] of every chunk held, in LRU eviction order (first = next out)
        ranks = policy._ranks
        items = sorted(policy.chunks.keys(), key=lambda k: ranks.get(k, (0, 0)))
        return [key_owner.get(k, ["?", None]) + ([] if policy.chunks[k].is_ready else ["storing"]) for k in items]

    def job_rows(jobs):
        rows = []
        for job_id, tj in jobs.items():
            st = cs._jobs.get(job_id)
            rs = cs._req_status.get(tj.req_id)
            idx = None
            if st is not None and rs is not None:
                idx = sorted(chunk_idx(rs.req_context, k) for k in st.keys)
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

    out = open(a.out, "w")

    def emit(obj):
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")

    spec_cfg = cs.config
    emit(
        {
            "type": "config",
            "vllm_version": vllm.__version__,
            "driver": "run_vllm_offload.py",
            "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
            "trace": os.path.abspath(a.trace),
            "num_requests": n,
            "arrival_steps": arrival_steps,
            "block_size": a.block_size,
            "num_gpu_blocks": a.num_gpu_blocks,
            "free_blocks_at_start": pool.get_num_free_blocks(),
            "max_num_seqs": sc.max_num_seqs,
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_model_len": vllm_config.model_config.max_model_len,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "enable_prefix_caching": vllm_config.cache_config.enable_prefix_caching,
            "scheduler_reserve_full_isl": sc.scheduler_reserve_full_isl,
            "async_scheduling": bool(sc.async_scheduling),
            "policy": sc.policy,
            "kv_offloading_size_gib": kv_offloading_size,
            "kv_transfer_config": {
                "kv_connector": vllm_config.kv_transfer_config.kv_connector,
                "kv_role": vllm_config.kv_transfer_config.kv_role,
                "kv_connector_extra_config": dict(vllm_config.kv_transfer_config.kv_connector_extra_config),
            },
            "gpu_bytes_per_block": page,
            "page_size": mmap.PAGESIZE,
            "blocks_per_chunk": spec_cfg.blocks_per_chunk,
            "tokens_per_chunk": tokens_per_chunk,
            "cpu_num_chunks": manager._num_chunks,
            "cpu_eviction_policy": type(policy).__name__,
            "offload_prompt_only": spec_cfg.offload_prompt_only,
            "load_lag_steps": load_lag,
            "store_lag_steps": store_lag,
        }
    )

    reqs, info = {}, {}
    order = sorted(range(n), key=lambda i: (arrival_steps[i], i))
    next_arrival = 0
    ever_admitted = set()
    load_admission = {}  # id -> {"step", "gpu_hit", "host_hit"} pending until first scheduled after the load
    step = 0
    nonempty_steps = 0
    empty_steps = 0
    stuck = False
    while True:
        while next_arrival < n and arrival_steps[order[next_arrival]] <= step:
            i = order[next_arrival]
            r = make_request(i, trace[i], hasher)
            reqs[r.request_id] = r
            info[r.request_id] = {
                "type": "request",
                "id": r.request_id,
                "prompt_len": len(r.prompt_token_ids),
                "output_len": int(trace[i]["output_len"]),
                "arrival_step": arrival_steps[i],
                "first_scheduled_step": None,
                "first_token_step": None,
                "finish_step": None,
                "hit_tokens_first_admission": None,
                "hit_tokens_each_admission": [],
                "gpu_hit_each_admission": [],
                "host_hit_each_admission": [],
                "admission_steps": [],
                "load_admission_steps": [],
                "deferred_lookups": 0,
                "preemptions": 0,
            }
            for bi, bh in enumerate(r.block_hashes):
                block_owner.setdefault(bh, [r.request_id, bi])
            sched.add_request(r)
            next_arrival += 1
        if not sched.has_requests():
            if next_arrival < n:
                step = max(step, arrival_steps[order[next_arrival]])
                continue
            break
        if step >= a.max_steps:
            print(f"stopped at --max-steps {a.max_steps}", file=sys.stderr)
            break

        for k in ev:
            ev[k] = []
        clock.step = step
        xfer.submitted_this_step = []
        free_before = pool.get_num_free_blocks()
        cpu_before = cpu_state()
        so = sched.schedule()
        free_after_sched = pool.get_num_free_blocks()
        running_after_sched, waiting_after_sched = sched.get_request_counts()
        preempted = sorted(so.preempted_req_ids, key=int)
        for rid in preempted:
            info[rid]["preemptions"] += 1
        meta = so.kv_connector_metadata
        load_jobs = job_rows(meta.load_jobs)
        store_jobs = job_rows(meta.store_jobs)
        flush = sorted(meta.jobs_to_flush or ())
        cpu_after_sched = cpu_state()
        waiting_for_load = sorted(
            (rid for rid, r in sched.requests.items() if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS), key=int
        )

        # lookups and load admissions of this step
        lookups = list(ev["lookups"])
        for lk in lookups:
            if lk["host_hit"] is None:
                info[lk["id"]]["deferred_lookups"] += 1
        load_ids = {j["id"] for j in load_jobs}
        admitted_for_load = []
        for al in ev["allocs"]:
            rid = al["id"]
            if rid in load_ids and reqs[rid].status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                admitted_for_load.append(al)
                load_admission[rid] = {"step": step, "gpu_hit": al["gpu_hit"], "host_hit": al["host_hit"]}
                info[rid]["load_admission_steps"].append(step)

        # rows
        before, kind = {}, {}
        cached = so.scheduled_cached_reqs
        for j, rid in enumerate(cached.req_ids):
            before[rid] = cached.num_computed_tokens[j]
            kind[rid] = "resumed" if rid in cached.resumed_req_ids else "running"
        for nrd in so.scheduled_new_reqs:
            before[nrd.req_id] = nrd.num_computed_tokens
            kind[nrd.req_id] = "resumed" if nrd.req_id in ever_admitted else "new"
        rows = []
        for rid, k in so.num_scheduled_tokens.items():
            row = {"id": rid, "tokens": k, "kind": kind[rid], "computed_before": before[rid]}
            if kind[rid] in ("new", "resumed"):
                la = load_admission.pop(rid, None)
                if la is not None:
                    gpu_hit, host_hit = la["gpu_hit"], la["host_hit"]
                    row["load_admitted_step"] = la["step"]
                else:
                    gpu_hit, host_hit = before[rid], 0
                row["hit_tokens"] = before[rid]
                row["gpu_hit_tokens"] = gpu_hit
                row["host_hit_tokens"] = host_hit
                inf = info[rid]
                inf["hit_tokens_each_admission"].append(before[rid])
                inf["gpu_hit_each_admission"].append(gpu_hit)
                inf["host_hit_each_admission"].append(host_hit)
                inf["admission_steps"].append(step)
                if inf["hit_tokens_first_admission"] is None:
                    inf["hit_tokens_first_admission"] = before[rid]
                    inf["first_scheduled_step"] = step
                ever_admitted.add(rid)
            rows.append(row)

        # ---- the worker: vLLM's OffloadingConnectorWorker, model-runner order ----
        wconn.handle_preemptions(meta)  # submits last step's stores + flushed jobs (and waits on flushes)
        wconn.bind_connector_metadata(meta)
        # (the forward would be launched here)
        wconn.start_load_kv(fwd_ctx)  # submits this step's loads
        wconn.wait_for_save()  # queues this step's stores for the next step
        finished_sending, finished_recving = wconn.get_finished(so.finished_req_ids)
        wmeta = wconn.build_connector_worker_meta()
        wconn.clear_connector_metadata()
        kv_out = KVConnectorOutput(
            finished_sending=finished_sending or None,
            finished_recving=finished_recving or None,
            kv_connector_worker_meta=wmeta,
        )
        completed = sorted(wmeta.completed_jobs) if wmeta is not None else []
        kinds = xfer.kind
        loads_finished = [j for j in completed if kinds.get(j) in ("load", "expedited")]
        stores_finished = [j for j in completed if kinds.get(j) == "store"]
        submitted = [{"job": j, "dir": q} for q, j in xfer.submitted_this_step]

        # ---- the model ----
        ids = list(so.num_scheduled_tokens.keys())
        sampled, tokens = [], []
        for rid in ids:
            r = reqs[rid]
            if r.num_computed_tokens >= r.num_tokens:
                tokens.append([OUT_TOKEN_BASE + int(rid) * OUT_TOKEN_STRIDE + r.num_output_tokens])
                sampled.append(rid)
            else:
                tokens.append([])
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: j for j, rid in enumerate(ids)},
            sampled_token_ids=tokens,
            kv_connector_output=kv_out,
        )
        sched.update_from_output(so, mro)
        finished = []
        for rid in sampled:
            r = reqs[rid]
            if info[rid]["first_token_step"] is None:
                info[rid]["first_token_step"] = step
            if RequestStatus.is_finished(r.status):
                finished.append(rid)
                info[rid]["finish_step"] = step
        num_running, num_waiting = sched.get_request_counts()
        total = so.total_num_scheduled_tokens
        if total:
            nonempty_steps += 1
        else:
            empty_steps += 1
        emit(
            {
                "type": "step",
                "step": step,
                "empty": total == 0,
                "num_scheduled_tokens": total,
                "batch_size": len(ids),
                "prefill_tokens": sum(k for k in so.num_scheduled_tokens.values() if k > 1),
                "decode_seqs": sum(1 for k in so.num_scheduled_tokens.values() if k == 1),
                "scheduled": rows,
                "preempted": preempted,
                "sampled": sampled,
                "finished": finished,
                "finished_req_ids_to_worker": sorted(so.finished_req_ids, key=int),
                "lookups": lookups,
                "admitted_for_load": admitted_for_load,
                "waiting_for_load": waiting_for_load,
                "load_jobs": load_jobs,
                "store_jobs": store_jobs,
                "store_offers": list(ev["store_offers"]),
                "gpu_evicted": list(ev["gpu_evict"]),
                "jobs_to_flush": flush,
                "submitted": submitted,
                "loads_finished": loads_finished,
                "stores_finished": stores_finished,
                "finished_recving": sorted(finished_recving or (), key=int),
                "cpu_before": cpu_before,
                "cpu_after_schedule": cpu_after_sched,
                "cpu_after_update": cpu_state(),
                "cpu_lru_order": cpu_contents(),
                "free_blocks_before": free_before,
                "free_blocks_after_schedule": free_after_sched,
                "free_blocks_after_update": pool.get_num_free_blocks(),
                "used_blocks_after_schedule": a.num_gpu_blocks - 1 - free_after_sched,
                "running_after_schedule": running_after_sched,
                "waiting_after_schedule": waiting_after_sched,
                "running_after_update": num_running,
                "waiting_after_update": num_waiting,
            }
        )
        step += 1
        # A real engine would spin here forever; stop if nothing can change any more.
        if total == 0 and sched.has_requests() and not loads_finished and not stores_finished \
                and not xfer.pending() and not cs._jobs and not finished_recving \
                and not sched.finished_req_ids and not preempted:
            if next_arrival < n:
                step = max(step, arrival_steps[order[next_arrival]])
                continue
            print(f"stuck at step {step}: {sched.get_num_unfinished_requests()} unfinished", file=sys.stderr)
            stuck = True
            break

    for rid in sorted(info, key=int):
        emit(info[rid])
    unfinished = [rid for rid in info if info[rid]["finish_step"] is None]
    emit(
        {
            "type": "summary",
            "last_step": step - 1,
            "nonempty_steps": nonempty_steps,
            "empty_steps": empty_steps,
            "requests": n,
            "finished": n - len(unfinished),
            "unfinished": sorted(unfinished, key=int),
            "stuck": stuck,
            "preemptions": sum(v["preemptions"] for v in info.values()),
            "deferred_lookups": sum(v["deferred_lookups"] for v in info.values()),
            "hit_tokens_first_admission": sum(v["hit_tokens_first_admission"] or 0 for v in info.values()),
            "host_hit_tokens_all_admissions": sum(sum(v["host_hit_each_admission"]) for v in info.values()),
            "cpu_final": cpu_state(),
            "wall_s": round(time.time() - t0, 2),
        }
    )
    out.close()
    print(f"{a.out}: last step {step - 1}, {n - len(unfinished)}/{n} finished, {time.time() - t0:.1f}s", file=sys.stderr)
    return 0 if not unfinished else 1


if __name__ == "__main__":
    sys.exit(main())
