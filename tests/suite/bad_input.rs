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

/// A row whose whole message is compared.
const fn case(what: &'static str, args: &'static [&'static str]) -> Case {
    Case { what, args, cut: None }
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
    case("a missing file", &["cache", "--trace", "missing.jsonl"]),
    case("a folder", &["cache", "--trace", "."]),
    case("an empty file", &["cache", "--trace", "empty.jsonl"]),
    case("binary garbage (terminal escapes, NUL)", &["cache", "--trace", "garbage.bin"]),
    case("a corrupt gzip file", &["cache", "--trace", "bad.gz"]),
    case("a 65 MiB line", &["cache", "--trace", "long.jsonl"]),
    case("a gzip of 2 MiB of newlines (read without storing them)", &["cache", "--trace", "blank.gz"]),
    case("2 MiB of spaces inside `[ ]`", &["cache", "--trace", "spaces.json"]),
    case(
        "a trace over --max-trace-bytes (2 MiB of newlines under a 1M cap)",
        &["cache", "--trace", "blank.gz", "--max-trace-bytes", "1M"],
    ),
    case("a bad line after 10,000 blank lines (its own line number)", &["cache", "--trace", "gap.jsonl"]),
    case("a bad record after 1 MiB of spaces in an array (its own byte offset)", &["cache", "--trace", "gap.json"]),
    case("a CSV header after 2 MiB of blank lines", &["cache", "--trace", "late.csv"]),
    case("a --max-trace-bytes that is not a size", &["cache", "--max-trace-bytes", "lots"]),
    case("a grid of 20,000 points (over --max-points)", &["sweep", "--grid", "max-num-seqs=1..20000"]),
    case("a time stamp of 1e16 ms (Mooncake)", &["cache", "--trace", "far.jsonl"]),
    case("a trace spanning 317 years (1e13 ms)", &["--trace", "epoch.jsonl"]),
    case("a time scale that stretches the sample past 1e12 s", &["--time-scale", "1e12"]),
    case("a rate that sends the last request after 1e300 s", &["--request-rate", "1e-300"]),
    case("a rate of 0", &["--request-rate", "0"]),
    case("a negative time scale", &["--time-scale", "-1"]),
    case("a negative burstiness", &["--request-rate", "4", "--burstiness", "-2"]),
    case("no running requests allowed", &["--max-num-seqs", "0"]),
    case("a negative integer", &["--max-num-seqs", "-1"]),
    case("a token budget below the request limit", &["--max-num-seqs", "64", "--max-num-batched-tokens", "32"]),
    case(
        "a token budget of 1 (vLLM lowers max_num_seqs; said, then runs)",
        &["--max-num-batched-tokens", "1", "--num-prompts", "2"],
    ),
    case("an activation peak larger than the GPU", &["--activation-peak-gib", "1000"]),
    case("a negative activation peak", &["--activation-peak-gib", "-1"]),
    case("a memory share above 1", &["--gpu-memory-utilization", "1.5"]),
    case("a model that does not fit", &["--model", "llama-3.1-70b", "--gpu", "a10"]),
    case("one KV block", &["--num-gpu-blocks-override", "1"]),
    case("heads that do not split", &["--tp", "3"]),
    case("a missing model file", &["--model-file", "missing.toml"]),
    case("an output that is the input", &["--trace", "t.jsonl", "--requests-csv", "t.jsonl"]),
    case("two outputs to one file", &["--requests-csv", "a.csv", "--timeline-csv", "./a.csv"]),
    case("an output in a missing folder", &["--requests-csv", "no/such/r.csv"]),
    case("a plot that is neither SVG nor PNG", &["--plot", "out.txt"]),
    // No output destroys something else: an output is a file, not an input, not another output.
    case("an output that is a folder", &["--requests-csv", "."]),
    case("a generated trace written to a folder", &["gen", "random", "-o", "."]),
    case(
        "a sweep CSV that is the trace",
        &["sweep", "--trace", "t.jsonl", "--grid", "max-num-seqs=8,16", "--csv", "t.jsonl"],
    ),
    case(
        "a sweep's CSV and heatmap to one file",
        &["sweep", "--grid", "max-num-seqs=8,16", "--csv", "x.svg", "--heatmap", "x.svg"],
    ),
    case(
        "a shard's CSV that is not a file",
        &["sweep", "--grid", "max-num-seqs=8,16", "--shard", "0/2", "--csv", "/dev/null"],
    ),
    case(
        "a plan plot that is the trace",
        &["plan", "--trace", "trace.svg", "--slo", "ttft_p99=2000", "--plot", "trace.svg"],
    ),
    case("an analysis plot that is the trace", &["analyze", "--trace", "trace.svg", "--plot", "trace.svg"]),
    case("a validation CSV and plot to one file", &["validate", "--csv", "v.svg", "--plot", "v.svg"]),
    case("a validation CSV over a case file", &["validate", "--cases-dir", "cases", "--csv", "cases/P001.toml"]),
    case(
        "a fitted profile over its --start",
        &["calibrate", "--fit", "--cases", "P001", "--start", "start.toml", "--out", "start.toml"],
    ),
    case("a fitted profile over its report", &["calibrate", "--report", "zero.json", "-o", "zero.json"]),
    case("a merged CSV over a shard", &["merge", "s0.csv", "s1.csv", "--csv", "s0.csv"]),
    case("shards of different sweeps", &["merge", "s0.csv", "other1.csv", "--csv", "m.csv"]),
    case("a shard given twice", &["merge", "s0.csv", "s0.csv", "s1.csv", "--csv", "m.csv"]),
    case("a shard missing", &["merge", "s1.csv", "--csv", "m.csv"]),
    case("a shard without its sidecar", &["merge", "s0.csv", "bare.csv", "--csv", "m.csv"]),
    case("a block size of 0", &["cache", "--block", "0"]),
    case("a negative capacity", &["cache", "--capacity-tokens", "-5"]),
    // Nothing impossible is simulated (issue 28 §2).
    case("more GPUs than one node holds", &["--tp", "16"]),
    case(
        "more GPUs than an NVL72 rack holds",
        &["--gpu", "gb200", "--model", "llama-3.1-70b", "--tp", "64", "--pp", "2"],
    ),
    case("KV heads that neither split nor replicate", &["--model", "qwen2.5-7b", "--tp", "7"]),
    case("a KV budget larger than the GPU", &["--kv-cache-memory-bytes", "100000000000000"]),
    case("more KV blocks than the GPU holds", &["--num-gpu-blocks-override", "100000000"]),
    case(
        "an SGLang pool above the profiled one (capped, with SGLang's warning)",
        &["--engine", "sglang", "--max-total-tokens", "100000000", "--num-prompts", "2"],
    ),
    case("a LightLLM pool larger than the GPU", &["--engine", "lightllm", "--max-total-tokens", "100000000"]),
    case("no running requests allowed (SGLang)", &["--engine", "sglang", "--max-running-requests", "0"]),
    case("a block size vLLM does not take", &["--block-size", "24"]),
    case("a GPU file with a NaN bandwidth", &["--gpu-file", "nan-bw.toml"]),
    case("a model file with head_dim 0", &["--model-file", "head-dim-0.toml"]),
    case("a model file with 0 layers", &["--model-file", "layers-0.toml"]),
    case("a model file with more KV heads than heads", &["--model-file", "kv-heads.toml"]),
    case("a model file with a negative parameter count", &["--model-file", "params-neg.toml"]),
    case("a model file with max_context 0", &["--model-file", "context-0.toml"]),
    case("a GPU file with 0 memory", &["--gpu-file", "memory-0.toml"]),
    case("a network file with 0 NICs", &["--network-file", "nics-0.toml", "--tp", "16", "--nnodes", "2"]),
    case("no prompts at all", &["--trace", "t.jsonl", "--num-prompts", "0"]),
    case("a GPU name that begins two", &["--gpu", "a100"]),
    case("gen random of no prompts", &["gen", "random", "--num-prompts", "0"]),
    case("more prompts than the trace holds (all sent once, said)", &["--trace", "t.jsonl", "--num-prompts", "100000"]),
    // Calibration and validation accept only meaningful inputs (issue 28 §5).
    case("a report with 0 successful requests", &["calibrate", "--report", "zero.json"]),
    case("a report with a negative throughput", &["calibrate", "--report", "neg.json"]),
    case("a report with a negative rate", &["calibrate", "--report", "neg-rate.json"]),
    case("a report with a UTF-8 BOM (read)", &["calibrate", "--report", "bom.json"]),
    case("a JSON array of results", &["calibrate", "--report", "array.json"]),
    case(
        "all-zero weights",
        &["calibrate", "--fit", "--cases", "P001", "--out", "p.toml", "--weights", "output_throughput=0"],
    ),
    case(
        "a start file that is not a profile",
        &["calibrate", "--fit", "--cases", "P001", "--out", "p.toml", "--start", "t.jsonl"],
    ),
    case("vLLM's running limit on SGLang", &["--engine", "sglang", "--max-num-seqs", "4"]),
    case("SGLang's running limit on vLLM", &["--max-running-requests", "4"]),
    case("SGLang's schedule policy on vLLM", &["--schedule-policy", "lpm"]),
    case("SGLang's schedule policy at its default on vLLM", &["run", "--schedule-policy", "fcfs"]),
    case("SGLang's memory share on vLLM", &["--mem-fraction-static", "0.8"]),
    case("vLLM's memory share on SGLang", &["--engine", "sglang", "--gpu-memory-utilization", "0.8"]),
    case("vLLM's prefill cap on SGLang", &["--engine", "sglang", "--long-prefill-token-threshold", "512"]),
    case("SGLang's DP attention on vLLM", &["--enable-dp-attention", "--tp", "2"]),
    case("vLLM's priority policy on SGLang", &["--engine", "sglang", "--scheduling-policy", "priority"]),
    case("vLLM's priority policy on vLLM V0", &["--engine", "vllm-v0", "--scheduling-policy", "priority"]),
    case("SGLang's priority scheduling on vLLM", &["--enable-priority-scheduling"]),
    case("SGLang's queue bound on vLLM", &["--max-queued-requests", "8"]),
    case(
        "aborting on priorities with priority scheduling on",
        &["--engine", "sglang", "--enable-priority-scheduling", "--abort-on-priority-when-disabled"],
    ),
    case("a queue bound of 0", &["--engine", "sglang", "--max-queued-requests", "0"]),
    case(
        "a queue bound with prefill/decode pools",
        &["--engine", "sglang", "--max-queued-requests", "8", "--prefill-instances", "1", "--decode-instances", "1"],
    ),
    case(
        "SGLang's priority scheduling with LPM",
        &["--engine", "sglang", "--enable-priority-scheduling", "--schedule-policy", "lpm"],
    ),
    case(
        "SGLang's priority scheduling before 0.5.3",
        &["--engine", "sglang", "--engine-version", "sglang@0.5.1", "--enable-priority-scheduling"],
    ),
    case(
        "a preemption threshold without priority scheduling",
        &["--engine", "sglang", "--priority-scheduling-preemption-threshold", "5"],
    ),
    case(
        "retraction by priority without priority scheduling",
        &["--engine", "sglang", "--retraction-policy", "priority"],
    ),
    case(
        "a preemption threshold that is not an integer",
        &["--engine", "sglang", "--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "1.5"],
    ),
    case("CPU KV offloading of 0 GiB", &["--kv-offloading-size", "0"]),
    case("CPU KV offloading of a negative size", &["--kv-offloading-size", "-4"]),
    case("CPU KV offloading larger than any server", &["--kv-offloading-size", "1e9"]),
    case("CPU KV offloading on SGLang", &["--engine", "sglang", "--kv-offloading-size", "16"]),
    case("CPU KV offloading on vLLM 0.18", &["--engine-version", "vllm@0.18", "--kv-offloading-size", "16"]),
    case(
        "the LMCache offloading backend on vLLM 0.33",
        &["--kv-offloading-size", "16", "--kv-offloading-backend", "lmcache"],
    ),
    case("an offloading backend without a size", &["--kv-offloading-backend", "native"]),
    case("an LMCache disk without LMCache", &["--kv-offloading-size", "16", "--lmcache-max-local-disk-size", "100"]),
    case(
        "an LMCache chunk of no whole GPU blocks",
        &[
            "--engine-version",
            "vllm@0.18",
            "--kv-offloading-size",
            "16",
            "--kv-offloading-backend",
            "lmcache",
            "--lmcache-chunk-size",
            "100",
        ],
    ),
    case(
        "an LMCache disk of 0 GiB",
        &[
            "--engine-version",
            "vllm@0.18",
            "--kv-offloading-size",
            "16",
            "--kv-offloading-backend",
            "lmcache",
            "--lmcache-max-local-disk-size",
            "0",
        ],
    ),
    case(
        "an LMCache disk rate without a disk",
        &[
            "--engine-version",
            "vllm@0.18",
            "--kv-offloading-size",
            "16",
            "--kv-offloading-backend",
            "lmcache",
            "--lmcache-disk-gbps",
            "5",
        ],
    ),
    case(
        "an LMCache remote server of another kind",
        &["--kv-offloading-backend", "lmcache", "--lmcache-remote-url", "redis://cache:6379"],
    ),
    case(
        "an LMCache remote URL without a port",
        &["--kv-offloading-backend", "lmcache", "--lmcache-remote-url", "lm://cache"],
    ),
    case(
        "an LMCache remote round trip without a server",
        &["--kv-offloading-backend", "lmcache", "--lmcache-remote-rtt-us", "50"],
    ),
    case(
        "an LMCache remote server of no bandwidth",
        &[
            "--kv-offloading-backend",
            "lmcache",
            "--lmcache-remote-url",
            "lm://cache:65432",
            "--lmcache-remote-gbps",
            "0",
        ],
    ),
    case(
        "an LMCache remote server without LMCache",
        &["--kv-offloading-size", "16", "--lmcache-remote-url", "lm://h:1"],
    ),
    case("an LMCache flag on SGLang", &["--engine", "sglang", "--lmcache-chunk-size", "256"]),
    case("a cache replay's LMCache without a host tier", &["cache", "--kv-offloading-backend", "lmcache"]),
    case(
        "a cache replay's disk without LMCache",
        &["cache", "--policy", "paged", "--host-capacity-tokens", "1M", "--disk-capacity-tokens", "16M"],
    ),
    case(
        "a cache replay's LMCache under the radix cache",
        &["cache", "--policy", "radix", "--host-capacity-tokens", "1M", "--kv-offloading-backend", "lmcache"],
    ),
    case(
        "a cache replay's LMCache chunk of no whole blocks",
        &[
            "cache",
            "--policy",
            "paged",
            "--host-capacity-tokens",
            "1M",
            "--kv-offloading-backend",
            "lmcache",
            "--lmcache-chunk-size",
            "100",
        ],
    ),
    case("a host link without offloading", &["--host-link-gbps", "50"]),
    case("a host link of 0 GB/s", &["--kv-offloading-size", "16", "--host-link-gbps", "0"]),
    case("a HiCache ratio without HiCache", &["--engine", "sglang", "--hicache-ratio", "3"]),
    case("HiCache on vLLM", &["--enable-hierarchical-cache"]),
    case(
        "HiCache on SGLang 0.5.1",
        &["--engine", "sglang", "--engine-version", "sglang@0.5.1", "--enable-hierarchical-cache"],
    ),
    case("HiCache without the radix cache", &["--engine", "sglang", "--policy", "none", "--enable-hierarchical-cache"]),
    case("a HiCache ratio of 0", &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-ratio", "0"]),
    case(
        "a HiCache ratio larger than any server's memory",
        &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-ratio", "1000000"],
    ),
    case(
        "a HiCache size larger than any server",
        &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-size", "1000000"],
    ),
    case("a HiCache storage tier without HiCache", &["--engine", "sglang", "--hicache-storage-backend", "file"]),
    case(
        "a storage prefetch policy without a storage tier",
        &["--engine", "sglang", "--enable-hierarchical-cache", "--hicache-storage-prefetch-policy", "best_effort"],
    ),
    case(
        "a storage link of 0 GB/s",
        &[
            "--engine",
            "sglang",
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "file",
            "--storage-gbps",
            "0",
        ],
    ),
    case(
        "a Mooncake segment size with the file backend",
        &["--engine", "sglang", "--hicache-storage-backend", "file", "--mooncake-global-segment-size", "64gb"],
    ),
    case("a Mooncake segment size that is not a size", &["--mooncake-global-segment-size", "lots"]),
    case(
        "a Mooncake segment smaller than one page",
        &[
            "--engine",
            "sglang",
            "--enable-hierarchical-cache",
            "--hicache-storage-backend",
            "mooncake",
            "--mooncake-global-segment-size",
            "1000",
        ],
    ),
    case("a storage extra config that is not JSON", &["--hicache-storage-backend-extra-config", "{threshold: 1}"]),
    case(
        "a storage extra config key that is not modelled",
        &["--hicache-storage-backend-extra-config", r#"{"eviction_ratio": 0.5}"#],
    ),
    case(
        "the file backend's cap on the Mooncake Store",
        &[
            "--engine=sglang",
            "--hicache-storage-backend=mooncake",
            r#"--hicache-storage-backend-extra-config={"max_size":1}"#,
        ],
    ),
    case(
        "a retention interval that is not a multiple of the block size",
        &["--model", "gpt-oss-20b", "--prefix-cache-retention-interval", "24"],
    ),
    case("a retention interval on a model without sliding-window layers", &["--prefix-cache-retention-interval", "64"]),
    case("a retention interval that is not a number", &["--prefix-cache-retention-interval", "ten"]),
    case("a sliding-window model on vLLM 0.18", &["--model", "gpt-oss-20b", "--engine-version", "vllm@0.18"]),
    case(
        "a model whose every layer slides on vLLM 0.18",
        &["--model", "mistral-7b-v0.1", "--engine-version", "vllm@0.18"],
    ),
    case(
        "a window-pool ratio for a model SGLang serves with one pool (every layer slides)",
        &["--engine", "sglang", "--model", "mistral-7b-v0.1", "--swa-full-tokens-ratio", "0.5"],
    ),
    case(
        "a host tier under LightLLM's token pool in `cache`",
        &["cache", "--policy", "paged,token", "--host-capacity-tokens", "1M"],
    ),
    case("an unlimited host tier in `cache`", &["cache", "--policy", "paged", "--host-capacity-tokens", "unlimited"]),
    case("the hybrid KV cache manager on SGLang", &["--engine", "sglang", "--disable-hybrid-kv-cache-manager"]),
    case("SGLang's window pool on vLLM", &["--model", "gpt-oss-20b", "--swa-full-tokens-ratio", "0.5"]),
    case(
        "a window-pool ratio above 1",
        &["--engine", "sglang", "--model", "gpt-oss-20b", "--swa-full-tokens-ratio", "1.5"],
    ),
    case(
        "a window-pool ratio on a model without one",
        &["--engine", "sglang", "--model", "gemma-3-27b", "--swa-full-tokens-ratio", "0.5"],
    ),
    case(
        "a window pool smaller than the window",
        &["--engine", "sglang", "--model", "gpt-oss-20b", "--max-total-tokens", "150"],
    ),
    case(
        "HiCache under SGLang's window pool",
        &["--engine", "sglang", "--model", "gpt-oss-20b", "--enable-hierarchical-cache"],
    ),
    case("a model file with sliding layers and no window", &["--model-file", "no-window.toml"]),
    case("a model file with a window no layer uses", &["--model-file", "stray-window.toml"]),
    case("a model file with linear layers and no state shape", &["--model-file", "no-linear-state.toml"]),
    case("a model file with linear layers that share key heads unevenly", &["--model-file", "uneven-linear.toml"]),
    case(
        "a linear-attention model without the hybrid manager",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--disable-hybrid-kv-cache-manager"],
    ),
    case(
        "a linear-attention model without chunked prefill",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--no-enable-chunked-prefill"],
    ),
    case(
        "a linear-attention model on vLLM with a radix tree",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--policy", "radix"],
    ),
    case(
        "a linear-attention model with speculative decoding",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--speculative-algorithm", "mtp"],
    ),
    case(
        "a linear-attention model on vLLM 0.18",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--engine-version", "vllm@0.18"],
    ),
    case(
        "a linear-attention model on an engine whose state cache is not modelled",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--engine", "lightllm"],
    ),
    case(
        "an SSM state type for a model without linear layers",
        &["--model", "llama-3.1-8b", "--mamba-ssm-dtype", "float32"],
    ),
    case(
        "SGLang's state pool on vLLM",
        &["--model", "qwen3-next-80b-a3b", "--tp", "4", "--max-mamba-cache-size", "64"],
    ),
    case(
        "a state-pool flag for a model without linear layers",
        &["--engine", "sglang", "--model", "llama-3.1-8b", "--mamba-full-memory-ratio", "0.5"],
    ),
    case(
        "no state slots",
        &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--max-mamba-cache-size", "0"],
    ),
    case(
        "a state-pool ratio of 0",
        &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--mamba-full-memory-ratio", "0"],
    ),
    case(
        "no_buffer under the overlap scheduler",
        &[
            "--engine",
            "sglang",
            "--model",
            "qwen3-next-80b-a3b",
            "--tp",
            "4",
            "--mamba-radix-cache-strategy",
            "no_buffer",
        ],
    ),
    case(
        "a state pool whose slots cap the requests at none",
        &[
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
    ),
    case(
        "a state pool with HiCache",
        &["--engine", "sglang", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--enable-hierarchical-cache"],
    ),
    case(
        "a state-pool ratio beside a slot count",
        &[
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
    ),
    case("priority shares that do not add up", &["--priority-mix", "0:0.5,1:0.4"]),
    case("a priority mix over a trace's own priorities", &["--trace", "prio.jsonl", "--priority-mix", "0:0.5,1:0.5"]),
    case("a priority outside 32 bits", &["cache", "--trace", "prio-big.jsonl"]),
    case("a LoRA flag without --enable-lora", &["--max-loras", "2"]),
    case("no LoRA slot", &["--enable-lora", "--max-loras", "0"]),
    case("fewer adapters in host memory than slots", &["--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"]),
    case("a LoRA rank vLLM does not take", &["--enable-lora", "--max-lora-rank", "12"]),
    case("an adapter registered twice", &["--enable-lora", "--lora-modules", "a", "a"]),
    case("LoRA on an MoE model", &["--enable-lora", "--model", "qwen3-30b-a3b"]),
    case("LoRA on SGLang", &["--engine", "sglang", "--enable-lora"]),
    case("a trace naming an adapter not served", &["--trace", "lora.jsonl", "--enable-lora", "--lora-modules", "a"]),
    case("a trace naming adapters served without LoRA", &["--trace", "lora.jsonl"]),
    case("an adapter drawing rule without adapters", &["--lora-assignment", "round-robin"]),
    case("a negative scorer weight", &["--instances", "2", "--router", "llm-d", "--queue-scorer-weight", "-1"]),
    case("a metrics scrape interval that is not a number", &["--refresh-metrics-interval-ms", "nan"]),
    case("an llm-d scorer weight for another router", &["--instances", "2", "--no-hit-lru-scorer-weight", "2"]),
    case(
        "a CPU-tier prefix producer's size without the producer",
        &["--instances", "2", "--router", "llm-d", "--cpu-lru-capacity-per-server", "82000"],
    ),
    case(
        "an SLO header for a router that reads none",
        &["--instances", "2", "--router", "llm-d", "--slo-ttft-ms", "500"],
    ),
    case(
        "an SLO header given twice for one priority class",
        &["--instances", "2", "--router", "llm-d-predicted-latency", "--slo-ttft-ms", "0:500,0:900"],
    ),
    case(
        "a TPOT SLO the predicted-latency profile does not read",
        &["--instances", "2", "--router", "llm-d-predicted-latency", "--slo-tpot-ms", "50"],
    ),
    case(
        "a predictor that never retrains",
        &["--instances", "2", "--router", "llm-d-predicted-latency", "--latency-retraining-interval-s", "0"],
    ),
    case(
        "a scorer weight the predicted-latency profile does not read",
        &["--instances", "2", "--router", "llm-d-predicted-latency", "--prefix-cache-scorer-weight", "5"],
    ),
    case(
        "the predicted-latency profile over prefill/decode pools",
        &["--prefill-instances", "1", "--decode-instances", "1", "--router", "llm-d-predicted-latency"],
    ),
    case("KV events for a router that reads none", &["--instances", "2", "--kv-event-delay-ms", "10"]),
    case(
        "llm-d's precise scorer over SGLang's radix cache",
        &["--engine", "sglang", "--instances", "2", "--router", "llm-d", "--precise-prefix-cache-scorer-weight", "1"],
    ),
    case(
        "KV events from SGLang's radix cache",
        &["--engine", "sglang", "--instances", "2", "--router", "kv-aware", "--kv-event-delay-ms", "10"],
    ),
    case("a migration limit without failures", &["--migration-limit", "1"]),
    case("a failure of an instance that does not exist", &["--instances", "2", "--fail-at", "10:2"]),
    case("a failure time that is not a number", &["--fail-at", "ten:0"]),
    case(
        "instance failures of prefill/decode pools",
        &["--fail-at", "10:0", "--prefill-instances", "1", "--decode-instances", "1"],
    ),
    case("a mean time between failures of 0", &["--mtbf-s", "0"]),
    case("a drain timeout without a rolling restart", &["--drain-timeout-s", "5"]),
    case("an autoscaling bound without autoscaling", &["--max-instances", "4"]),
    case(
        "autoscaling without a most instances",
        &["--autoscale", "hpa", "--scale-metric", "waiting", "--scale-target", "2"],
    ),
    case(
        "a KV-usage target given as a percentage",
        &["--autoscale", "hpa", "--max-instances", "4", "--scale-metric", "kv-usage", "--scale-target", "80"],
    ),
    case(
        "autoscaling to zero instances",
        &[
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
    ),
    case("an SLA planner target without autoscaling", &["--ttft", "500"]),
    case("the HPA's metric under the SLA planner", &["--autoscale", "sla", "--scale-metric", "waiting"]),
    case("the SLA planner's default ARIMA predictor", &["--autoscale", "sla", "--load-predictor", "arima"]),
    case("an SLA planner budget below one instance", &["--autoscale", "sla", "--tp", "4", "--max-gpu-budget", "2"]),
    case(
        "instance failures in an autoscaled fleet",
        &[
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
    ),
    case("a fleet CSV without autoscaling", &["--fleet-csv", "fleet.csv"]),
    case("a goodput limit without its key", &["--goodput", "500"]),
    case("SGLang's prefill budget on LightLLM", &["--engine", "lightllm", "--max-prefill-tokens", "4096"]),
    case("SGLang's running limit on TensorRT-LLM", &["--engine", "trtllm", "--max-running-requests", "8"]),
    case(
        "a grid pairing vLLM's running limit with SGLang",
        &["sweep", "--max-num-seqs", "4", "--grid", "engine=vllm,sglang"],
    ),
    case("a grid of deployment files", &["sweep", "--grid", "deployment=a.toml,b.toml"]),
    case("a deployment file giving SGLang vLLM's running limit", &["run", "--deployment", "sglang-seqs.toml"]),
    case("a gate of NaN", &["validate", "--max-held-out-error", "nan"]),
    case("a gate of inf", &["validate", "--max-held-out-error", "inf"]),
    case("a data folder that does not exist", &["validate", "--data", "/nonexistent"]),
    // Messages a person can act on: encodings and odd bytes named, no Rust type names.
    case("a bzip2-compressed trace", &["cache", "--trace", "t.jsonl.bz2"]),
    case("a zstd-compressed trace", &["cache", "--trace", "t.jsonl.zst"]),
    case("an xz-compressed trace", &["cache", "--trace", "t.jsonl.xz"]),
    case("a zip archive", &["cache", "--trace", "t.zip"]),
    case("UTF-16 text with a byte-order mark", &["cache", "--trace", "utf16.jsonl"]),
    case("UTF-16 text without a byte-order mark", &["cache", "--trace", "utf16be.jsonl"]),
    case("a NUL byte in a line", &["cache", "--trace", "nul.jsonl"]),
    case("a Ctrl-Z at the end (DOS)", &["cache", "--trace", "ctrl-z.jsonl"]),
    case("lines ending in CR alone (old Mac)", &["cache", "--trace", "cr.jsonl"]),
    case("two files joined, a BOM on line 2", &["cache", "--trace", "joined.jsonl"]),
    case("a length that is text", &["cache", "--trace", "len-text.jsonl"]),
    case("a session that is a list", &["cache", "--trace", "session-list.jsonl"]),
    case("a line that is not an object", &["cache", "--trace", "number.jsonl", "--format", "native"]),
    case("a native trace as a JSON array", &["cache", "--trace", "native-array.json"]),
    case("a CSV cell that is not a number", &["cache", "--trace", "cell.csv"]),
    case("a model file with a number as name", &["--model-file", "name-number.toml"]),
    case("a GPU file with text as memory", &["--gpu-file", "memory-text.toml"]),
    case(
        "ShareGPT prompts the client's filter drops, --turns first given",
        &["--trace", "short.json", "--turns", "first"],
    ),
    case(
        "ShareGPT single messages under a filter, --sharegpt-output-len given",
        &["--trace", "single.json", "--turns", "first", "--sharegpt-output-len", "8"],
    ),
    case("a negative value after a space", &["--kv-links", "-1"]),
    case("a negative tolerance after a space", &["plan", "--slo", "ttft_p99=100", "--tolerance", "-1"]),
    case("a class SLO on the failed share", &["plan", "--slo", "failed_pct@0=1"]),
    case("a class SLO whose class is not an integer", &["plan", "--slo", "ttft_p99@high=100"]),
    case(
        "a class SLO for a class no request has",
        &["plan", "--slo", "ttft_p99@3=100", "--priority-mix", "0:0.5,1:0.5"],
    ),
    case("a sweep CSV row with a cell missing", &["merge", "shard.csv", "--csv", "merged.csv"]),
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
