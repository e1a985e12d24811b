#!/usr/bin/env python3
"""Prints a hybrid golden schedule compactly, one line per step (standard library only).

Usage: summarize.py schedules/<case>.jsonl [--requests]

Per step:  s<step> [r<id>:<tokens>(n|r c<computed_before> j<shared_prefix_boundary>) ...]
           PRE[...] fin[...] free=<after schedule>/<after update>
           G<g><kind>{r<id>:<real blocks> ...} per KV cache group (after scheduling)
           C=<cached per group, '/' separated> (+newly hashed -evicted this step)
           run=<running> wait=<waiting> after the update.
Kinds: F = full attention, S<W> = sliding window W. n = new admission, r = resumed after
preemption; c = computed tokens before the step = prefix hit at admission; j = the
shared-prefix junction vLLM recorded on the request (0 = none).
"""

import json
import sys


def main():
    path = sys.argv[1]
    show_reqs = "--requests" in sys.argv
    kinds = {}
    for line in open(path):
        d = json.loads(line)
        t = d["type"]
        if t == "config":
            for g in d["groups"]:
                kinds[str(g["id"])] = "F" if g["kind"] == "full_attention" else f"S{g['sliding_window']}"
            print(
                f"# vllm {d['vllm_version']} groups={[kinds[str(g['id'])] for g in d['groups']]} "
                f"blocks={d['num_gpu_blocks']} retention={d['prefix_cache_retention_interval']} "
                f"seqs={d['max_num_seqs']} budget={d['max_num_batched_tokens']} "
                f"max_model_len={d['max_model_len']} reserve_full_isl={d['scheduler_reserve_full_isl']}"
            )
            continue
        if t == "request":
            if show_reqs:
                print(
                    f"# r{d['id']} len={d['prompt_len']}+{d['output_len']} arr={d['arrival_step']} "
                    f"hits={d['hit_tokens_each_admission']} junctions={d['shared_prefix_boundary_each_admission']} "
                    f"admitted={d['admission_steps']} fin={d['finish_step']} pre={d['preemptions']}"
                )
            continue
        if t == "summary":
            print("# " + json.dumps(d, separators=(",", ":")))
            continue
        sch = []
        for r in d["scheduled"]:
            s = f"r{r['id']}:{r['tokens']}"
            if r["kind"] != "running":
                s += f"({r['kind'][0]} c{r['computed_before']}"
                if r.get("shared_prefix_boundary"):
                    s += f" j{r['shared_prefix_boundary']}"
                s += ")"
            sch.append(s)
        parts = [f"s{d['step']:>3}", "[" + " ".join(sch) + "]"]
        if d["preempted"]:
            parts.append(f"PRE{d['preempted']}")
        if d["finished"]:
            parts.append(f"fin{d['finished']}")
        parts.append(f"free={d['free_blocks_after_schedule']}/{d['free_blocks_after_update']}")
        for g, per in d["group_blocks"].items():
            parts.append(f"G{g}{kinds.get(g, '?')}{{" + " ".join(f"{k}:{v}" for k, v in per.items()) + "}")
        c = "/".join(str(d["cached_blocks"][g]) for g in sorted(d["cached_blocks"], key=int))
        nc = "/".join(str(d["newly_cached"][g]) for g in sorted(d["newly_cached"], key=int))
        ev = "/".join(str(d["evicted_cached"][g]) for g in sorted(d["evicted_cached"], key=int))
        s = f"C={c}"
        if any(d["newly_cached"].values()):
            s += f" +{nc}"
        if any(d["evicted_cached"].values()):
            s += f" -{ev}"
        parts.append(s)
        parts.append(f"run={d['running_after_update']} wait={d['waiting_after_update']}")
        print(" ".join(parts))


if __name__ == "__main__":
    main()
