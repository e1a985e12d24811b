#!/usr/bin/env python3
"""Prints a golden offload schedule compactly, one line per step (standard library only).
Usage: summarize.py schedules/<case>.jsonl [--lru]"""

import json
import sys


def fmt_jobs(jobs):
    return " ".join(f"j{j['job']}:r{j['id']}{j['chunk_indices']}" for j in jobs)


def main():
    path = sys.argv[1]
    lru = "--lru" in sys.argv
    for line in open(path):
        d = json.loads(line)
        t = d["type"]
        if t == "config":
            print(
                f"# vllm {d['vllm_version']} gpu_blocks={d['num_gpu_blocks']} cpu_chunks={d['cpu_num_chunks']} "
                f"seqs={d['max_num_seqs']} budget={d['max_num_batched_tokens']} "
                f"lag load={d['load_lag_steps']} store={d['store_lag_steps']}"
            )
            continue
        if t != "step":
            print(json.dumps(d, separators=(",", ":")))
            continue
        parts = [f"s{d['step']:>3}"]
        sch = []
        for r in d["scheduled"]:
            s = f"r{r['id']}:{r['tokens']}"
            if r["kind"] != "running":
                s += f"({r['kind'][0]} c{r['computed_before']} g{r['gpu_hit_tokens']} h{r['host_hit_tokens']})"
            sch.append(s)
        parts.append("sched[" + " ".join(sch) + "]")
        if d["preempted"]:
            parts.append(f"PREEMPT{d['preempted']}")
        if d["finished"]:
            parts.append(f"fin{d['finished']}")
        lk = [
            f"r{x['id']}:g{x['gpu_hit']}/h{'DEFER-' + x['deferred'] if x['host_hit'] is None else x['host_hit']}"
            for x in d["lookups"]
        ]
        if lk:
            parts.append("lookup[" + " ".join(lk) + "]")
        if d["admitted_for_load"]:
            parts.append(
                "LOADADMIT[" + " ".join(f"r{x['id']}:g{x['gpu_hit']}+h{x['host_hit']}" for x in d["admitted_for_load"]) + "]"
            )
        if d["load_jobs"]:
            parts.append("loadjobs[" + fmt_jobs(d["load_jobs"]) + "]")
        if d["store_jobs"]:
            parts.append("storejobs[" + fmt_jobs(d["store_jobs"]) + "]")
        refused = [o for o in d["store_offers"] if o.get("refused")]
        if refused:
            parts.append("REFUSED[" + " ".join(f"r{o['id']}{o['offered']}" for o in refused) + "]")
        ev = [e for o in d["store_offers"] for e in o.get("evicted", [])]
        if ev:
            parts.append("cpu_evict[" + " ".join(f"r{a}.{b}" for a, b in ev) + "]")
        if d.get("gpu_evicted"):
            parts.append("gpu_evict[" + " ".join(f"r{x[0]}.{x[1]}" for x in d["gpu_evicted"]) + "]")
        if d["jobs_to_flush"]:
            parts.append(f"flush{d['jobs_to_flush']}")
        if d["loads_finished"]:
            parts.append(f"ldone{d['loads_finished']}")
        if d["stores_finished"]:
            parts.append(f"sdone{d['stores_finished']}")
        c = d["cpu_after_update"]
        parts.append(f"cpu={c['held']}(st{c['storing']},ld{c['loading']})")
        parts.append(f"free={d['free_blocks_after_schedule']}/{d['free_blocks_after_update']}")
        parts.append(f"run={d['running_after_update']} wait={d['waiting_after_update']}")
        if d["waiting_for_load"]:
            parts.append(f"wfl{d['waiting_for_load']}")
        print(" ".join(parts))
        if lru:
            print("      lru: " + " ".join(f"r{x[0]}.{x[1]}" + ("*" if len(x) > 2 else "") for x in d["cpu_lru_order"]))


if __name__ == "__main__":
    main()
