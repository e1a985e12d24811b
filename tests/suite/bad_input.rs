//! The bad-input table, docs/reference/bad-input.md: every input listed there is run through the binary
//! here, and the table must equal what the binary does — exit code and the first line it prints
//! on stderr. After a deliberate change, `CACHESIM_BLESS=1 cargo test --test suite bad_input::`
//! rewrites the table. Also checks that a failed run leaves an existing output file untouched.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// One row: what is wrong, the arguments, and a marker after which the message varies from run
/// to run (random bytes) and is cut.
struct Case {
    what: &'static str,
    args: &'static [&'static str],
    cut: Option<&'static str>,
}

const CASES: &[Case] = &[
    Case {
        what: "a device that never ends, all zeros",
        args: &["cache", "--trace", "/dev/zero"],
        cut: Some("first line:"),
    },
    Case {
        what: "a device that never ends, random bytes",
        args: &["cache", "--trace", "/dev/urandom"],
        cut: Some("hold no trace record:"),
    },
    Case { what: "a missing file", args: &["cache", "--trace", "missing.jsonl"], cut: None },
    Case { what: "a folder", args: &["cache", "--trace", "."], cut: None },
    Case { what: "an empty file", args: &["cache", "--trace", "empty.jsonl"], cut: None },
    Case { what: "binary garbage (terminal escapes, NUL)", args: &["cache", "--trace", "garbage.bin"], cut: None },
    Case { what: "a corrupt gzip file", args: &["cache", "--trace", "bad.gz"], cut: None },
    Case { what: "a 65 MiB line", args: &["cache", "--trace", "long.jsonl"], cut: None },
    Case {
        what: "a gzip of 2 MiB of newlines (read without storing them)",
        args: &["cache", "--trace", "blank.gz"],
        cut: None,
    },
    Case { what: "2 MiB of spaces inside `[ ]`", args: &["cache", "--trace", "spaces.json"], cut: None },
    Case {
        what: "a trace over --max-trace-bytes (2 MiB of newlines under a 1M cap)",
        args: &["cache", "--trace", "blank.gz", "--max-trace-bytes", "1M"],
        cut: None,
    },
    Case {
        what: "a bad line after 10,000 blank lines (its own line number)",
        args: &["cache", "--trace", "gap.jsonl"],
        cut: None,
    },
    Case {
        what: "a bad record after 1 MiB of spaces in an array (its own byte offset)",
        args: &["cache", "--trace", "gap.json"],
        cut: None,
    },
    Case { what: "a CSV header after 2 MiB of blank lines", args: &["cache", "--trace", "late.csv"], cut: None },
    Case { what: "a --max-trace-bytes that is not a size", args: &["cache", "--max-trace-bytes", "lots"], cut: None },
    Case {
        what: "a grid of 20,000 points (over --max-points)",
        args: &["sweep", "--grid", "max-num-seqs=1..20000"],
        cut: None,
    },
    Case { what: "a time stamp of 1e16 ms (Mooncake)", args: &["cache", "--trace", "far.jsonl"], cut: None },
    Case { what: "a trace spanning 317 years (1e13 ms)", args: &["--trace", "epoch.jsonl"], cut: None },
    Case { what: "a time scale that stretches the sample past 1e12 s", args: &["--time-scale", "1e12"], cut: None },
    Case { what: "a rate that sends the last request after 1e300 s", args: &["--request-rate", "1e-300"], cut: None },
    Case { what: "a rate of 0", args: &["--request-rate", "0"], cut: None },
    Case { what: "a negative time scale", args: &["--time-scale", "-1"], cut: None },
    Case { what: "a negative burstiness", args: &["--request-rate", "4", "--burstiness", "-2"], cut: None },
    Case { what: "no running requests allowed", args: &["--max-num-seqs", "0"], cut: None },
    Case { what: "a negative integer", args: &["--max-num-seqs", "-1"], cut: None },
    Case {
        what: "a token budget below the request limit",
        args: &["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
        cut: None,
    },
    Case {
        what: "a token budget of 1 (vLLM lowers max_num_seqs; said, then runs)",
        args: &["--max-num-batched-tokens", "1", "--num-prompts", "2"],
        cut: None,
    },
    Case { what: "an activation peak larger than the GPU", args: &["--activation-peak-gib", "1000"], cut: None },
    Case { what: "a negative activation peak", args: &["--activation-peak-gib", "-1"], cut: None },
    Case { what: "a memory share above 1", args: &["--gpu-memory-utilization", "1.5"], cut: None },
    Case { what: "a model that does not fit", args: &["--model", "llama-3.1-70b", "--gpu", "a10"], cut: None },
    Case { what: "one KV block", args: &["--num-gpu-blocks-override", "1"], cut: None },
    Case { what: "heads that do not split", args: &["--tp", "3"], cut: None },
    Case { what: "a missing model file", args: &["--model-file", "missing.toml"], cut: None },
    Case { what: "an output that is the input", args: &["--trace", "t.jsonl", "--requests-csv", "t.jsonl"], cut: None },
    Case {
        what: "two outputs to one file",
        args: &["--requests-csv", "a.csv", "--timeline-csv", "./a.csv"],
        cut: None,
    },
    Case { what: "an output in a missing folder", args: &["--requests-csv", "no/such/r.csv"], cut: None },
    Case { what: "a plot that is neither SVG nor PNG", args: &["--plot", "out.txt"], cut: None },
    // No output destroys something else: an output is a file, not an input, not another output.
    Case { what: "an output that is a folder", args: &["--requests-csv", "."], cut: None },
    Case { what: "a generated trace written to a folder", args: &["gen", "random", "-o", "."], cut: None },
    Case {
        what: "a sweep CSV that is the trace",
        args: &["sweep", "--trace", "t.jsonl", "--grid", "max-num-seqs=8,16", "--csv", "t.jsonl"],
        cut: None,
    },
    Case {
        what: "a sweep's CSV and heatmap to one file",
        args: &["sweep", "--grid", "max-num-seqs=8,16", "--csv", "x.svg", "--heatmap", "x.svg"],
        cut: None,
    },
    Case {
        what: "a shard's CSV that is not a file",
        args: &["sweep", "--grid", "max-num-seqs=8,16", "--shard", "0/2", "--csv", "/dev/null"],
        cut: None,
    },
    Case {
        what: "a plan plot that is the trace",
        args: &["plan", "--trace", "trace.svg", "--slo", "ttft_p99=2000", "--plot", "trace.svg"],
        cut: None,
    },
    Case {
        what: "an analysis plot that is the trace",
        args: &["analyze", "--trace", "trace.svg", "--plot", "trace.svg"],
        cut: None,
    },
    Case {
        what: "a validation CSV and plot to one file",
        args: &["validate", "--csv", "v.svg", "--plot", "v.svg"],
        cut: None,
    },
    Case {
        what: "a validation CSV over a case file",
        args: &["validate", "--cases-dir", "cases", "--csv", "cases/P001.toml"],
        cut: None,
    },
    Case {
        what: "a fitted profile over its --start",
        args: &["calibrate", "--fit", "--cases", "P001", "--start", "start.toml", "--out", "start.toml"],
        cut: None,
    },
    Case {
        what: "a fitted profile over its report",
        args: &["calibrate", "--report", "zero.json", "-o", "zero.json"],
        cut: None,
    },
    Case { what: "a merged CSV over a shard", args: &["merge", "s0.csv", "s1.csv", "--csv", "s0.csv"], cut: None },
    Case { what: "shards of different sweeps", args: &["merge", "s0.csv", "other1.csv", "--csv", "m.csv"], cut: None },
    Case { what: "a shard given twice", args: &["merge", "s0.csv", "s0.csv", "s1.csv", "--csv", "m.csv"], cut: None },
    Case { what: "a shard missing", args: &["merge", "s1.csv", "--csv", "m.csv"], cut: None },
    Case { what: "a shard without its sidecar", args: &["merge", "s0.csv", "bare.csv", "--csv", "m.csv"], cut: None },
    Case { what: "a block size of 0", args: &["cache", "--block", "0"], cut: None },
    Case { what: "a negative capacity", args: &["cache", "--capacity-tokens", "-5"], cut: None },
    // Nothing impossible is simulated (issue 28 §2).
    Case { what: "more GPUs than one node holds", args: &["--tp", "16"], cut: None },
    Case {
        what: "more GPUs than an NVL72 rack holds",
        args: &["--gpu", "gb200", "--model", "llama-3.1-70b", "--tp", "64", "--pp", "2"],
        cut: None,
    },
    Case {
        what: "KV heads that neither split nor replicate",
        args: &["--model", "qwen2.5-7b", "--tp", "7"],
        cut: None,
    },
    Case { what: "a KV budget larger than the GPU", args: &["--kv-cache-memory-bytes", "100000000000000"], cut: None },
    Case { what: "more KV blocks than the GPU holds", args: &["--num-gpu-blocks-override", "100000000"], cut: None },
    Case {
        what: "an SGLang pool above the profiled one (capped, with SGLang's warning)",
        args: &["--engine", "sglang", "--max-total-tokens", "100000000", "--num-prompts", "2"],
        cut: None,
    },
    Case {
        what: "a LightLLM pool larger than the GPU",
        args: &["--engine", "lightllm", "--max-total-tokens", "100000000"],
        cut: None,
    },
    Case {
        what: "no running requests allowed (SGLang)",
        args: &["--engine", "sglang", "--max-running-requests", "0"],
        cut: None,
    },
    Case { what: "a block size vLLM does not take", args: &["--block-size", "24"], cut: None },
    Case { what: "a GPU file with a NaN bandwidth", args: &["--gpu-file", "nan-bw.toml"], cut: None },
    Case { what: "a model file with head_dim 0", args: &["--model-file", "head-dim-0.toml"], cut: None },
    Case { what: "a model file with 0 layers", args: &["--model-file", "layers-0.toml"], cut: None },
    Case { what: "a model file with more KV heads than heads", args: &["--model-file", "kv-heads.toml"], cut: None },
    Case {
        what: "a model file with a negative parameter count",
        args: &["--model-file", "params-neg.toml"],
        cut: None,
    },
    Case { what: "a model file with max_context 0", args: &["--model-file", "context-0.toml"], cut: None },
    Case { what: "a GPU file with 0 memory", args: &["--gpu-file", "memory-0.toml"], cut: None },
    Case {
        what: "a network file with 0 NICs",
        args: &["--network-file", "nics-0.toml", "--tp", "16", "--nnodes", "2"],
        cut: None,
    },
    Case { what: "no prompts at all", args: &["--trace", "t.jsonl", "--num-prompts", "0"], cut: None },
    Case { what: "a GPU name that begins two", args: &["--gpu", "a100"], cut: None },
    Case { what: "gen random of no prompts", args: &["gen", "random", "--num-prompts", "0"], cut: None },
    Case {
        what: "more prompts than the trace holds (all sent once, said)",
        args: &["--trace", "t.jsonl", "--num-prompts", "100000"],
        cut: None,
    },
    // Calibration and validation accept only meaningful inputs (issue 28 §5).
    Case { what: "a report with 0 successful requests", args: &["calibrate", "--report", "zero.json"], cut: None },
    Case { what: "a report with a negative throughput", args: &["calibrate", "--report", "neg.json"], cut: None },
    Case { what: "a report with a negative rate", args: &["calibrate", "--report", "neg-rate.json"], cut: None },
    Case { what: "a report with a UTF-8 BOM (read)", args: &["calibrate", "--report", "bom.json"], cut: None },
    Case { what: "a JSON array of results", args: &["calibrate", "--report", "array.json"], cut: None },
    Case {
        what: "all-zero weights",
        args: &["calibrate", "--fit", "--cases", "P001", "--out", "p.toml", "--weights", "output_throughput=0"],
        cut: None,
    },
    Case {
        what: "a start file that is not a profile",
        args: &["calibrate", "--fit", "--cases", "P001", "--out", "p.toml", "--start", "t.jsonl"],
        cut: None,
    },
    Case { what: "vLLM's running limit on SGLang", args: &["--engine", "sglang", "--max-num-seqs", "4"], cut: None },
    Case { what: "SGLang's running limit on vLLM", args: &["--max-running-requests", "4"], cut: None },
    Case { what: "SGLang's schedule policy on vLLM", args: &["--schedule-policy", "lpm"], cut: None },
    Case {
        what: "SGLang's schedule policy at its default on vLLM",
        args: &["run", "--schedule-policy", "fcfs"],
        cut: None,
    },
    Case { what: "SGLang's memory share on vLLM", args: &["--mem-fraction-static", "0.8"], cut: None },
    Case {
        what: "vLLM's memory share on SGLang",
        args: &["--engine", "sglang", "--gpu-memory-utilization", "0.8"],
        cut: None,
    },
    Case {
        what: "vLLM's prefill cap on SGLang",
        args: &["--engine", "sglang", "--long-prefill-token-threshold", "512"],
        cut: None,
    },
    Case { what: "SGLang's DP attention on vLLM", args: &["--enable-dp-attention", "--tp", "2"], cut: None },
    Case {
        what: "vLLM's priority policy on SGLang",
        args: &["--engine", "sglang", "--scheduling-policy", "priority"],
        cut: None,
    },
    Case {
        what: "vLLM's priority policy on vLLM V0",
        args: &["--engine", "vllm-v0", "--scheduling-policy", "priority"],
        cut: None,
    },
    Case { what: "SGLang's priority scheduling on vLLM", args: &["--enable-priority-scheduling"], cut: None },
    Case { what: "SGLang's queue bound on vLLM", args: &["--max-queued-requests", "8"], cut: None },
    Case {
        what: "aborting on priorities with priority scheduling on",
        args: &["--engine", "sglang", "--enable-priority-scheduling", "--abort-on-priority-when-disabled"],
        cut: None,
    },
    Case { what: "a queue bound of 0", args: &["--engine", "sglang", "--max-queued-requests", "0"], cut: None },
    Case {
        what: "a queue bound with prefill/decode pools",
        args: &[
            "--engine",
            "sglang",
            "--max-queued-requests",
            "8",
            "--prefill-instances",
            "1",
            "--decode-instances",
            "1",
        ],
        cut: None,
    },
    Case {
        what: "SGLang's priority scheduling with LPM",
        args: &["--engine", "sglang", "--enable-priority-scheduling", "--schedule-policy", "lpm"],
        cut: None,
    },
    Case {
        what: "SGLang's priority scheduling before 0.5.3",
        args: &["--engine", "sglang", "--engine-version", "sglang@0.5.1", "--enable-priority-scheduling"],
        cut: None,
    },
    Case {
        what: "a preemption threshold without priority scheduling",
        args: &["--engine", "sglang", "--priority-scheduling-preemption-threshold", "5"],
        cut: None,
    },
    Case {
        what: "retraction by priority without priority scheduling",
        args: &["--engine", "sglang", "--retraction-policy", "priority"],
        cut: None,
    },
    Case {
        what: "a preemption threshold that is not an integer",
        args: &[
            "--engine",
            "sglang",
            "--enable-priority-scheduling",
            "--priority-scheduling-preemption-threshold",
            "1.5",
        ],
        cut: None,
    },
    Case { what: "CPU KV offloading of 0 GiB", args: &["--kv-offloading-size", "0"], cut: None },
    Case { what: "CPU KV offloading of a negative size", args: &["--kv-offloading-size", "-4"], cut: None },
    Case { what: "CPU KV offloading larger than any server", args: &["--kv-offloading-size", "1e9"], cut: None },
    Case {
        what: "CPU KV offloading on SGLang",
        args: &["--engine", "sglang", "--kv-offloading-size", "16"],
        cut: None,
    },
    Case {
        what: "CPU KV offloading on vLLM 0.18",
        args: &["--engine-version", "vllm@0.18", "--kv-offloading-size", "16"],
        cut: None,
    },
    Case {
        what: "the LMCache offloading backend",
        args: &["--kv-offloading-size", "16", "--kv-offloading-backend", "lmcache"],
        cut: None,
    },
    Case { what: "an offloading backend without a size", args: &["--kv-offloading-backend", "native"], cut: None },
    Case { what: "a host link without offloading", args: &["--host-link-gbps", "50"], cut: None },
    Case { what: "a host link of 0 GB/s", args: &["--kv-offloading-size", "16", "--host-link-gbps", "0"], cut: None },
    Case { what: "a HiCache ratio without HiCache", args: &["--engine", "sglang", "--hicache-ratio", "3"], cut: None },
    Case { what: "HiCache on vLLM", args: &["--enable-hierarchical-cache"], cut: None },
    Case {
        what: "HiCache on SGLang 0.5.1",
        args: &["--engine", "sglang", "--engine-version", "sglang@0.5.1", "--enable-hierarchical-cache"],
        cut: None,
    },
    Case {
        what: "HiCache without the radix cache",
        args: &["--engine", "sglang", "--policy", "none", "--enable-hierarchical-cache"],
        cut: None,
    },
    Case {
        what: "a HiCache ratio of 0",
        args: &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-ratio", "0"],
        cut: None,
    },
    Case {
        what: "a HiCache ratio larger than any server's memory",
        args: &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-ratio", "1000000"],
        cut: None,
    },
    Case {
        what: "a HiCache size larger than any server",
        args: &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-size", "1000000"],
        cut: None,
    },
    Case {
        what: "a HiCache storage tier without HiCache",
        args: &["--engine", "sglang", "--hicache-storage-backend", "file"],
        cut: None,
    },
    Case {
        what: "a storage prefetch policy without a storage tier",
        args: &[
            "--engine",
            "sglang",
            "--enable-hierarchical-cache",
            "--hicache-storage-prefetch-policy",
            "best_effort",
        ],
        cut: None,
    },
    Case {
        what: "a storage link of 0 GB/s",
        args: &[
            "--engine",
            "sglang",
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "file",
            "--storage-gbps",
            "0",
        ],
        cut: None,
    },
    Case {
        what: "a Mooncake segment size with the file backend",
        args: &["--engine", "sglang", "--hicache-storage-backend", "file", "--mooncake-global-segment-size", "64gb"],
        cut: None,
    },
    Case {
        what: "a Mooncake segment size that is not a size",
        args: &["--mooncake-global-segment-size", "lots"],
        cut: None,
    },
    Case {
        what: "a Mooncake segment smaller than one page",
        args: &[
            "--engine",
            "sglang",
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "mooncake",
            "--mooncake-global-segment-size",
            "1000",
        ],
        cut: None,
    },
    Case {
        what: "a storage extra config that is not JSON",
        args: &["--hicache-storage-backend-extra-config", "{threshold: 1}"],
        cut: None,
    },
    Case {
        what: "a storage extra config key that is not modelled",
        args: &["--hicache-storage-backend-extra-config", r#"{"eviction_ratio": 0.5}"#],
        cut: None,
    },
    Case {
        what: "the file backend's cap on the Mooncake Store",
        args: &[
            "--engine=sglang",
            "--hicache-storage-backend=mooncake",
            r#"--hicache-storage-backend-extra-config={"max_size":1}"#,
        ],
        cut: None,
    },
    Case {
        what: "a retention interval that is not a multiple of the block size",
        args: &["--model", "gpt-oss-20b", "--prefix-cache-retention-interval", "24"],
        cut: None,
    },
    Case {
        what: "a retention interval on a model without sliding-window layers",
        args: &["--prefix-cache-retention-interval", "64"],
        cut: None,
    },
    Case {
        what: "a retention interval that is not a number",
        args: &["--prefix-cache-retention-interval", "ten"],
        cut: None,
    },
    Case {
        what: "a sliding-window model on vLLM 0.18",
        args: &["--model", "gpt-oss-20b", "--engine-version", "vllm@0.18"],
        cut: None,
    },
    Case {
        what: "a host tier under LightLLM's token pool in `cache`",
        args: &["cache", "--policy", "paged,token", "--host-capacity-tokens", "1M"],
        cut: None,
    },
    Case {
        what: "an unlimited host tier in `cache`",
        args: &["cache", "--policy", "paged", "--host-capacity-tokens", "unlimited"],
        cut: None,
    },
    Case {
        what: "the hybrid KV cache manager on SGLang",
        args: &["--engine", "sglang", "--disable-hybrid-kv-cache-manager"],
        cut: None,
    },
    Case {
        what: "SGLang's window pool on vLLM",
        args: &["--model", "gpt-oss-20b", "--swa-full-tokens-ratio", "0.5"],
        cut: None,
    },
    Case {
        what: "a window-pool ratio above 1",
        args: &["--engine", "sglang", "--model", "gpt-oss-20b", "--swa-full-tokens-ratio", "1.5"],
        cut: None,
    },
    Case {
        what: "a window-pool ratio on a model without one",
        args: &["--engine", "sglang", "--model", "gemma-3-27b", "--swa-full-tokens-ratio", "0.5"],
        cut: None,
    },
    Case {
        what: "a window pool smaller than the window",
        args: &["--engine", "sglang", "--model", "gpt-oss-20b", "--max-total-tokens", "150"],
        cut: None,
    },
    Case {
        what: "HiCache under SGLang's window pool",
        args: &["--engine", "sglang", "--model", "gpt-oss-20b", "--enable-hierarchical-cache"],
        cut: None,
    },
    Case {
        what: "a model file with sliding layers and no window",
        args: &["--model-file", "no-window.toml"],
        cut: None,
    },
    Case { what: "a model file with a window no layer uses", args: &["--model-file", "stray-window.toml"], cut: None },
    Case {
        what: "a model file with linear layers and no state shape",
        args: &["--model-file", "no-linear-state.toml"],
        cut: None,
    },
    Case {
        what: "a model file with linear layers that share key heads unevenly",
        args: &["--model-file", "uneven-linear.toml"],
        cut: None,
    },
    Case {
        what: "a linear-attention model without the hybrid manager",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--disable-hybrid-kv-cache-manager"],
        cut: None,
    },
    Case {
        what: "a linear-attention model without chunked prefill",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--no-enable-chunked-prefill"],
        cut: None,
    },
    Case {
        what: "a linear-attention model on vLLM with a radix tree",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--policy", "radix"],
        cut: None,
    },
    Case {
        what: "a linear-attention model with speculative decoding",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--speculative-algorithm", "mtp"],
        cut: None,
    },
    Case {
        what: "a linear-attention model on vLLM 0.18",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--engine-version", "vllm@0.18"],
        cut: None,
    },
    Case {
        what: "a linear-attention model on an engine whose state cache is not modelled",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--engine", "lightllm"],
        cut: None,
    },
    Case {
        what: "an SSM state type for a model without linear layers",
        args: &["--model", "llama-3.1-8b", "--mamba-ssm-dtype", "float32"],
        cut: None,
    },
    Case {
        what: "SGLang's state pool on vLLM",
        args: &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--max-mamba-cache-size", "64"],
        cut: None,
    },
    Case {
        what: "a state-pool flag for a model without linear layers",
        args: &["--engine", "sglang", "--model", "llama-3.1-8b", "--mamba-full-memory-ratio", "0.5"],
        cut: None,
    },
    Case {
        what: "no state slots",
        args: &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--max-mamba-cache-size", "0"],
        cut: None,
    },
    Case {
        what: "a state-pool ratio of 0",
        args: &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--mamba-full-memory-ratio", "0"],
        cut: None,
    },
    Case {
        what: "no_buffer under the overlap scheduler",
        args: &[
            "--engine",
            "sglang",
            "--model",
            "qwen3-next-80b-a3b",
            "--tp",
            "4",
            "--mamba-radix-cache-strategy",
            "no_buffer",
        ],
        cut: None,
    },
    Case {
        what: "a state pool whose slots cap the requests at none",
        args: &[
            "--engine",
            "sglang",
            "--model",
            "qwen3-next-80b-a3b",
            "--tp",
            "4",
            "--disable-overlap-schedule",
            "--max-mamba-cache-size",
            "2",
        ],
        cut: None,
    },
    Case {
        what: "a state pool with HiCache",
        args: &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--enable-hierarchical-cache"],
        cut: None,
    },
    Case {
        what: "a state-pool ratio beside a slot count",
        args: &[
            "--engine",
            "sglang",
            "--model",
            "qwen3-next-80b-a3b",
            "--tp",
            "4",
            "--max-mamba-cache-size",
            "64",
            "--mamba-full-memory-ratio",
            "0.5",
        ],
        cut: None,
    },
    Case { what: "priority shares that do not add up", args: &["--priority-mix", "0:0.5,1:0.4"], cut: None },
    Case {
        what: "a priority mix over a trace's own priorities",
        args: &["--trace", "prio.jsonl", "--priority-mix", "0:0.5,1:0.5"],
        cut: None,
    },
    Case { what: "a priority outside 32 bits", args: &["cache", "--trace", "prio-big.jsonl"], cut: None },
    Case { what: "a LoRA flag without --enable-lora", args: &["--max-loras", "2"], cut: None },
    Case { what: "no LoRA slot", args: &["--enable-lora", "--max-loras", "0"], cut: None },
    Case {
        what: "fewer adapters in host memory than slots",
        args: &["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"],
        cut: None,
    },
    Case { what: "a LoRA rank vLLM does not take", args: &["--enable-lora", "--max-lora-rank", "12"], cut: None },
    Case { what: "an adapter registered twice", args: &["--enable-lora", "--lora-modules", "a", "a"], cut: None },
    Case { what: "LoRA on an MoE model", args: &["--enable-lora", "--model", "qwen3-30b-a3b"], cut: None },
    Case { what: "LoRA on SGLang", args: &["--engine", "sglang", "--enable-lora"], cut: None },
    Case {
        what: "a trace naming an adapter not served",
        args: &["--trace", "lora.jsonl", "--enable-lora", "--lora-modules", "a"],
        cut: None,
    },
    Case { what: "a trace naming adapters served without LoRA", args: &["--trace", "lora.jsonl"], cut: None },
    Case { what: "an adapter drawing rule without adapters", args: &["--lora-assignment", "round-robin"], cut: None },
    Case {
        what: "a negative scorer weight",
        args: &["--instances", "2", "--router", "llm-d", "--queue-scorer-weight", "-1"],
        cut: None,
    },
    Case {
        what: "a metrics scrape interval that is not a number",
        args: &["--refresh-metrics-interval-ms", "nan"],
        cut: None,
    },
    Case {
        what: "an SLO header for a router that reads none",
        args: &["--instances", "2", "--router", "llm-d", "--slo-ttft-ms", "500"],
        cut: None,
    },
    Case {
        what: "an SLO header given twice for one priority class",
        args: &["--instances", "2", "--router", "llm-d-predicted-latency", "--slo-ttft-ms", "0:500,0:900"],
        cut: None,
    },
    Case {
        what: "a TPOT SLO the predicted-latency profile does not read",
        args: &["--instances", "2", "--router", "llm-d-predicted-latency", "--slo-tpot-ms", "50"],
        cut: None,
    },
    Case {
        what: "a predictor that never retrains",
        args: &["--instances", "2", "--router", "llm-d-predicted-latency", "--latency-retraining-interval-s", "0"],
        cut: None,
    },
    Case {
        what: "a scorer weight the predicted-latency profile does not read",
        args: &["--instances", "2", "--router", "llm-d-predicted-latency", "--prefix-cache-scorer-weight", "5"],
        cut: None,
    },
    Case {
        what: "the predicted-latency profile over prefill/decode pools",
        args: &["--prefill-instances", "1", "--decode-instances", "1", "--router", "llm-d-predicted-latency"],
        cut: None,
    },
    Case {
        what: "KV events for a router that reads none",
        args: &["--instances", "2", "--kv-event-delay-ms", "10"],
        cut: None,
    },
    Case {
        what: "llm-d's precise scorer over SGLang's radix cache",
        args: &[
            "--engine",
            "sglang",
            "--instances",
            "2",
            "--router",
            "llm-d",
            "--precise-prefix-cache-scorer-weight",
            "1",
        ],
        cut: None,
    },
    Case {
        what: "KV events from SGLang's radix cache",
        args: &["--engine", "sglang", "--instances", "2", "--router", "kv-aware", "--kv-event-delay-ms", "10"],
        cut: None,
    },
    Case { what: "a migration limit without failures", args: &["--migration-limit", "1"], cut: None },
    Case {
        what: "a failure of an instance that does not exist",
        args: &["--instances", "2", "--fail-at", "10:2"],
        cut: None,
    },
    Case { what: "a failure time that is not a number", args: &["--fail-at", "ten:0"], cut: None },
    Case {
        what: "instance failures of prefill/decode pools",
        args: &["--fail-at", "10:0", "--prefill-instances", "1", "--decode-instances", "1"],
        cut: None,
    },
    Case { what: "a mean time between failures of 0", args: &["--mtbf-s", "0"], cut: None },
    Case { what: "a drain timeout without a rolling restart", args: &["--drain-timeout-s", "5"], cut: None },
    Case { what: "an autoscaling bound without autoscaling", args: &["--max-instances", "4"], cut: None },
    Case {
        what: "autoscaling without a most instances",
        args: &["--autoscale", "hpa", "--scale-metric", "waiting", "--scale-target", "2"],
        cut: None,
    },
    Case {
        what: "a KV-usage target given as a percentage",
        args: &["--autoscale", "hpa", "--max-instances", "4", "--scale-metric", "kv-usage", "--scale-target", "80"],
        cut: None,
    },
    Case {
        what: "autoscaling to zero instances",
        args: &[
            "--autoscale",
            "hpa",
            "--max-instances",
            "4",
            "--min-instances",
            "0",
            "--scale-metric",
            "waiting",
            "--scale-target",
            "2",
        ],
        cut: None,
    },
    Case { what: "an SLA planner target without autoscaling", args: &["--ttft", "500"], cut: None },
    Case {
        what: "the HPA's metric under the SLA planner",
        args: &["--autoscale", "sla", "--scale-metric", "waiting"],
        cut: None,
    },
    Case {
        what: "the SLA planner's default ARIMA predictor",
        args: &["--autoscale", "sla", "--load-predictor", "arima"],
        cut: None,
    },
    Case {
        what: "an SLA planner budget below one instance",
        args: &["--autoscale", "sla", "--tp", "4", "--max-gpu-budget", "2"],
        cut: None,
    },
    Case {
        what: "instance failures in an autoscaled fleet",
        args: &[
            "--autoscale",
            "hpa",
            "--max-instances",
            "4",
            "--scale-metric",
            "waiting",
            "--scale-target",
            "2",
            "--fail-at",
            "10:0",
        ],
        cut: None,
    },
    Case { what: "a fleet CSV without autoscaling", args: &["--fleet-csv", "fleet.csv"], cut: None },
    Case { what: "a goodput limit without its key", args: &["--goodput", "500"], cut: None },
    Case {
        what: "SGLang's prefill budget on LightLLM",
        args: &["--engine", "lightllm", "--max-prefill-tokens", "4096"],
        cut: None,
    },
    Case {
        what: "SGLang's running limit on TensorRT-LLM",
        args: &["--engine", "trtllm", "--max-running-requests", "8"],
        cut: None,
    },
    Case {
        what: "a grid pairing vLLM's running limit with SGLang",
        args: &["sweep", "--max-num-seqs", "4", "--grid", "engine=vllm,sglang"],
        cut: None,
    },
    Case { what: "a grid of deployment files", args: &["sweep", "--grid", "deployment=a.toml,b.toml"], cut: None },
    Case {
        what: "a deployment file giving SGLang vLLM's running limit",
        args: &["run", "--deployment", "sglang-seqs.toml"],
        cut: None,
    },
    Case { what: "a gate of NaN", args: &["validate", "--max-held-out-error", "nan"], cut: None },
    Case { what: "a gate of inf", args: &["validate", "--max-held-out-error", "inf"], cut: None },
    Case { what: "a data folder that does not exist", args: &["validate", "--data", "/nonexistent"], cut: None },
    // Messages a person can act on: encodings and odd bytes named, no Rust type names.
    Case { what: "a bzip2-compressed trace", args: &["cache", "--trace", "t.jsonl.bz2"], cut: None },
    Case { what: "a zstd-compressed trace", args: &["cache", "--trace", "t.jsonl.zst"], cut: None },
    Case { what: "an xz-compressed trace", args: &["cache", "--trace", "t.jsonl.xz"], cut: None },
    Case { what: "a zip archive", args: &["cache", "--trace", "t.zip"], cut: None },
    Case { what: "UTF-16 text with a byte-order mark", args: &["cache", "--trace", "utf16.jsonl"], cut: None },
    Case { what: "UTF-16 text without a byte-order mark", args: &["cache", "--trace", "utf16be.jsonl"], cut: None },
    Case { what: "a NUL byte in a line", args: &["cache", "--trace", "nul.jsonl"], cut: None },
    Case { what: "a Ctrl-Z at the end (DOS)", args: &["cache", "--trace", "ctrl-z.jsonl"], cut: None },
    Case { what: "lines ending in CR alone (old Mac)", args: &["cache", "--trace", "cr.jsonl"], cut: None },
    Case { what: "two files joined, a BOM on line 2", args: &["cache", "--trace", "joined.jsonl"], cut: None },
    Case { what: "a length that is text", args: &["cache", "--trace", "len-text.jsonl"], cut: None },
    Case { what: "a session that is a list", args: &["cache", "--trace", "session-list.jsonl"], cut: None },
    Case {
        what: "a line that is not an object",
        args: &["cache", "--trace", "number.jsonl", "--format", "native"],
        cut: None,
    },
    Case { what: "a native trace as a JSON array", args: &["cache", "--trace", "native-array.json"], cut: None },
    Case { what: "a CSV cell that is not a number", args: &["cache", "--trace", "cell.csv"], cut: None },
    Case { what: "a model file with a number as name", args: &["--model-file", "name-number.toml"], cut: None },
    Case { what: "a GPU file with text as memory", args: &["--gpu-file", "memory-text.toml"], cut: None },
    Case {
        what: "ShareGPT prompts the client's filter drops, --turns first given",
        args: &["--trace", "short.json", "--turns", "first"],
        cut: None,
    },
    Case {
        what: "ShareGPT single messages under a filter, --sharegpt-output-len given",
        args: &["--trace", "single.json", "--turns", "first", "--sharegpt-output-len", "8"],
        cut: None,
    },
    Case { what: "a negative value after a space", args: &["--kv-links", "-1"], cut: None },
    Case {
        what: "a negative tolerance after a space",
        args: &["plan", "--slo", "ttft_p99=100", "--tolerance", "-1"],
        cut: None,
    },
    Case { what: "a class SLO on the failed share", args: &["plan", "--slo", "failed_pct@0=1"], cut: None },
    Case {
        what: "a class SLO whose class is not an integer",
        args: &["plan", "--slo", "ttft_p99@high=100"],
        cut: None,
    },
    Case {
        what: "a class SLO for a class no request has",
        args: &["plan", "--slo", "ttft_p99@3=100", "--priority-mix", "0:0.5,1:0.5"],
        cut: None,
    },
    Case {
        what: "a sweep CSV row with a cell missing",
        args: &["merge", "shard.csv", "--csv", "merged.csv"],
        cut: None,
    },
];

/// A scratch folder with the input files the cases name (paths in messages stay relative).
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    w("empty.jsonl", b"");
    w("garbage.bin", b"\x1b[31mRED\x07\x00\xff\xfe\x1b]0;title\x07 more\x08\x08\n\x00\x01\x02");
    w("trace.svg", b"{\"prompt\": \"a\", \"output_len\": 2}\n");
    w("start.toml", b"");
    std::fs::create_dir_all(dir.join("cases")).unwrap();
    w("cases/P001.toml", b"case = \"P001\"\n");
    let sidecar = |shard: &str, rate: &str| {
        let sweep = format!(
            r#"{{"cachesim": "0.1.0", "base": ["--request-rate={rate}"], "grid": [["max-num-seqs", ["8", "16"]]], "zip": [], "points": 2}}"#
        );
        format!(r#"{{"shard": "{shard}", "sweep": {sweep}}}"#)
    };
    for (csv, shard, rate) in [("s0.csv", "0/2", "4"), ("s1.csv", "1/2", "4"), ("other1.csv", "1/2", "8")] {
        let point = &shard[..1];
        w(csv, format!("point,max-num-seqs,error\n{point},8,\n").as_bytes());
        w(&format!("{csv}.sweep.json"), sidecar(shard, rate).as_bytes());
    }
    w("bare.csv", b"point,max-num-seqs,error\n1,16,\n");
    w("bad.gz", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03this is not deflate data at all");
    let mut long = vec![b'{'];
    long.resize((65 << 20) + 2, b'a');
    w("long.jsonl", &long);
    let blank = vec![b'\n'; 2 << 20];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &blank).unwrap();
    w("blank.gz", &gz.finish().unwrap());
    w("spaces.json", format!("[{}]", " ".repeat(2 << 20)).as_bytes());
    let good = "{\"prompt\": \"hi\", \"output_len\": 3}";
    w("gap.jsonl", format!("{good}\n{}{{\"prompt\": 7, \"output_len\": 3}}\n", "\n".repeat(10_000)).as_bytes());
    let conv = "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}";
    let bad = "{\"conversations\": [{\"from\": \"robot\", \"value\": \"hi\"}]}";
    w("gap.json", format!("[{conv},{}{bad}]", " ".repeat(1 << 20)).as_bytes());
    w("late.csv", format!("{}TIMESTAMP,ContextTokens,GeneratedTokens\n", "\n".repeat(2 << 20)).as_bytes());
    w("far.jsonl", b"{\"timestamp\": 1e16, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n");
    w(
        "epoch.jsonl",
        b"{\"prompt\": \"a\", \"output_len\": 2, \"timestamp_ms\": 0}\n{\"prompt\": \"b\", \"output_len\": 2, \"timestamp_ms\": 1e13}\n",
    );
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/gsp.jsonl"), dir.join("t.jsonl")).unwrap();
    w(
        "prio.jsonl",
        b"{\"prompt\": \"a\", \"output_len\": 2}\n{\"prompt\": \"b\", \"output_len\": 2, \"priority\": 1}\n",
    );
    w("prio-big.jsonl", b"{\"prompt\": \"a\", \"output_len\": 2, \"priority\": 3000000000}\n");
    w(
        "lora.jsonl",
        b"{\"prompt\": \"a\", \"output_len\": 2}\n{\"prompt\": \"b\", \"output_len\": 2, \"lora\": \"sql\"}\n",
    );
    let gpu = |bw: &str, mem: &str| {
        format!("[[gpu]]\nname = \"mine\"\nmemory_gb = {mem}\nmem_bw_gbps = {bw}\nbf16_tflops = 200\npcie_gbps = 64\n")
    };
    w("nan-bw.toml", gpu("nan", "48").as_bytes());
    w("memory-0.toml", gpu("1000", "0").as_bytes());
    let model = |key: &str, v: &str| {
        common::catalog_table("model", "mine", &common::MODEL_KEYS, |_, k| (k == key).then(|| v.to_string()))
    };
    w("head-dim-0.toml", model("head_dim", "0").as_bytes());
    w("no-window.toml", format!("{}attention_pattern = [\"sliding\", \"full\"]\n", model("", "")).as_bytes());
    w("stray-window.toml", format!("{}sliding_window = 128\n", model("", "")).as_bytes());
    w("no-linear-state.toml", format!("{}attention_pattern = [\"linear\", \"full\"]\n", model("", "")).as_bytes());
    let linear = "linear_attention = { key_heads = 3, value_heads = 8, key_head_dim = 128, value_head_dim = 128, conv_kernel = 4 }";
    w(
        "uneven-linear.toml",
        format!("{}attention_pattern = [\"linear\", \"full\"]\n{linear}\n", model("", "")).as_bytes(),
    );
    w("layers-0.toml", model("layers", "0").as_bytes());
    w("kv-heads.toml", model("kv_heads", "64").as_bytes());
    w("params-neg.toml", model("params_b", "-8").as_bytes());
    w("context-0.toml", model("max_context", "0").as_bytes());
    w("nics-0.toml", b"[[network]]\nname = \"mine\"\nnics = 0\ngbps = 400\nlatency_us = 5\n");
    w("sglang-seqs.toml", b"engine = \"sglang\"\nmax-num-seqs = 4\n");
    let result = r#""backend": "vllm", "request_rate": 4.0, "duration": 2.5, "failed": 0, "median_ttft_ms": 30.5"#;
    w("zero.json", format!("{{{result}, \"completed\": 0, \"output_throughput\": 10}}\n").as_bytes());
    w("neg.json", format!("{{{result}, \"completed\": 5, \"output_throughput\": -10}}\n").as_bytes());
    w("neg-rate.json", b"{\"request_rate\": -2, \"completed\": 5, \"output_throughput\": 10}\n");
    w("bom.json", format!("\u{feff}{{{result}, \"completed\": 5, \"output_throughput\": 10}}\n").as_bytes());
    w("array.json", format!("[{{{result}, \"completed\": 5}}]\n").as_bytes());
    let rec = b"{\"prompt\": \"a\", \"output_len\": 2}";
    w("t.jsonl.bz2", b"BZh91AY&SY\x00\x01");
    w("t.jsonl.zst", b"\x28\xb5\x2f\xfd\x00\x01");
    w("t.jsonl.xz", b"\xfd7zXZ\x00\x00\x04");
    w("t.zip", b"PK\x03\x04\x14\x00");
    w("utf16.jsonl", b"\xff\xfe{\x00\"\x00p\x00\"\x00");
    w("utf16be.jsonl", b"\x00{\x00\"\x00p\x00r\x00o\x00m\x00p\x00t\x00\"");
    w("nul.jsonl", &[&rec[..], b"\n{\"prompt\": \"b\x00\", \"output_len\": 2}\n"].concat());
    w("ctrl-z.jsonl", &[&rec[..], b"\n\x1a"].concat());
    w("cr.jsonl", &[&rec[..], b"\r", &rec[..], b"\r"].concat());
    w("joined.jsonl", &[&rec[..], b"\n\xef\xbb\xbf", &rec[..], b"\n"].concat());
    w("len-text.jsonl", b"{\"prompt\": \"a\", \"output_len\": \"two\"}\n");
    w("session-list.jsonl", b"{\"prompt\": \"a\", \"output_len\": 2, \"session\": [1]}\n");
    w("number.jsonl", b"42\n");
    w("native-array.json", &[&b"["[..], &rec[..], b"]\n"].concat());
    w("cell.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,many,44\n");
    w("name-number.toml", b"[[model]]\nname = 5\n");
    w("memory-text.toml", gpu("1000", "\"lots\"").as_bytes());
    let talk = |msgs: &str| format!("[{{\"id\": \"a\", \"conversations\": [{msgs}]}}]");
    w("short.json", talk(r#"{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}"#).as_bytes());
    w("single.json", talk(r#"{"from": "human", "value": "a question"}"#).as_bytes());
    w("shard.csv", b"point,max-num-seqs,error\n0,8\n");
    dir
}

fn run_in(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cachesim")).args(args).current_dir(dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("").to_string();
    (out.status.code().unwrap_or(-1), first)
}

fn cell(s: &str) -> String {
    format!("`` {} ``", s.replace('|', "\\|"))
}

fn table() -> String {
    let dir = scratch("bad-input");
    let mut s = String::from(
        "# Bad input: what cachesim says\n\n\
         Each row is run by `cargo test --test suite bad_input::` (tests/suite/bad_input.rs), which fails when this\n\
         table and the binary disagree; `CACHESIM_BLESS=1 cargo test --test suite bad_input::` rewrites it.\n\
         Exit code 1 is an error of cachesim, 2 a command-line error (clap); the message is the first\n\
         line on stderr (…: the rest varies from run to run). Files named here are made by the test.\n\n\
         | input | command | exit | message |\n|---|---|---|---|\n",
    );
    for c in CASES {
        let (code, mut msg) = run_in(&dir, c.args);
        assert!(!msg.contains("panicked"), "{:?} panicked: {msg}", c.args);
        if let Some(cut) = c.cut {
            if let Some(i) = msg.find(cut) {
                msg.truncate(i + cut.len());
                msg.push_str(" …");
            }
        }
        s.push_str(&format!(
            "| {} | {} | {code} | {} |\n",
            c.what,
            cell(&format!("cachesim {}", c.args.join(" "))),
            cell(&msg)
        ));
    }
    s
}

#[test]
fn bad_input_table_matches_the_binary() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/bad-input.md");
    let got = table();
    if std::env::var("CACHESIM_BLESS").as_deref() == Ok("1") {
        std::fs::write(&doc, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&doc).unwrap_or_default();
    for (g, w) in got.lines().zip(want.lines()) {
        assert_eq!(
            g, w,
            "docs/reference/bad-input.md is out of date (CACHESIM_BLESS=1 cargo test --test suite bad_input::)"
        );
    }
    assert_eq!(got.lines().count(), want.lines().count(), "docs/reference/bad-input.md has a different number of rows");
}

/// A run that fails after it started leaves an existing output file as it was, and no temporary
/// files beside it.
#[test]
fn a_failed_run_keeps_existing_outputs() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("keep-outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.csv"), "precious").unwrap();
    let (code, msg) = run_in(&dir, &["--request-rate", "1e-300", "--requests-csv", "keep.csv", "--plot", "keep.svg"]);
    assert_eq!(code, 1, "{msg}");
    assert_eq!(std::fs::read_to_string(dir.join("keep.csv")).unwrap(), "precious");
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names, ["keep.csv"]);
    // A run that succeeds replaces it.
    let (code, msg) = run_in(&dir, &["--num-prompts", "4", "--requests-csv", "keep.csv"]);
    assert_eq!(code, 0, "{msg}");
    assert!(std::fs::read_to_string(dir.join("keep.csv")).unwrap().starts_with("id,send_s"));
}

/// An output that is not a regular file is written into, never replaced by a temporary file's
/// rename: `/dev/null` stays a device and a FIFO a FIFO, its reader getting the CSV; a symbolic
/// link to a regular file stays a link, the file it leads to replaced (and no temporary left).
#[cfg(unix)]
#[test]
fn outputs_write_into_devices_and_fifos_and_through_links() {
    use std::os::unix::fs::FileTypeExt;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("special-outputs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (code, msg) = run_in(&dir, &["--num-prompts", "4", "--requests-csv", "/dev/null"]);
    assert_eq!(code, 0, "{msg}");
    assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device(), "/dev/null was replaced");
    std::fs::write(dir.join("real.csv"), "old").unwrap();
    std::os::unix::fs::symlink("real.csv", dir.join("link.csv")).unwrap();
    let (code, msg) = run_in(&dir, &["--num-prompts", "4", "--requests-csv", "link.csv"]);
    assert_eq!(code, 0, "{msg}");
    assert!(std::fs::symlink_metadata(dir.join("link.csv")).unwrap().file_type().is_symlink(), "the link was replaced");
    assert!(std::fs::read_to_string(dir.join("real.csv")).unwrap().starts_with("id,send_s"));
    let mut names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["link.csv", "real.csv"]);
    let fifo = dir.join("fifo.csv");
    if !Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped the FIFO: mkfifo is not available");
        return;
    }
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo))
    };
    let (code, msg) = run_in(&dir, &["--num-prompts", "4", "--requests-csv", "fifo.csv"]);
    if code != 0 {
        // Unblock the reader before failing.
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    }
    let got = reader.join().unwrap().unwrap();
    assert_eq!(code, 0, "{msg}");
    assert!(got.starts_with("id,send_s"), "{got}");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
}

/// Errors print the OS message once, and control bytes never reach the terminal raw.
#[test]
fn error_messages_are_printed_once_and_escaped() {
    let dir = scratch("bad-input-messages");
    let out = Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["cache", "--trace", "missing.jsonl"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["cache", "--trace", "garbage.bin"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(!out.stderr.iter().any(|&b| b == 0x1b || b == 0x07 || b == 0 || b == 0x08), "{:?}", out.stderr);
    assert!(String::from_utf8_lossy(&out.stderr).contains("\\u{1b}[31mRED"));
    let out = Command::new(env!("CARGO_BIN_EXE_cachesim"))
        .args(["cache", "--trace", "bad.gz"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let first_word = err.trim_start_matches("error: cannot load the trace: bad.gz: ");
    assert_eq!(err.matches(first_word.trim()).count(), 1, "{err}");
}
