//! Command-line arguments (clap) and their validation into library options. Flag names follow
//! vLLM and SGLang where they exist (`--block-size`/`--block`, `--page-size`,
//! `--num-prompts`, `--random-range-ratio`-style `--range-ratio`, `--gsp-*` as plain names).

use cachesim::analyze::{AnalyzeOptions, RepetitionOptions, Scope, Unit};
use cachesim::cache::{CacheSpec, Policy};
use cachesim::catalog::SsmDtype;
use cachesim::cluster::pd::{KvLink, PdConfig, PdStyle};
use cachesim::cluster::router::{CacheAwareFallback, RouterKind, RouterParams};
use cachesim::cluster::ClusterConfig;
use cachesim::config::RunOptions;
use cachesim::cost::ep::DeepEpMode;
use cachesim::cost::spec::SpecAlgorithm;
use cachesim::engine::{EngineKind, EngineVersion, SchedulePolicy, SchedulingPolicy};
use cachesim::layout::{KvCacheDtype, LayoutOptions, MoeA2aBackend};
use cachesim::replay::ReplaySpec;
use cachesim::report::ReportStyle;
use cachesim::tokenize::TokenizerKind;
use cachesim::trace::{Format, ReadOptions};
use cachesim::vllm_memory::MemoryOverrides;
use cachesim::workload::arrivals::{ArrivalOptions, ArrivalProcess, Rate};
use cachesim::workload::gen;
use cachesim::workload::{BuildOptions, DatasetFilter, Turns};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

const ABOUT: &str = "Predicts how an LLM serving deployment behaves: replays request traces \
through engine-faithful prefix caches (vLLM paged blocks, SGLang radix tree, LightLLM token pool).";

const AFTER: &str = "Examples:
  cachesim                                         # simulate vLLM serving the bundled sample (llama-3.1-8b, h100-sxm)
  cachesim --trace conv.jsonl --max-num-seqs 256 --num-gpu-blocks-override 16384 --report-style vllm
  cachesim --num-prompts 50 --request-rate 20 --max-num-seqs 16 --max-num-batched-tokens 2048
  cachesim cache                                   # the bundled sample, every policy, unlimited capacity
  cachesim cache --trace conv.jsonl --policy paged --block 16,32 --capacity-tokens unlimited,1M
  cachesim cache --trace sharegpt.jsonl.gz --policy all --inflight 8 --json
  cachesim gen gsp --num-groups 8 --prompts-per-group 4 -o gsp.jsonl";

/// cachesim command line.
#[derive(Debug, Parser)]
// `args_override_self`: a flag given twice takes its last value, so the command line overrides a
// `--deployment` file's flags, which are inserted before it.
#[command(
    name = "cachesim",
    version,
    about = ABOUT,
    after_help = AFTER,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Without a subcommand, cachesim runs `run` with these options.
    #[command(flatten)]
    pub run: RunCommand,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate serving the trace (the default): schedule steps as the engine does, price them
    /// with a roofline step-time model, and print the benchmark client's report.
    Run(Box<RunCommand>),
    /// Replay a trace through prefix caches without timing and compare their hit ratios,
    /// side by side, at one or many capacities.
    Cache(CacheArgs),
    /// Can this data set show prefix caching at all? The prefix repetition degree (shared
    /// prefixes per conversation), the most shared prefixes, and hit-ratio upper bounds per block
    /// size and against KV capacity.
    Analyze(AnalyzeArgs),
    /// Generate a synthetic workload as native JSONL (to a file with -o, else to stdout).
    #[command(subcommand)]
    Gen(GenCommand),
    /// Run a grid of configurations over one trace (every point a full `run`) and rank them.
    Sweep(Box<SweepArgs>),
    /// Merge the CSV files of a sharded sweep into the unsharded sweep's CSV.
    Merge(MergeArgs),
    /// The highest request rate each configuration of a grid sustains under an SLO.
    Plan(Box<PlanArgs>),
    /// Read a real benchmark report (sglang bench_serving or vllm bench serve text) and print
    /// the metrics read from it; fit a step-time profile to cases (--fit) or to the report
    /// with the run flags describing what was run (-o).
    Calibrate(Box<CalibrateArgs>),
    /// Simulate every expressible calibration case and compare with its real report.
    Validate(ValidateArgs),
    /// What the catalog and the built-in calibration hold: GPUs, models, networks, engine
    /// bundles, calibration profiles (the values --gpu, --model, --network, --engine-version
    /// take).
    List(ListArgs),
}

/// `cachesim list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// What to list.
    #[arg(value_enum)]
    pub what: ListWhat,
    /// Print JSON: the catalog's own fields (as --gpu-file, --model-file and --network-file
    /// take them), the bundles, or the profiles.
    #[arg(long)]
    pub json: bool,
}

/// What `cachesim list` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListWhat {
    /// The GPU profiles of models/gpus.toml.
    Gpus,
    /// The model profiles of models/models.toml.
    Models,
    /// The inter-node networks of models/networks.toml.
    Networks,
    /// The engine bundles (--engine-version engine@version).
    Engines,
    /// The built-in calibration profiles, with how well each predicts.
    Profiles,
}

/// Where requests come from and how they become tokens.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// Trace file (.gz read transparently). Without it, the bundled sample
    /// (traces/sessions.jsonl: 40 multi-turn sessions sharing a system prompt).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Skip malformed records (reporting how many and why) instead of stopping at the first.
    #[arg(long)]
    pub lenient: bool,
    /// Most bytes a trace may hold once decompressed (a larger one is refused, naming the
    /// file): a number of bytes, or one with K, M, G or T (powers of 1024), e.g. 16G. Lines of
    /// JSONL and CSV are held to 64 MiB each whatever this is.
    #[arg(allow_negative_numbers = true, long, value_name = "BYTES", default_value = "4G", value_parser = parse_bytes)]
    pub max_trace_bytes: u64,
    /// Tokenizer for text: cl100k (default; offline BPE), o200k, chars4 (1 token per 4
    /// characters), or hf:PATH (a local tokenizer.json; needs the `hf` build feature).
    #[arg(long, default_value = "cl100k", value_parser = parse_tokenizer)]
    pub tokenizer: TokenizerKind,
    /// ShareGPT: `all` makes every user turn a request whose prompt is the conversation so far;
    /// `first` is the benchmark clients' shape (first message → first reply's length).
    #[arg(long, value_enum, default_value = "all")]
    pub turns: Turns,
    /// ShareGPT with `--turns first`: fixed output length (as the benchmark clients'
    /// --sharegpt-output-len); records with a single message become usable.
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    pub sharegpt_output_len: Option<u32>,
    /// ShareGPT with `--turns first`: whose sampling to reproduce — vllm (`vllm bench serve`:
    /// 4 ≤ prompt ≤ 1024 tokens, reply ≥ 4, prompt + output ≤ 2048), sglang (`sglang.bench_serving`:
    /// prompt ≥ 2, output ≥ 2), each with its seeded shuffle, or none [default for `run`: the
    /// client --report-style names; elsewhere none].
    #[arg(long, value_enum)]
    pub dataset_filter: Option<DatasetFilter>,
    /// ShareGPT, filter sglang: drop pairs whose prompt + output exceed this many tokens
    /// (sglang.bench_serving --sharegpt-context-len).
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u32).range(1..))]
    pub sharegpt_context_len: Option<u32>,
    /// Mooncake: tokens per `hash_ids` block.
    #[arg(allow_negative_numbers = true, long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub trace_block_size: u32,
}

impl TraceArgs {
    /// Reader options.
    pub fn read_options(&self) -> ReadOptions {
        ReadOptions { format: self.format, lenient: self.lenient, max_bytes: self.max_trace_bytes }
    }
    /// Workload options; without `--dataset-filter`, no client's filter.
    pub fn build_options(&self) -> BuildOptions {
        self.build_options_with(DatasetFilter::None)
    }
    /// Workload options; without `--dataset-filter`, `default_filter` for `--turns first`.
    pub fn build_options_with(&self, default_filter: DatasetFilter) -> BuildOptions {
        let implied = if self.turns == Turns::First { default_filter } else { DatasetFilter::None };
        BuildOptions {
            tokenizer: self.tokenizer.clone(),
            turns: self.turns,
            trace_block_size: self.trace_block_size,
            sharegpt_output_len: self.sharegpt_output_len,
            dataset_filter: self.dataset_filter.unwrap_or(implied),
            sharegpt_context_len: self.sharegpt_context_len,
            lenient: self.lenient,
            ..BuildOptions::default()
        }
    }
}

/// The most `--seeds` of one run.
pub const MAX_SEEDS: u32 = 1000;

/// `cachesim run` (and cachesim without a subcommand): the run's flags and what only a command
/// line's single run takes (sweeps, plans and calibrations flatten [`RunArgs`] alone).
#[derive(Debug, Clone, Args)]
pub struct RunCommand {
    #[command(flatten)]
    pub run: RunArgs,
    /// Run N times, under --seed S, S+1, …, S+N−1, in parallel, and report each metric as its
    /// median over the seeds with its spread (docs/guide/run.md, Seeds). The seed draws the send times
    /// of a --request-rate, which ShareGPT conversations are sent and in what order, the
    /// --num-prompts sample of an untimed trace, the random, kv-aware, aibrix and prefix-hash
    /// routers' choices and SGLang's random schedule policy; a run the seed does not touch (a
    /// timed trace replayed at its own times, say) is refused. Output files are written once per
    /// seed (requests.csv → requests.seed7.csv). At most 1000.
    #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=MAX_SEEDS as i64), help_heading = "Load")]
    pub seeds: u32,
    /// Simulate every engine step as an event of its own. By default a vLLM v1 instance runs a
    /// stretch of decode-only steps (nothing arrives, finishes, is admitted or preempted) as one
    /// event, with the same output bytes; this flag is there to check that and to time both.
    #[arg(long, help_heading = "Run")]
    pub no_step_coalescing: bool,
}

/// The flags of one run, shared by `run`, `sweep`, `plan` and `calibrate`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Serving engine whose scheduler is simulated [default: vllm, or the engine of
    /// --engine-version].
    #[arg(long, value_enum, help_heading = "Engine")]
    pub engine: Option<EngineKind>,
    /// The engine release whose rules to follow, written engine@version [default: the engine's
    /// newest].
    #[arg(long, value_enum, value_name = "ENGINE@VERSION", help_heading = "Engine")]
    pub engine_version: Option<EngineVersion>,
    /// Model profile (built in: `cachesim list models`): its name in any case, its Hugging Face
    /// id, or the one name it begins.
    #[arg(long, default_value = "llama-3.1-8b", help_heading = "Engine")]
    pub model: String,
    /// A TOML file with a [[model]] table, instead of --model.
    #[arg(long, value_name = "FILE", help_heading = "Engine")]
    pub model_file: Option<PathBuf>,
    /// GPU profile (built in: `cachesim list gpus`): its name in any case, its datasheet name
    /// (e.g. H100-SXM5-80GB), a short name (h100: the SXM5 board), or the one name it begins.
    #[arg(long, default_value = "h100-sxm", help_heading = "Engine")]
    pub gpu: String,
    /// A TOML file with a [[gpu]] table, instead of --gpu.
    #[arg(long, value_name = "FILE", help_heading = "Engine")]
    pub gpu_file: Option<PathBuf>,
    /// Tensor-parallel GPUs (adds two all-reduces per layer).
    #[arg(
        allow_negative_numbers = true,
        long,
        visible_alias = "tensor-parallel-size",
        default_value_t = 1,
        help_heading = "Engine"
    )]
    pub tp: u64,
    /// Cache model; default: the engine's own (vLLM: paged). Another one is a what-if.
    #[arg(long, value_enum, help_heading = "Engine")]
    pub policy: Option<Policy>,
    /// KV block size in tokens (vLLM --block-size).
    #[arg(allow_negative_numbers = true, long = "block-size", visible_alias = "block", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=512), help_heading = "Engine")]
    pub block_size: u32,
    /// Radix page size in tokens (SGLang --page-size).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=512), help_heading = "Engine")]
    pub page_size: u32,
    /// Share of GPU memory vLLM may use (--gpu-memory-utilization; default by --engine-version:
    /// 0.92 for vllm@0.33, 0.9 for older bundles); for trtllm the share of the memory left after
    /// its profiling run that goes to KV (--kv-cache-free-gpu-mem-fraction, default 0.9).
    #[arg(
        allow_negative_numbers = true,
        long,
        visible_alias = "kv-cache-free-gpu-mem-fraction",
        help_heading = "Engine"
    )]
    pub gpu_memory_utilization: Option<f64>,
    /// vLLM's peak activation of its profile run, GiB per GPU, as its log reports it
    /// ("PyTorch activation peak memory"); default: modelled from the model and limits.
    #[arg(allow_negative_numbers = true, long, value_name = "GIB", help_heading = "Engine")]
    pub activation_peak_gib: Option<f64>,
    /// vLLM's CUDA-graph memory estimate, GiB per GPU ("Estimated CUDA graph memory"; 0 = not
    /// charged, as VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0); default: modelled per bundle.
    #[arg(allow_negative_numbers = true, long, value_name = "GIB", help_heading = "Engine")]
    pub cudagraph_memory_gib: Option<f64>,
    /// vLLM's non-torch memory increase, GiB per GPU (default 0.16).
    #[arg(allow_negative_numbers = true, long, value_name = "GIB", help_heading = "Engine")]
    pub non_torch_memory_gib: Option<f64>,
    /// KV cache budget per GPU in bytes, skipping the memory model (vLLM --kv-cache-memory-bytes).
    #[arg(allow_negative_numbers = true, long, value_name = "BYTES", help_heading = "Engine")]
    pub kv_cache_memory_bytes: Option<u64>,
    /// Number of KV blocks, null block included (vLLM --num-gpu-blocks-override).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub num_gpu_blocks_override: Option<u64>,
    /// KV capacity in tokens for token-level caches (SGLang --max-total-tokens).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub max_total_tokens: Option<u64>,
    /// Requests running at once (vLLM --max-num-seqs; default by GPU class: 1024 or 256).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub max_num_seqs: Option<u32>,
    /// Tokens per step (vLLM --max-num-batched-tokens; default by GPU class: 8192 or 2048).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub max_num_batched_tokens: Option<u32>,
    /// Turn chunked prefill off (vLLM --no-enable-chunked-prefill; v1 has it on by default).
    #[arg(long, conflicts_with = "enable_chunked_prefill", help_heading = "Engine")]
    pub no_enable_chunked_prefill: bool,
    /// Turn chunked prefill on (vLLM --enable-chunked-prefill; V0 has it off by default).
    #[arg(long, help_heading = "Engine")]
    pub enable_chunked_prefill: bool,
    /// Cap on one request's prefill chunk per step, 0 = off (vLLM --long-prefill-token-threshold).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0, help_heading = "Engine")]
    pub long_prefill_token_threshold: u32,
    /// vLLM v1: order of the waiting queue and choice of preemption victim (vLLM
    /// --scheduling-policy; --engine vllm only). `priority` serves each request's `priority`
    /// (the trace's key, or --priority-mix) lower first, then by arrival, and preempts the
    /// running request of the highest (priority, arrival).
    #[arg(long, value_enum, default_value = "fcfs", help_heading = "Engine")]
    pub scheduling_policy: SchedulingPolicy,
    /// vLLM v1 CPU KV offloading: GiB of host memory for a second KV tier, over all the
    /// instance's GPUs (vLLM --kv-offloading-size, vllm@0.33; off by default). Full prompt
    /// blocks are copied to host memory as they are computed; a waiting request whose prefix
    /// the GPU cache lost but the host tier holds loads it instead of computing it, waiting for
    /// the copy. With --kv-offloading-backend lmcache (vllm@0.18): LMCache's CPU backend
    /// (docs/engines/kv-offloading.md).
    #[arg(allow_negative_numbers = true, long, value_name = "GIB", help_heading = "Engine")]
    pub kv_offloading_size: Option<f64>,
    /// vLLM --kv-offloading-backend: `native` (vLLM's own CPU offloading, the default, vllm@0.33);
    /// `lmcache` (LMCache's connector with its CPU backend in 256-token chunks, loads and saves
    /// synchronous, as vLLM up to 0.22 starts it: --engine-version vllm@0.18).
    #[arg(long, value_enum, help_heading = "Engine")]
    pub kv_offloading_backend: Option<cachesim::engine::vllm_offload::OffloadBackend>,
    /// With --kv-offloading-backend lmcache: tokens per LMCache chunk (LMCache chunk_size,
    /// LMCACHE_CHUNK_SIZE; default 256), a whole number of GPU blocks.
    #[arg(allow_negative_numbers = true, long, value_name = "TOKENS", help_heading = "Engine")]
    pub lmcache_chunk_size: Option<u32>,
    /// With --kv-offloading-backend lmcache: GiB of local disk for each GPU's LMCache, a second
    /// backend behind the CPU one (LMCache max_local_disk_size with local_disk; off by default).
    /// Saved chunks are written through to it in the background; a chunk only the disk holds is
    /// read before its load's copy to the GPU.
    #[arg(allow_negative_numbers = true, long, value_name = "GIB", help_heading = "Engine")]
    pub lmcache_max_local_disk_size: Option<f64>,
    /// With --lmcache-max-local-disk-size: GB/s one GPU's LMCache disk reads and writes at
    /// (default 5, a local NVMe drive; an assumption).
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Engine")]
    pub lmcache_disk_gbps: Option<f64>,
    /// With --kv-offloading-backend lmcache: LMCache's own server as a remote backend behind the
    /// CPU one (LMCache remote_url, LMCACHE_REMOTE_URL; lm://HOST:PORT, the server
    /// `lmcache_server HOST PORT`; off by default). Saved chunks are put to it in the background;
    /// a lookup asks it for the chunks the local backends lack, one round trip each, and a chunk
    /// only it holds is read with the load. The instances of a run share it: a prefix one
    /// computes, another finds.
    #[arg(long, value_name = "URL", help_heading = "Engine")]
    pub lmcache_remote_url: Option<String>,
    /// With --lmcache-remote-url: µs of one round trip to LMCache's server (default 100; an
    /// assumption: TCP between hosts of one cluster, through LMCache's Python client and server).
    #[arg(allow_negative_numbers = true, long, value_name = "US", help_heading = "Engine")]
    pub lmcache_remote_rtt_us: Option<f64>,
    /// With --lmcache-remote-url: GB/s of one GPU's socket to LMCache's server (default 12.5, a
    /// 100 Gb/s link; an assumption).
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Engine")]
    pub lmcache_remote_gbps: Option<f64>,
    /// With --kv-offloading-size or --enable-hierarchical-cache: GB/s each way between one GPU
    /// and host memory, which prices the host tier's copies (default: the GPU's PCIe rate per
    /// direction × 0.87, the share a pinned copy achieves).
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Engine")]
    pub host_link_gbps: Option<f64>,
    /// SGLang HiCache: a host-memory tier under the radix cache (SGLang
    /// --enable-hierarchical-cache, sglang@0.5; off by default). Computed nodes are written to
    /// host memory (--hicache-write-policy); the device evicts a written node's copy and keeps it
    /// matchable on the host; a request whose match runs on into the host loads that run back
    /// (at least 10 tokens) in its prefill step, the forward waiting layer by layer for the copy
    /// (docs/engines/hicache.md).
    #[arg(long, visible_alias = "enable-hicache", help_heading = "Engine")]
    pub enable_hierarchical_cache: bool,
    /// With --enable-hierarchical-cache: the host pool as a multiple of the device pool
    /// (SGLang --hicache-ratio) [default: 2.0].
    #[arg(allow_negative_numbers = true, long, value_name = "RATIO", help_heading = "Engine")]
    pub hicache_ratio: Option<f64>,
    /// With --enable-hierarchical-cache: the host pool in GB, replacing --hicache-ratio (SGLang
    /// --hicache-size; 0: by the ratio).
    #[arg(allow_negative_numbers = true, long, value_name = "GB", help_heading = "Engine")]
    pub hicache_size: Option<i64>,
    /// With --enable-hierarchical-cache: when a node is written to the host (SGLang
    /// --hicache-write-policy): at its first insert (`write_through`, the default), the second
    /// time an insert passes it (`write_through_selective`), or only when device eviction takes
    /// it, the step waiting for the copy (`write_back`).
    #[arg(long, value_enum, help_heading = "Engine")]
    pub hicache_write_policy: Option<cachesim::cache::hicache::WritePolicy>,
    /// With --enable-hierarchical-cache: a storage tier under the host pool (SGLang
    /// --hicache-storage-backend; `file`: one file per page, a directory of this instance's;
    /// `mooncake`: the Mooncake Store, one store every instance of the run writes to and reads
    /// from, so a prefix one instance computed is found by the others).
    /// A request joining the queue looks up the pages past its device and host match (at least
    /// 256 tokens); what storage holds is read into the host pool and loaded with the request's
    /// prefill; every node written to the host is written to storage too
    /// (docs/engines/hicache-storage.md).
    #[arg(long, value_enum, help_heading = "Engine")]
    pub hicache_storage_backend: Option<cachesim::engine::sglang::hicache::StorageBackend>,
    /// With --hicache-storage-backend: whether a request waits for its storage read (SGLang
    /// --hicache-storage-prefetch-policy): admitted at once with what was read (`best_effort`),
    /// after the whole read (`wait_complete`), or until 1 s + 0.25 s per 1,024 tokens looked up,
    /// then as best_effort (`timeout`, the default).
    #[arg(long, value_enum, help_heading = "Engine")]
    pub hicache_storage_prefetch_policy: Option<cachesim::cache::storage::PrefetchPolicy>,
    /// With --hicache-storage-backend: GB/s one GPU's share of the pages is read or written at
    /// (default 5, a local NVMe drive; an assumption).
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Engine")]
    pub storage_gbps: Option<f64>,
    /// With --hicache-storage-backend: milliseconds before a storage query, read or write moves
    /// data (default 0.1).
    #[arg(allow_negative_numbers = true, long, value_name = "MS", help_heading = "Engine")]
    pub storage_latency_ms: Option<f64>,
    /// With --hicache-storage-backend mooncake: the memory each instance adds to the one store
    /// every instance shares (SGLang's MOONCAKE_GLOBAL_SEGMENT_SIZE: bytes, or e.g. `64gb`;
    /// default 4gb). Past 90 % full the store evicts 5 % of its pages, least recently used first.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "SIZE",
        value_parser = cachesim::engine::sglang::hicache::parse_segment_size,
        help_heading = "Engine"
    )]
    pub mooncake_global_segment_size: Option<u64>,
    /// With --hicache-storage-backend: SGLang's --hicache-storage-backend-extra-config, JSON or
    /// @file (.json, .toml). Read: prefetch_threshold (least lookup and hit, default 256 tokens),
    /// prefetch_timeout_base (1 s) and prefetch_timeout_per_ki_token (0.25 s) of the timeout
    /// policy, and the file backend's max_size (bytes one rank's files take, e.g. "200G"; the
    /// least recently written pages go first); where-the-store-lives keys are read past, others
    /// refused.
    #[arg(long, value_name = "JSON|@FILE", value_parser = cachesim::engine::sglang::storage_extra::parse, help_heading = "Engine")]
    pub hicache_storage_backend_extra_config: Option<cachesim::engine::sglang::storage_extra::StorageExtra>,
    /// With --hicache-storage-backend: scheduling passes a lookup that found too little (or was
    /// held back) waits before it is tried again (SGLang --hicache-storage-prefetch-retry-poll-interval;
    /// default 8, 0: never again).
    #[arg(allow_negative_numbers = true, long, value_name = "PASSES", help_heading = "Engine")]
    pub hicache_storage_prefetch_retry_poll_interval: Option<u64>,
    /// With --hicache-storage-backend: tries again per queued request (SGLang
    /// --hicache-storage-prefetch-retry-max-attempts; default 8).
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Engine")]
    pub hicache_storage_prefetch_retry_max_attempts: Option<u32>,
    /// vLLM v1: serve LoRA adapters (vLLM --enable-lora, vllm@0.33; dense models). A request
    /// names one by the trace's `lora` key, or draws one of --lora-modules; a batch holds the
    /// adapters of at most --max-loras, requests of another one waiting; a step with an adapter
    /// runs its shrink and expand kernels, and waits while an adapter not resident is loaded;
    /// adapters share no cached block (docs/engines/lora.md).
    #[arg(long, help_heading = "Engine")]
    pub enable_lora: bool,
    /// With --enable-lora: distinct adapters the running requests may hold at once, each in a
    /// GPU slot allocated beside the weights (vLLM --max-loras) [default: 1].
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Engine")]
    pub max_loras: Option<u32>,
    /// With --enable-lora: adapters kept in host memory, at least --max-loras (vLLM
    /// --max-cpu-loras) [default: --max-loras]; one not there is read from storage.
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Engine")]
    pub max_cpu_loras: Option<u32>,
    /// With --enable-lora: the rank the slots and kernels are sized for, and each adapter's
    /// (vLLM --max-lora-rank: 1, 8, 16, 32, 64, 128, 256, 320 or 512) [default: 16].
    #[arg(allow_negative_numbers = true, long, value_name = "R", help_heading = "Engine")]
    pub max_lora_rank: Option<u32>,
    /// With --enable-lora: the adapters the server registers, by name, in this order (vLLM
    /// --lora-modules); a trace without `lora` keys gives each request one of them, as vllm bench
    /// serve --lora-modules does. Names separated by spaces or commas (a list, not a grid axis).
    #[arg(long, num_args = 1.., value_delimiter = ',', value_name = "NAME", help_heading = "Engine")]
    pub lora_modules: Vec<String>,
    /// With --lora-modules: how a request without a `lora` key gets its adapter (vllm bench serve
    /// --lora-assignment): `random` (seeded by --seed) or `round-robin` [default: random].
    #[arg(long, value_enum, help_heading = "Load")]
    pub lora_assignment: Option<cachesim::workload::lora::Assignment>,
    /// With --enable-lora: GB/s an adapter not in host memory is read from storage at, its
    /// parsing included [default: 2].
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Engine")]
    pub lora_load_gbps: Option<f64>,
    /// vLLM v1: run every layer of a model with sliding-window layers (gpt-oss, Gemma 3) as full
    /// attention in one KV cache group (vLLM --disable-hybrid-kv-cache-manager): every token's KV
    /// kept in every layer, fewer and larger blocks. By default vLLM's hybrid manager keeps only
    /// the window of the sliding layers (docs/engines/hybrid-attention.md).
    #[arg(long, help_heading = "Engine")]
    pub disable_hybrid_kv_cache_manager: bool,
    /// vLLM v1, models with sliding-window layers: tokens between the sliding-window blocks kept
    /// for later prefix hits (vLLM --prefix-cache-retention-interval, vllm@0.33; a multiple of
    /// --block-size). 0, the default, keeps only the blocks a resent prompt or a shared prefix
    /// reaches; `None` keeps every one.
    #[arg(long, value_name = "TOKENS|None", allow_negative_numbers = true, help_heading = "Engine")]
    pub prefix_cache_retention_interval: Option<cachesim::engine::vllm_hybrid::Retention>,
    /// SGLang 0.5, models with sliding-window layers (gpt-oss, Llama 4): window-pool slots per
    /// full-attention slot, in (0, 1] (SGLang --swa-full-tokens-ratio) [default: 0.8]. SGLang
    /// keeps the window layers' KV in a pool of its own, freed as requests slide past it
    /// (docs/engines/sglang-swa.md).
    #[arg(allow_negative_numbers = true, long, value_name = "RATIO", help_heading = "Engine")]
    pub swa_full_tokens_ratio: Option<f64>,
    /// SGLang, models with sliding-window layers: one pool, every layer cached as full attention
    /// (SGLang --disable-hybrid-swa-memory).
    #[arg(long, help_heading = "Engine")]
    pub disable_hybrid_swa_memory: bool,
    /// SGLang 0.5, models with linear-attention layers (Qwen3-Next): how the radix cache gets a
    /// request's recurrent states (SGLang --mamba-radix-cache-strategy) [default: auto, which is
    /// extra_buffer under the overlap scheduler or with pages above one token, else no_buffer]
    /// (docs/engines/sglang-mamba.md).
    #[arg(long, value_enum, value_name = "STRATEGY", help_heading = "Engine")]
    pub mamba_radix_cache_strategy: Option<cachesim::engine::sglang::mamba::StrategyFlag>,
    /// SGLang, models with linear-attention layers: bytes of recurrent-state slots per byte of
    /// full-attention KV in the memory left for caches (SGLang --mamba-full-memory-ratio)
    /// [default: 0.9].
    #[arg(allow_negative_numbers = true, long, value_name = "RATIO", help_heading = "Engine")]
    pub mamba_full_memory_ratio: Option<f64>,
    /// SGLang, models with linear-attention layers: recurrent-state slots, instead of what the
    /// ratio gives (SGLang --max-mamba-cache-size).
    #[arg(allow_negative_numbers = true, long, value_name = "SLOTS", help_heading = "Engine")]
    pub max_mamba_cache_size: Option<i64>,
    /// SGLang, models with linear-attention layers, extra_buffer: tokens between the states a
    /// decoding request keeps for the tree (SGLang --mamba-track-interval) [default: 256].
    #[arg(allow_negative_numbers = true, long, value_name = "TOKENS", help_heading = "Engine")]
    pub mamba_track_interval: Option<i64>,
    /// SGLang (0.5.3 on; sglang@0.5): serve waiting requests by their `priority` (the trace's
    /// key, or --priority-mix), higher values first, then by queue entry; a waiting request
    /// whose priority beats running ones by more than --priority-scheduling-preemption-threshold
    /// preempts them when the running batch is full (SGLang --enable-priority-scheduling; with
    /// --schedule-policy fcfs or lof; docs/engines/sglang.md).
    #[arg(long, help_heading = "Engine")]
    pub enable_priority_scheduling: bool,
    /// SGLang, with --enable-priority-scheduling: lower priority values are served first.
    #[arg(long, help_heading = "Engine")]
    pub schedule_low_priority_values_first: bool,
    /// SGLang, with --enable-priority-scheduling: the priority difference a waiting request must
    /// exceed to preempt a running one (default 10).
    #[arg(long, value_name = "N", allow_negative_numbers = true, help_heading = "Engine")]
    pub priority_scheduling_preemption_threshold: Option<i64>,
    /// SGLang, with --enable-priority-scheduling: order the queue by priority, never preempt.
    #[arg(long, help_heading = "Engine")]
    pub disable_priority_preemption: bool,
    /// SGLang, with --enable-priority-scheduling: the priority of a request sent without one
    /// (default: the least important possible).
    #[arg(long, value_name = "N", allow_negative_numbers = true, help_heading = "Engine")]
    pub default_priority_value: Option<i64>,
    /// SGLang: which running requests a decode short of KV memory retracts first: `length`
    /// (fewest outputs, the default) or `priority` (the least important first; needs
    /// --enable-priority-scheduling).
    #[arg(long, value_enum, help_heading = "Engine")]
    pub retraction_policy: Option<cachesim::engine::sglang::priority::RetractionPolicy>,
    /// SGLang, without --enable-priority-scheduling: a request sent with a priority (the trace's
    /// key or --priority-mix) fails with HTTP 503 instead of being served in arrival order.
    #[arg(long, help_heading = "Engine")]
    pub abort_on_priority_when_disabled: bool,
    /// SGLang: the most requests the waiting queue holds; one arriving at a full queue (or a
    /// retracted or preempted one going back to it) fails with HTTP 503, unless
    /// --enable-priority-scheduling finds a less important waiting request to abort instead
    /// (SGLang --max-queued-requests; unbounded by default).
    #[arg(long, value_name = "N", allow_negative_numbers = true, help_heading = "Engine")]
    pub max_queued_requests: Option<u32>,
    /// vLLM V0 multi-step scheduling (vLLM --num-scheduler-steps; --engine vllm-v0 only, default
    /// 1): a decode batch is scheduled once and runs this many steps, its tokens streamed together.
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub num_scheduler_steps: Option<u32>,
    /// vLLM V0: turn async output processing off (vLLM --disable-async-output-proc; --engine
    /// vllm-v0 only). On by default: a batch's outputs reach the client during the next batch,
    /// and a request that finished rides one more batch.
    #[arg(long, help_heading = "Engine")]
    pub disable_async_output_proc: bool,
    /// vLLM V0 without CUDA graphs (vLLM --enforce-eager; --engine vllm-v0 only): modelled only
    /// as it turns async output processing off (the step times stay the profile's).
    #[arg(long, help_heading = "Engine")]
    pub enforce_eager: bool,
    /// Longest request, prompt + output (vLLM --max-model-len, SGLang --context-length, LightLLM
    /// --max_req_total_len; default: the model's, LightLLM 16384). Longer requests fail as the
    /// engine's frontend rejects them (docs/reference/refusals.md).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub max_model_len: Option<u64>,
    /// SGLang: requests running at once (default: min(pool / 2, requests the pool can index)).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub max_running_requests: Option<u32>,
    /// SGLang: tokens per prefill chunk (default by GPU memory, 8192 on 80-141 GB; -1 = off).
    #[arg(long, allow_negative_numbers = true, help_heading = "Engine")]
    pub chunked_prefill_size: Option<i64>,
    /// SGLang: new tokens per prefill batch.
    #[arg(allow_negative_numbers = true, long, default_value_t = 16384, help_heading = "Engine")]
    pub max_prefill_tokens: u32,
    /// SGLang: order of the waiting queue.
    #[arg(long, value_enum, default_value = "fcfs", help_heading = "Engine")]
    pub schedule_policy: SchedulePolicy,
    /// SGLang: scales the initial decode-memory reservation ratio (0.7 × this).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, help_heading = "Engine")]
    pub schedule_conservativeness: f64,
    /// SGLang: share of GPU memory for weights and KV (default derived from GPU memory).
    #[arg(allow_negative_numbers = true, long, help_heading = "Engine")]
    pub mem_fraction_static: Option<f64>,
    /// vLLM: schedule step k+1 while step k runs, so host work hides under the forward pass
    /// (a step takes max(GPU, host) instead of the sum). On by default for vLLM v1.
    #[arg(long, conflicts_with_all = ["no_async_scheduling", "disable_overlap_schedule"], help_heading = "Engine")]
    pub async_scheduling: bool,
    /// vLLM: turn async scheduling off (host work and forward pass take turns).
    #[arg(long, help_heading = "Engine")]
    pub no_async_scheduling: bool,
    /// SGLang: turn the overlap schedule off (host work and forward pass take turns); the same
    /// switch as --no-async-scheduling.
    #[arg(long, help_heading = "Engine")]
    pub disable_overlap_schedule: bool,
    /// Requests per second (`inf` = all at once). Default: the trace's time stamps when it has
    /// them, else inf.
    #[arg(long, value_parser = parse_rate, allow_negative_numbers = true, help_heading = "Load")]
    pub request_rate: Option<Rate>,
    /// Gamma shape of inter-arrival gaps (1 = Poisson; <1 burstier), vLLM semantics.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, help_heading = "Load")]
    pub burstiness: f64,
    /// Whose request-rate process to follow: vllm (`vllm bench serve`: gamma gaps rescaled so
    /// the last send is at N / rate), vllm-0.9 (older benchmark_serving.py: first send at 0,
    /// gamma gaps) or sglang (first send at 0, exponential gaps); all draw from NumPy's legacy
    /// generator seeded with --seed, as the clients do [default: the client --report-style names].
    #[arg(long, value_enum, help_heading = "Load")]
    pub arrival_process: Option<ArrivalProcess>,
    /// How the client counts the inter-token latency of a streamed chunk that carries several
    /// tokens (a speculative step's accepted drafts and its new token): chunk (one entry per
    /// chunk: `vllm bench serve`, sglang bench_serving up to 0.4.3.post2) or token (the gap
    /// divided over the chunk's tokens: sglang bench_serving's native backend from
    /// 0.4.3.post3). TPOT is the same either way [default: token with --report-style sglang and
    /// --engine sglang, else chunk].
    #[arg(long, value_enum, help_heading = "Load")]
    pub client_itl: Option<cachesim::metrics::ItlCount>,
    /// Milliseconds from a request's send to the engine's scheduler (HTTP, parsing,
    /// tokenisation); adds to TTFT and E2E latency, not to TPOT [default: 10, read off published
    /// low-load SGLang TTFTs].
    #[arg(allow_negative_numbers = true, long, help_heading = "Load")]
    pub request_overhead_ms: Option<f64>,
    /// Step-time factors: the fitted profile of calibration/profiles/ matching the GPU, engine
    /// family and model (default), else the composed prior — the device factors measured on
    /// the H200 kernel steps (this GPU's, its architecture family's prior, or borrowed, as the
    /// echo says) with the engine's own host time, per-kernel floor and collective latency where
    /// a profile of its family fitted them alone (else the priors'); `kernels` for that prior even
    /// where a profile matches (what `validate --leave-group-out` falls back to), `none` for the
    /// raw roofline, or a profile FILE (`cachesim calibrate --fit --out`).
    #[arg(long, value_name = "none|kernels|FILE", help_heading = "Engine")]
    pub calibration: Option<PathBuf>,
    /// Client-side limit on requests in flight (closed loop).
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Load")]
    pub max_concurrency: Option<u32>,
    /// Multiplies trace time stamps (2 = half the load).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, help_heading = "Load")]
    pub time_scale: f64,
    /// Send only N requests (the first N of a timed or multi-turn trace, else a seeded sample);
    /// at least 1.
    #[arg(allow_negative_numbers = true, long, value_parser = parse_num_prompts, help_heading = "Load")]
    pub num_prompts: Option<usize>,
    /// Seed of the client's sampling and send times, of the random routers' choices and of
    /// SGLang's random schedule policy (--seeds N runs S to S+N−1).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0, help_heading = "Load")]
    pub seed: u64,
    /// Priority classes by share for a trace without `priority` keys, e.g. 0:0.2,1:0.8 (20 % of
    /// the conversations at priority 0, 80 % at 1; lower is served first under
    /// --scheduling-policy priority). Each conversation draws once, seeded by --seed; the report
    /// then adds per-class figures.
    #[arg(
        long,
        value_name = "P:SHARE,...",
        allow_hyphen_values = true,
        value_parser = cachesim::workload::priority::parse_shares,
        help_heading = "Load"
    )]
    pub priority_mix: Option<cachesim::workload::priority::Shares>,
    /// Identical serving instances (data parallel), each with its own scheduler, KV cache and
    /// --tp GPUs, behind --router (with --autoscale: the instances serving at the start).
    #[arg(
        allow_negative_numbers = true,
        long,
        visible_alias = "dp",
        default_value_t = 1,
        value_name = "N",
        help_heading = "Cluster"
    )]
    pub instances: u32,
    /// How the router in front of the instances picks one per request.
    #[arg(long, value_enum, default_value = "round-robin", help_heading = "Cluster")]
    pub router: RouterKind,
    /// A deployment file (TOML) whose keys are these flags' names, with tables [prefill],
    /// [decode], [router] and [link]; flags on the command line override its values, paths in it
    /// are relative to its folder (docs/guide/cluster.md, Deployment files).
    #[arg(long, value_name = "FILE.toml", help_heading = "Cluster")]
    pub deployment: Option<PathBuf>,
    /// cache-aware, prefix-hash, aibrix: characters a token stands for when the router reads a
    /// request's token ids as text (the trace has ids, not text).
    #[arg(allow_negative_numbers = true, long, default_value_t = 4, value_name = "N", help_heading = "Router")]
    pub router_chars_per_token: u32,
    /// cache-aware: send to the best-matching instance when matched ÷ prompt characters exceed
    /// this [sglang router default].
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.3, value_name = "SHARE", help_heading = "Router")]
    pub cache_threshold: f64,
    /// cache-aware: loads count as imbalanced when max − min in-flight exceeds this …
    #[arg(allow_negative_numbers = true, long, default_value_t = 64, value_name = "N", help_heading = "Router")]
    pub balance_abs_threshold: u32,
    /// … and max > min × this; imbalanced requests go to the least-loaded instance.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.5, value_name = "X", help_heading = "Router")]
    pub balance_rel_threshold: f64,
    /// cache-aware: seconds between evictions of the router's tree (0 = never).
    #[arg(allow_negative_numbers = true, long, default_value_t = 120.0, value_name = "S", help_heading = "Router")]
    pub eviction_interval_secs: f64,
    /// cache-aware: characters per instance the router's tree keeps after an eviction.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1 << 26, value_name = "CHARS", help_heading = "Router")]
    pub max_tree_size: u64,
    /// cache-aware: where a request without a good match goes: least-load (current gateway) or
    /// smallest-tree (sgl-router before mid-2025).
    #[arg(long, value_enum, default_value = "least-load", help_heading = "Router")]
    pub cache_aware_fallback: CacheAwareFallback,
    /// prefix-hash: characters per chunk of production-stack's hash trie.
    #[arg(allow_negative_numbers = true, long, default_value_t = 128, value_name = "CHARS", help_heading = "Router")]
    pub prefix_chunk_chars: u32,
    /// prefix-hash: matched characters below which the least-loaded instance is used instead.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0, value_name = "CHARS", help_heading = "Router")]
    pub prefix_min_match_length: u64,
    /// aibrix: characters per hashed block (AIBRIX_PREFIX_CACHE_BLOCK_SIZE).
    #[arg(allow_negative_numbers = true, long, default_value_t = 128, value_name = "CHARS", help_heading = "Router")]
    pub aibrix_block_size: u32,
    /// aibrix: blocks its LRU index keeps (AIBRIX_PREFIX_CACHE_BLOCK_NUMBER).
    #[arg(allow_negative_numbers = true, long, default_value_t = 200_000, value_name = "N", help_heading = "Router")]
    pub aibrix_block_number: u32,
    /// aibrix: seconds an unused block stays indexed (20 minutes upstream).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1200.0, value_name = "S", help_heading = "Router")]
    pub aibrix_eviction_secs: f64,
    /// aibrix: running requests max − min above which only the least-loaded pods are candidates
    /// [code default 8].
    #[arg(allow_negative_numbers = true, long, default_value_t = 8, value_name = "N", help_heading = "Router")]
    pub aibrix_imbalance_abs_count: u32,
    /// aibrix: a matched pod qualifies when its running ≤ mean + this × σ [code default 1].
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, value_name = "X", help_heading = "Router")]
    pub aibrix_std_dev_factor: f64,
    /// kv-aware: weight of the blocks to prefill against the blocks held in Dynamo's cost.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, value_name = "X", help_heading = "Router")]
    pub overlap_score_weight: f64,
    /// kv-aware (and llm-d's precise prefix scorer): milliseconds after a step ends that its KV
    /// events reach the router's indexer
    /// (vLLM publishes them after each step): the router then reads its own index, which misses
    /// the blocks cached in the steps in flight and still holds those evicted since. Unset, it
    /// reads the instances' caches as they are (an indexer without lag).
    #[arg(allow_negative_numbers = true, long, value_name = "MS", help_heading = "Router")]
    pub kv_event_delay_ms: Option<f64>,
    /// llm-d: weight of the queue scorer, (max − waiting) ÷ (max − min) over the endpoints (the
    /// EPP's default profile: 2; 0 leaves it out).
    #[arg(allow_negative_numbers = true, long, default_value_t = 2.0, value_name = "W", help_heading = "Router")]
    pub queue_scorer_weight: f64,
    /// llm-d: weight of the KV-cache utilization scorer, 1 − the share of the pool requests hold
    /// (default profile: 2).
    #[arg(allow_negative_numbers = true, long, default_value_t = 2.0, value_name = "W", help_heading = "Router")]
    pub kv_cache_utilization_scorer_weight: f64,
    /// llm-d: weight of the approximate prefix-cache scorer, the prompt's blocks the EPP last sent
    /// to the endpoint over all its blocks (default profile: 3).
    #[arg(allow_negative_numbers = true, long, default_value_t = 3.0, value_name = "W", help_heading = "Router")]
    pub prefix_cache_scorer_weight: f64,
    /// llm-d: weight of the LoRA affinity scorer, 1 / 0.8 / 0.6 / 0 for the request's adapter
    /// running / a free slot / it waiting / none (in no default profile: 0).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, value_name = "W", help_heading = "Router")]
    pub lora_affinity_scorer_weight: f64,
    /// llm-d: weight of the precise prefix-cache scorer, the prompt's leading blocks the
    /// endpoint's KV events say it holds over all its blocks (paged caches; the events arrive
    /// --kv-event-delay-ms after their step, 0 by default; in no default profile: 0).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, value_name = "W", help_heading = "Router")]
    pub precise_prefix_cache_scorer_weight: f64,
    /// llm-d: weight of a second approximate prefix-cache scorer over its own producer, sized to
    /// the servers' CPU offloading tier as llm-d's tiered-prefix-cache guide configures it
    /// (16-token blocks, --cpu-lru-capacity-per-server blocks an endpoint; in no default
    /// profile: 0, no such producer).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, value_name = "W", help_heading = "Router")]
    pub cpu_prefix_cache_scorer_weight: f64,
    /// llm-d: the CPU-tier producer's LRU of block hashes per endpoint (its
    /// `lruCapacityPerServer`; the guide's 82,000 for 200 GiB of Qwen3-32B).
    #[arg(allow_negative_numbers = true, long, default_value_t = cachesim::cluster::router::epp::DEFAULT_LRU_BLOCKS,
          value_name = "BLOCKS", help_heading = "Router")]
    pub cpu_lru_capacity_per_server: u32,
    /// llm-d: the approximate prefix producers' `maxPrefixTokensToMatch`: the prompt's leading
    /// tokens they hash [default: 256 blocks].
    #[arg(allow_negative_numbers = true, long, value_name = "TOKENS", help_heading = "Router")]
    pub max_prefix_tokens_to_match: Option<u32>,
    /// llm-d: the endpoint picker's release: 520af478 (May 2026: the approximate prefix
    /// producers hash blocks of the engines' block size, or 16 tokens) or 44582a8f4 (llm-d-router
    /// from 2026-06-02: those blocks floored at 64 tokens) [default: 520af478].
    #[arg(long, value_enum, value_name = "COMMIT", help_heading = "Router")]
    pub epp_release: Option<cachesim::cluster::router::EppRelease>,
    /// llm-d: weight of the no-hit LRU scorer: a request no endpoint holds a block of goes to
    /// the endpoint least recently given such a request (1 → 0 in that order); any other
    /// request scores 0.5 everywhere (in no default profile: 0; llm-d's optimized-baseline
    /// guide: 2).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, value_name = "W", help_heading = "Router")]
    pub no_hit_lru_scorer_weight: f64,
    /// llm-d: milliseconds between two scrapes of an endpoint's queue, KV and LoRA metrics, which
    /// the scorers read however old (the EPP's --refresh-metrics-interval; 0: always fresh).
    #[arg(allow_negative_numbers = true, long, default_value_t = 50.0, value_name = "MS", help_heading = "Router")]
    pub refresh_metrics_interval_ms: f64,
    /// llm-d-predicted-latency: the requests' `x-slo-ttft-ms` header, the TTFT the EPP keeps
    /// headroom against: MS for every request, or PRIORITY:MS,… per priority class (a class not
    /// listed, and a request without a priority unless 0 is listed, sends none). Without a
    /// header the SLO is 0, every endpoint short of it, and the lowest predicted TTFT wins. Not
    /// streaming, the predictor's "TTFT" is the end-to-end latency. A request of a negative
    /// priority with a header is shed (fails) when no endpoint is predicted to meet it, none is
    /// idle and none nearly empty (the admitter).
    #[arg(allow_negative_numbers = true, long, value_name = "MS|P:MS,…", value_parser = parse_slo_header, help_heading = "Router")]
    pub slo_ttft_ms: Option<cachesim::cluster::router::epp_latency::SloHeader>,
    /// llm-d-predicted-latency: the requests' `x-slo-tpot-ms` header, as --slo-ttft-ms (read with
    /// --latency-streaming-mode only); an endpoint running a request with a stricter one
    /// holds a new request to that.
    #[arg(allow_negative_numbers = true, long, value_name = "MS|P:MS,…", value_parser = parse_slo_header, help_heading = "Router")]
    pub slo_tpot_ms: Option<cachesim::cluster::router::epp_latency::SloHeader>,
    /// llm-d-predicted-latency: the predictor's LATENCY_OBJECTIVE_TYPE, the mean or the 90th
    /// percentile (mean + 1.28 σ of the Bayesian ridge) [default: mean, llm-d's chart].
    #[arg(long, value_enum, value_name = "OBJECTIVE", help_heading = "Router")]
    pub latency_objective: Option<cachesim::cluster::router::latency_model::Objective>,
    /// llm-d-predicted-latency: seconds between two trainings of the predictor
    /// (LATENCY_RETRAINING_INTERVAL_SEC; the first 10 s in) [default: 10, llm-d's chart].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Router")]
    pub latency_retraining_interval_s: Option<f64>,
    /// llm-d-predicted-latency: seconds between two loads of the newest model by the prediction
    /// server (MODEL_SYNC_INTERVAL_SEC) [default: 30, llm-d's chart].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Router")]
    pub latency_model_sync_interval_s: Option<f64>,
    /// llm-d-predicted-latency: samples before the first training
    /// (LATENCY_MIN_SAMPLES_FOR_RETRAIN_FRESH, a trainer started without a model) [default: 10].
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Router")]
    pub latency_min_samples_for_retrain: Option<u64>,
    /// llm-d-predicted-latency: the producer's streamingMode: learn TTFT at the first token and
    /// TPOT at the end, and keep headroom against --slo-tpot-ms too (off, as upstream: one
    /// end-to-end sample per request, TPOT not scored).
    #[arg(long, help_heading = "Router")]
    pub latency_streaming_mode: bool,
    /// llm-d-predicted-latency: which endpoint meeting the SLOs wins, the one with the least
    /// headroom (packing) or the most (spreading) [default: least].
    #[arg(long, value_enum, value_name = "STRATEGY", help_heading = "Router")]
    pub headroom_selection_strategy: Option<cachesim::cluster::router::slo_pick::Strategy>,
    /// Instance failures, comma-separated SECONDS:INSTANCE (120:0: instance 0 fails 120 s into
    /// the run). A failure is a crash: the instance's cache is gone, its running and waiting
    /// requests fail (or migrate, --migration-limit), the router leaves it out until it serves
    /// again --recovery-s later.
    #[arg(long, value_name = "SECONDS:INSTANCE,...", value_parser = parse_fail_at, help_heading = "Failures")]
    pub fail_at: Option<cachesim::cluster::faults::FailList>,
    /// Mean seconds between failures of each instance, counted from when it starts serving:
    /// exponential draws seeded by --seed (beside or instead of --fail-at).
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Failures")]
    pub mtbf_s: Option<f64>,
    /// Seconds from a failure until the instance serves again: a restart (weights loaded again,
    /// CUDA graphs captured, warm-up) [default: 60, assumed; take yours from start-up logs].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Failures")]
    pub recovery_s: Option<f64>,
    /// How many times a request on a failed instance may continue on another one, sent again
    /// with the tokens streamed so far (NVIDIA Dynamo's --migration-limit) [default: 0: it
    /// fails, as the benchmark clients count an errored request and go on].
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Failures")]
    pub migration_limit: Option<u32>,
    /// A rolling restart (an upgrade, one instance at a time): at S seconds instance 0 leaves the
    /// router's list, finishes what it holds, stops and serves again --recovery-s later; then
    /// instance 1 drains, and so on.
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Failures")]
    pub rolling_restart: Option<f64>,
    /// Seconds a draining instance (a rolling restart's, or one scaled down) may take to finish
    /// its requests; what is left then is lost as in a crash (fails, or migrates) [default: 30,
    /// Kubernetes' terminationGracePeriodSeconds].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Failures")]
    pub drain_timeout_s: Option<f64>,
    /// Per-request limits in ms, as vllm bench serve takes them (ttft:500 tpot:50 e2el:2000): the
    /// report adds the request goodput (good requests per second) and, when autoscaling, the
    /// share of good requests over time.
    #[arg(long, num_args = 1.., value_name = "KEY:MS", value_parser = parse_goodput_word, help_heading = "Load")]
    pub goodput: Option<Vec<String>>,
    /// Autoscale the instances over the trace's time line: hpa is Kubernetes'
    /// HorizontalPodAutoscaler on a per-instance metric (--scale-metric, --scale-target), synced
    /// every 15 s, scale-downs held for 5 minutes, scale-ups of at most 4 instances or 100 % per
    /// 15 s; sla is NVIDIA Dynamo's SLA planner in aggregated mode: every 180 s it predicts the
    /// next interval's requests and lengths and sets ceil(demand / one engine's capacity within
    /// --ttft and --itl) instances, the capacity priced by this deployment's step-time model;
    /// --instances is the count at the start.
    #[arg(long, value_enum, value_name = "POLICY", help_heading = "Autoscaling")]
    pub autoscale: Option<cachesim::cluster::autoscale::AutoscalePolicy>,
    /// The fewest instances the autoscaler keeps (minReplicas) [default: 1].
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Autoscaling")]
    pub min_instances: Option<u32>,
    /// The most instances the autoscaler starts (maxReplicas).
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Autoscaling")]
    pub max_instances: Option<u32>,
    /// The per-instance metric averaged over the serving instances: waiting
    /// (vllm:num_requests_waiting), running (vllm:num_requests_running), in-flight (both) or
    /// kv-usage (vllm:kv_cache_usage_perc, a fraction).
    #[arg(long, value_enum, value_name = "METRIC", help_heading = "Autoscaling")]
    pub scale_metric: Option<cachesim::cluster::autoscale::ScaleMetric>,
    /// The average the autoscaler aims at (the HPA's target averageValue): requests per
    /// instance, or a KV share between 0 and 1.
    #[arg(allow_negative_numbers = true, long, value_name = "X", help_heading = "Autoscaling")]
    pub scale_target: Option<f64>,
    /// Seconds between the autoscaler's syncs (--horizontal-pod-autoscaler-sync-period)
    /// [default: 15].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Autoscaling")]
    pub hpa_sync_period_s: Option<f64>,
    /// Ratios within this of 1 change nothing (--horizontal-pod-autoscaler-tolerance) [default:
    /// 0.1].
    #[arg(allow_negative_numbers = true, long, value_name = "X", help_heading = "Autoscaling")]
    pub hpa_tolerance: Option<f64>,
    /// A scale-down goes no lower than the highest count proposed in this many seconds
    /// (behavior.scaleDown.stabilizationWindowSeconds) [default: 300].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Autoscaling")]
    pub scale_down_window_s: Option<f64>,
    /// Seconds from a scale-up until the new instance serves [default: 60 s of engine start-up,
    /// assumed, plus its GPU's share of the weights read at --weights-load-gbps].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Autoscaling")]
    pub cold_start_s: Option<f64>,
    /// GB/s at which a starting instance reads one GPU's share of the weights [default: 2, one
    /// local NVMe drive, assumed].
    #[arg(allow_negative_numbers = true, long, value_name = "GBPS", help_heading = "Autoscaling")]
    pub weights_load_gbps: Option<f64>,
    /// The SLA planner's period: seconds of traffic each adjustment reads, and between
    /// adjustments (Dynamo's throughput_adjustment_interval) [default: 180].
    #[arg(allow_negative_numbers = true, long, value_name = "S", help_heading = "Autoscaling")]
    pub throughput_adjustment_interval: Option<f64>,
    /// The SLA planner's TTFT target, ms: the capacity search's batches must meet it [default:
    /// 500].
    #[arg(allow_negative_numbers = true, long, value_name = "MS", help_heading = "Autoscaling")]
    pub ttft: Option<f64>,
    /// The SLA planner's ITL target, ms [default: 50].
    #[arg(allow_negative_numbers = true, long, value_name = "MS", help_heading = "Autoscaling")]
    pub itl: Option<f64>,
    /// How the SLA planner predicts the next interval's request count, ISL and OSL: kalman (a
    /// local linear trend) or constant (the last value) [default: kalman; Dynamo's own default,
    /// arima, and prophet are not modelled].
    #[arg(long, value_enum, value_name = "PREDICTOR", help_heading = "Autoscaling")]
    pub load_predictor: Option<cachesim::cluster::planner::LoadPredictor>,
    /// The SLA planner's GPU budget: it runs at most this many GPUs' worth of instances
    /// [default: 8].
    #[arg(allow_negative_numbers = true, long, value_name = "GPUS", help_heading = "Autoscaling")]
    pub max_gpu_budget: Option<u32>,
    /// The fewest instances the SLA planner keeps [default: 1].
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Autoscaling")]
    pub min_endpoint: Option<u32>,
    /// Prefill instances of a prefill/decode-disaggregated deployment (with --decode-instances;
    /// --router then picks among them).
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "P",
        requires = "decode_instances",
        help_heading = "Cluster"
    )]
    pub prefill_instances: Option<u32>,
    /// Decode instances of a disaggregated deployment.
    #[arg(
        allow_negative_numbers = true,
        long,
        value_name = "D",
        requires = "prefill_instances",
        help_heading = "Cluster"
    )]
    pub decode_instances: Option<u32>,
    /// How prefill hands a request to decode: vllm (proxy + NixlConnector: decode picked after
    /// prefill, pulls the KV it lacks, recomputes the last prompt token) or sglang (both picked
    /// at arrival, decode pre-allocates before prefill starts, prefill ships the first token).
    #[arg(long, value_enum, default_value = "vllm", help_heading = "Cluster")]
    pub pd_style: PdStyle,
    /// How the decode instance is picked.
    #[arg(long, value_enum, default_value = "least-load", help_heading = "Cluster")]
    pub decode_router: RouterKind,
    /// KV link: effective Gb/s of one lane [default: 200, one 400 Gb/s NIC at the 25 GB/s one
    /// transfer reaches (ENGINE_SPEC §6.3)].
    #[arg(allow_negative_numbers = true, long, default_value_t = 200.0, value_name = "GBPS", help_heading = "Cluster")]
    pub kv_link_gbps: f64,
    /// KV link: fixed milliseconds per transfer (assumed).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, value_name = "MS", help_heading = "Cluster")]
    pub kv_link_latency_ms: f64,
    /// KV link: lanes (NICs) used in parallel; transfers queue FIFO for the first free one.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1, value_name = "N", help_heading = "Cluster")]
    pub kv_links: u32,
    /// --max-num-seqs of the prefill instances (default: --max-num-seqs).
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Cluster")]
    pub prefill_max_num_seqs: Option<u32>,
    /// --max-num-batched-tokens of the prefill instances.
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Cluster")]
    pub prefill_max_num_batched_tokens: Option<u32>,
    /// --max-num-seqs of the decode instances.
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Cluster")]
    pub decode_max_num_seqs: Option<u32>,
    /// --max-num-batched-tokens of the decode instances.
    #[arg(allow_negative_numbers = true, long, value_name = "N", help_heading = "Cluster")]
    pub decode_max_num_batched_tokens: Option<u32>,
    /// Print the mean and median TTFT decomposed into prefill queue, prefill, transfer wait,
    /// transfer and the decode instance's first step (disaggregated runs).
    #[arg(long, help_heading = "Output")]
    pub ttft_breakdown: bool,
    /// Report layout: sglang bench_serving or vllm bench serve.
    #[arg(long, value_enum, default_value = "sglang", help_heading = "Output")]
    pub report_style: ReportStyle,
    /// Print JSON (sglang's result keys, plus cache stats and the resolved config).
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Write one row per request (times in seconds) to this CSV file.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub requests_csv: Option<PathBuf>,
    /// Write one row per engine step to this CSV file.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub timeline_csv: Option<PathBuf>,
    /// Write one row per output token (request, index, time in seconds) to this CSV file.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub token_times_csv: Option<PathBuf>,
    /// Draw TTFT and TPOT CDFs, KV usage and queue lengths over time to this SVG or PNG file.
    #[arg(long, value_name = "FILE.svg|png", help_heading = "Output")]
    pub plot: Option<PathBuf>,
    /// With --autoscale: write one row per autoscaler sync (time, instances serving, starting
    /// and draining, the metric's average, the count proposed and the count set) to this CSV
    /// file.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub fleet_csv: Option<PathBuf>,
    /// With --autoscale and --goodput: also find the smallest fixed fleet (between the
    /// autoscaler's bounds, by bisection) whose goodput attainment is at least the autoscaled
    /// fleet's, and compare their GPU-hours.
    #[arg(long, help_heading = "Autoscaling")]
    pub compare_fixed: bool,
    /// With --autoscale: draw the instances, the metric against its target and each window's
    /// TTFT over time to this SVG or PNG file.
    #[arg(long, value_name = "FILE.svg|png", help_heading = "Output")]
    pub fleet_plot: Option<PathBuf>,
    #[command(flatten)]
    pub layout: LayoutArgs,
}

impl RunArgs {
    /// Library options.
    pub fn options(&self) -> RunOptions {
        let engine = self.engine.or(self.engine_version.map(EngineVersion::engine)).unwrap_or(EngineKind::Vllm);
        RunOptions {
            engine,
            engine_version: self.engine_version,
            model: self.model.clone(),
            model_file: self.model_file.clone(),
            gpu: self.gpu.clone(),
            gpu_file: self.gpu_file.clone(),
            tp: self.tp,
            policy: self.policy,
            block_size: self.block_size,
            page_size: self.page_size,
            gpu_memory_utilization: self.gpu_memory_utilization,
            memory: MemoryOverrides {
                activation_peak_gib: self.activation_peak_gib,
                cudagraph_memory_gib: self.cudagraph_memory_gib,
                non_torch_memory_gib: self.non_torch_memory_gib,
                kv_cache_memory_bytes: self.kv_cache_memory_bytes,
            },
            num_gpu_blocks_override: self.num_gpu_blocks_override,
            max_total_tokens: self.max_total_tokens,
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            enable_chunked_prefill: if self.enable_chunked_prefill {
                Some(true)
            } else if self.no_enable_chunked_prefill {
                Some(false)
            } else {
                None
            },
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            scheduling_policy: self.scheduling_policy,
            num_scheduler_steps: self.num_scheduler_steps,
            disable_async_output_proc: self.disable_async_output_proc,
            enforce_eager: self.enforce_eager,
            max_model_len: self.max_model_len,
            max_running_requests: self.max_running_requests,
            chunked_prefill_size: self.chunked_prefill_size,
            max_prefill_tokens: self.max_prefill_tokens,
            schedule_policy: self.schedule_policy,
            schedule_conservativeness: self.schedule_conservativeness,
            mem_fraction_static: self.mem_fraction_static,
            overlap: if self.async_scheduling {
                Some(true)
            } else if self.no_async_scheduling || self.disable_overlap_schedule {
                Some(false)
            } else {
                None
            },
            arrivals: ArrivalOptions {
                rate: self.request_rate,
                burstiness: self.burstiness,
                time_scale: self.time_scale,
                num_prompts: self.num_prompts,
                seed: self.seed,
                process: self.arrival_process.unwrap_or(match self.report_style {
                    ReportStyle::Sglang => ArrivalProcess::Sglang,
                    ReportStyle::Vllm => ArrivalProcess::Vllm,
                }),
            },
            max_concurrency: self.max_concurrency,
            request_overhead_ms: self.request_overhead_ms,
            client_itl: self.client_itl.unwrap_or(match (self.report_style, engine) {
                // sglang bench_serving's `--backend sglang` reads the engine's native /generate
                // stream, whose chunks it divides per token.
                (ReportStyle::Sglang, EngineKind::Sglang) => cachesim::metrics::ItlCount::Token,
                _ => cachesim::metrics::ItlCount::Chunk,
            }),
            layout: self.layout.options(),
            calibration: match &self.calibration {
                None => cachesim::config::Calibration::Auto,
                Some(p) if p.as_os_str() == "none" => cachesim::config::Calibration::None,
                Some(p) if p.as_os_str() == "kernels" => cachesim::config::Calibration::Kernels,
                Some(p) => cachesim::config::Calibration::File(p.clone()),
            },
            cluster: ClusterConfig {
                instances: self.instances,
                router: self.router,
                router_params: RouterParams {
                    chars_per_token: self.router_chars_per_token,
                    seed: self.seed,
                    cache_threshold: self.cache_threshold,
                    balance_abs_threshold: self.balance_abs_threshold,
                    balance_rel_threshold: self.balance_rel_threshold,
                    eviction_interval_secs: self.eviction_interval_secs,
                    max_tree_size: self.max_tree_size,
                    cache_aware_fallback: self.cache_aware_fallback,
                    prefix_chunk_chars: self.prefix_chunk_chars,
                    prefix_min_match_length: self.prefix_min_match_length,
                    aibrix_block_chars: self.aibrix_block_size,
                    aibrix_block_number: self.aibrix_block_number,
                    aibrix_eviction_secs: self.aibrix_eviction_secs,
                    aibrix_imbalance_abs_count: self.aibrix_imbalance_abs_count,
                    aibrix_std_dev_factor: self.aibrix_std_dev_factor,
                    overlap_score_weight: self.overlap_score_weight,
                    kv_block_size: self.block_size,
                    epp_weights: cachesim::cluster::router::epp::EppWeights {
                        queue: self.queue_scorer_weight,
                        kv_cache: self.kv_cache_utilization_scorer_weight,
                        prefix: self.prefix_cache_scorer_weight,
                        lora: self.lora_affinity_scorer_weight,
                        precise: self.precise_prefix_cache_scorer_weight,
                        cpu_prefix: self.cpu_prefix_cache_scorer_weight,
                        no_hit_lru: self.no_hit_lru_scorer_weight,
                    },
                    max_prefix_tokens_to_match: self.max_prefix_tokens_to_match,
                    cpu_lru_capacity_per_server: self.cpu_lru_capacity_per_server,
                    epp_release: self.epp_release.unwrap_or_default(),
                    refresh_metrics_interval_ms: self.refresh_metrics_interval_ms,
                    kv_event_delay_ms: self.kv_event_delay_ms,
                    predicted_latency: cachesim::cluster::router::epp_latency::LatencyFlags {
                        slo_ttft_ms: self.slo_ttft_ms,
                        slo_tpot_ms: self.slo_tpot_ms,
                        objective: self.latency_objective,
                        retraining_interval_s: self.latency_retraining_interval_s,
                        model_sync_interval_s: self.latency_model_sync_interval_s,
                        min_samples_for_retrain: self.latency_min_samples_for_retrain,
                        streaming: self.latency_streaming_mode,
                        strategy: self.headroom_selection_strategy,
                    },
                },
                pd: self.prefill_instances.zip(self.decode_instances).map(|(prefill, decode)| PdConfig {
                    prefill,
                    decode,
                    style: self.pd_style,
                    link: KvLink { gbps: self.kv_link_gbps, latency_ms: self.kv_link_latency_ms, links: self.kv_links },
                    prefill_max_num_seqs: self.prefill_max_num_seqs,
                    prefill_max_num_batched_tokens: self.prefill_max_num_batched_tokens,
                    decode_max_num_seqs: self.decode_max_num_seqs,
                    decode_max_num_batched_tokens: self.decode_max_num_batched_tokens,
                }),
                decode_router: self.decode_router,
            },
            faults: cachesim::cluster::faults::FaultOptions {
                fail_at: self.fail_at.clone().map(|l| l.0).unwrap_or_default(),
                mtbf_s: self.mtbf_s,
                recovery_s: self.recovery_s,
                migration_limit: self.migration_limit,
                rolling_restart_s: self.rolling_restart,
                drain_timeout_s: self.drain_timeout_s,
            },
            goodput: self.goodput.clone(),
            offload: cachesim::engine::vllm_offload::OffloadOptions {
                size_gib: self.kv_offloading_size,
                backend: self.kv_offloading_backend,
                host_link_gbps: self.host_link_gbps,
                lmcache_chunk_size: self.lmcache_chunk_size,
                lmcache_disk_gib: self.lmcache_max_local_disk_size,
                lmcache_disk_gbps: self.lmcache_disk_gbps,
                lmcache_remote_url: self.lmcache_remote_url.clone(),
                lmcache_remote_rtt_us: self.lmcache_remote_rtt_us,
                lmcache_remote_gbps: self.lmcache_remote_gbps,
            },
            hicache: cachesim::engine::sglang::hicache::HiCacheOptions {
                enable: self.enable_hierarchical_cache,
                ratio: self.hicache_ratio,
                size_gb: self.hicache_size,
                write_policy: self.hicache_write_policy,
                storage_backend: self.hicache_storage_backend,
                prefetch_policy: self.hicache_storage_prefetch_policy,
                storage_gbps: self.storage_gbps,
                storage_latency_ms: self.storage_latency_ms,
                mooncake_segment_bytes: self.mooncake_global_segment_size,
                extra: self.hicache_storage_backend_extra_config,
                retry_interval: self.hicache_storage_prefetch_retry_poll_interval,
                retry_max: self.hicache_storage_prefetch_retry_max_attempts,
            },
            hybrid: cachesim::engine::vllm_hybrid::HybridOptions {
                disable: self.disable_hybrid_kv_cache_manager,
                retention: self.prefix_cache_retention_interval,
            },
            sglang_swa: cachesim::engine::sglang::swa::SwaOptions {
                ratio: self.swa_full_tokens_ratio,
                disable: self.disable_hybrid_swa_memory,
            },
            sglang_mamba: cachesim::engine::sglang::mamba::MambaOptions {
                strategy: self.mamba_radix_cache_strategy,
                full_memory_ratio: self.mamba_full_memory_ratio,
                max_cache_size: self.max_mamba_cache_size,
                track_interval: self.mamba_track_interval,
            },
            sglang_priority: cachesim::engine::sglang::priority::PriorityOptions {
                enable: self.enable_priority_scheduling,
                low_values_first: self.schedule_low_priority_values_first,
                preemption_threshold: self.priority_scheduling_preemption_threshold,
                disable_preemption: self.disable_priority_preemption,
                default_value: self.default_priority_value,
                retraction: self.retraction_policy,
                abort_when_disabled: self.abort_on_priority_when_disabled,
            },
            max_queued_requests: self.max_queued_requests,
            lora: cachesim::engine::vllm_lora::LoraOptions {
                enable: self.enable_lora,
                max_loras: self.max_loras,
                max_cpu_loras: self.max_cpu_loras,
                max_lora_rank: self.max_lora_rank,
                modules: self.lora_modules.clone(),
                load_gbps: self.lora_load_gbps,
            },
            autoscale: cachesim::cluster::autoscale::AutoscaleOptions {
                policy: self.autoscale,
                min_instances: self.min_instances,
                max_instances: self.max_instances,
                metric: self.scale_metric,
                target: self.scale_target,
                sync_period_s: self.hpa_sync_period_s,
                tolerance: self.hpa_tolerance,
                down_window_s: self.scale_down_window_s,
                cold_start_s: self.cold_start_s,
                weights_load_gbps: self.weights_load_gbps,
                sla: cachesim::cluster::planner::SlaOptions {
                    interval_s: self.throughput_adjustment_interval,
                    ttft_ms: self.ttft,
                    itl_ms: self.itl,
                    predictor: self.load_predictor,
                    max_gpu_budget: self.max_gpu_budget,
                    min_endpoint: self.min_endpoint,
                },
            },
        }
    }

    /// Workload options: the client --report-style names samples ShareGPT by default and sends
    /// its default `ignore_eos` with each request the trace does not mark (sglang.bench_serving:
    /// `ignore_eos: true`; vllm bench serve: none).
    pub fn build_options(&self) -> BuildOptions {
        let opts = self.trace.build_options_with(match self.report_style {
            ReportStyle::Sglang => DatasetFilter::Sglang,
            ReportStyle::Vllm => DatasetFilter::Vllm,
        });
        BuildOptions {
            ignore_eos: self.report_style == ReportStyle::Sglang,
            priority_mix: self
                .priority_mix
                .clone()
                .map(|s| cachesim::workload::priority::PriorityMix { shares: s.0, seed: self.seed }),
            lora: (!self.lora_modules.is_empty()).then(|| cachesim::workload::lora::LoraDraw {
                modules: self.lora_modules.clone(),
                assignment: self.lora_assignment.unwrap_or_default(),
                seed: self.seed,
            }),
            ..opts
        }
    }
}

/// Refuses an engine-specific run flag given on the command line (at any value, its default
/// included) for an engine that does not have it ([`cachesim::engine::flags::TABLE`]).
pub fn refuse_foreign_flags(m: &clap::ArgMatches, run: &RunArgs) -> Result<(), cachesim::Error> {
    use clap::CommandFactory;
    // (id, `--long`) of every run flag, built once: a sweep checks every grid point.
    static FLAGS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let flags = FLAGS.get_or_init(|| {
        let cmd = CaseRun::command();
        cmd.get_arguments().filter_map(|a| a.get_long().map(|l| (a.get_id().to_string(), format!("--{l}")))).collect()
    });
    let given = flags
        .iter()
        .filter(|(id, _)| m.try_contains_id(id).unwrap_or(false))
        .filter(|(id, _)| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
        .map(|(_, long)| long.as_str());
    if run.lora_assignment.is_some() && run.lora_modules.is_empty() {
        return Err(cachesim::Error::invalid(
            "--lora-assignment",
            "says how requests draw one of --lora-modules: give the adapters with --lora-modules",
        ));
    }
    cachesim::engine::flags::refuse_foreign(run.options().engine, given)
}

/// `--num-prompts`: a count of requests, at least 1 (a run of none measures nothing).
fn parse_num_prompts(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("0 requests: a benchmark of no request measures nothing; give at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{s}` is not a count of requests (a whole number, at least 1)")),
    }
}

/// One `--goodput` word, checked alone (the whole list is checked for repeats when resolved).
fn parse_goodput_word(s: &str) -> Result<String, String> {
    cachesim::metrics::Goodput::parse(&[s.to_string()]).map(|_| s.to_string())
}

fn parse_slo_header(s: &str) -> Result<cachesim::cluster::router::epp_latency::SloHeader, String> {
    s.parse()
}

fn parse_fail_at(s: &str) -> Result<cachesim::cluster::faults::FailList, String> {
    s.parse()
}

fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse()
}

/// `cachesim cache`.
#[derive(Debug, Args)]
pub struct CacheArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// Cache models, comma-separated, or `all`: paged (vLLM v1 blocks), radix (SGLang),
    /// token (LightLLM), none (no reuse).
    #[arg(long, default_value = "all", value_parser = parse_policies)]
    pub policy: Policies,
    /// Paged block size(s) in tokens, comma-separated (vLLM --block-size; CUDA backends use
    /// 16 or 32, MLA 64/128). Up to 512, so Mooncake traces can be replayed at their own block.
    #[arg(allow_negative_numbers = true, long = "block", visible_alias = "block-size", default_value = "16", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..=512))]
    pub block: Vec<u32>,
    /// Radix page size(s) in tokens, 1..=512, comma-separated (SGLang --page-size).
    #[arg(allow_negative_numbers = true, long, default_value = "1", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=512))]
    pub page_size: Vec<u32>,
    /// KV capacity in tokens, comma-separated: numbers (k = 1e3, M = 1e6, G = 1e9 allowed)
    /// or `unlimited`. Several values give a hit-ratio-vs-capacity table.
    #[arg(allow_negative_numbers = true, long, default_value = "unlimited", value_delimiter = ',', value_parser = parse_capacity)]
    pub capacity_tokens: Vec<Capacity>,
    /// Requests holding KV at once (pinned, not evictable). 1 replays one request at a time.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub inflight: u32,
    /// A host (CPU) tier below the cache, in tokens, comma-separated (0, or numbers with k, M,
    /// G), replayed without timing. Under --policy paged it is vLLM's CPU KV offloading
    /// (--kv-offloading-size, vllm@0.33): each request loads the chunks the host holds past its
    /// GPU hit, stores its full prompt chunks, and is re-ranked in the host's LRU when it
    /// finishes (or LMCache's CPU backend, with --kv-offloading-backend lmcache). Under --policy
    /// radix it is SGLang's HiCache (--enable-hierarchical-cache,
    /// write_through): computed nodes are written to the host, evicted ones stay matchable there,
    /// and a host run of 10 tokens or more is loaded back. Several values give a
    /// hit-ratio-vs-host-memory table (`host hit` is the share loaded from the host). Needs
    /// --policy paged or radix.
    #[arg(allow_negative_numbers = true, long, value_delimiter = ',', value_parser = parse_host_tokens)]
    pub host_capacity_tokens: Vec<u64>,
    /// With --host-capacity-tokens under --policy paged: `native` (vLLM's own CPU offloading,
    /// the default) or `lmcache` (LMCache's CPU backend, in chunks of --lmcache-chunk-size
    /// tokens: a request loads the leading chunks held past its GPU hit and saves its full prompt
    /// chunks once computed; as vLLM up to 0.22 runs it, --engine-version vllm@0.18).
    #[arg(long, value_enum)]
    pub kv_offloading_backend: Option<cachesim::engine::vllm_offload::OffloadBackend>,
    /// With --kv-offloading-backend lmcache: tokens per LMCache chunk (default 256), a whole
    /// number of every --block size.
    #[arg(allow_negative_numbers = true, long, value_name = "TOKENS")]
    pub lmcache_chunk_size: Option<u32>,
    /// With --kv-offloading-backend lmcache: LMCache's local disk backend below its CPU backend,
    /// in tokens, comma-separated (0 for none; e.g. 0,16M,64M): saved chunks are written
    /// through to it, a lookup reads on past the CPU's chunks, and a chunk only the disk holds is
    /// read back for the load (reads and writes taking no time here). With --host-capacity-tokens
    /// a hit-ratio table over both (`disk hit` is the share read from the disk).
    #[arg(allow_negative_numbers = true, long, value_delimiter = ',', value_parser = parse_host_tokens)]
    pub disk_capacity_tokens: Vec<u64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The `--policy` list, in the order given, without repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policies(pub Vec<Policy>);

/// `cachesim analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub trace: TraceArgs,
    /// N: a shared prefix is a radix-tree node reached by at least N conversations whose
    /// children are each reached by fewer.
    #[arg(allow_negative_numbers = true, long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub min_count: u64,
    /// L: keep shared prefixes strictly longer than this (120 characters ≈ one 32-token block).
    #[arg(allow_negative_numbers = true, long, default_value_t = 120)]
    pub min_len: u64,
    /// Unit of lengths: chars (Unicode scalar values) or tokens (--tokenizer for text; the
    /// trace's own ids or blocks otherwise). Default: chars when the trace has text, else tokens.
    #[arg(long, value_enum)]
    pub unit: Option<Unit>,
    /// conversation: every message's value concatenated; first-turn: the first user message.
    #[arg(long, value_enum, default_value = "conversation")]
    pub scope: Scope,
    /// Skip the hit-ratio bounds (the cache replays), e.g. for a quick text-only look.
    #[arg(long)]
    pub no_bounds: bool,
    /// KV bytes per token, to express capacities in GB (default: Llama-3.1-8B in bf16,
    /// 2 × 8 KV heads × 128 dims × 32 layers × 2 bytes).
    #[arg(allow_negative_numbers = true, long, default_value_t = 131_072, value_parser = clap::value_parser!(u64).range(1..))]
    pub kv_bytes_per_token: u64,
    /// Draw the bounds and the histogram of shared-prefix lengths to this SVG or PNG file.
    #[arg(long, value_name = "FILE.svg|png")]
    pub plot: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl AnalyzeArgs {
    /// Library options.
    pub fn options(&self) -> AnalyzeOptions {
        AnalyzeOptions {
            repetition: RepetitionOptions {
                min_count: self.min_count as usize,
                min_len: self.min_len as usize,
                unit: self.unit.unwrap_or(Unit::Chars),
                scope: self.scope,
            },
            bounds: !self.no_bounds,
            tokens_without_text: self.unit.is_none(),
            kv_bytes_per_token: self.kv_bytes_per_token,
        }
    }
}

/// A capacity in tokens; `None` = unlimited.
pub type Capacity = Option<u64>;

impl CacheArgs {
    /// Every (policy, granularity, capacity) to replay, in report order.
    pub fn specs(&self) -> Result<Vec<ReplaySpec>, cachesim::Error> {
        if !self.host_capacity_tokens.is_empty() {
            if let Some(p) = self.policy.0.iter().find(|&&p| !matches!(p, Policy::Paged | Policy::Radix)) {
                return Err(cachesim::Error::invalid(
                    "--host-capacity-tokens",
                    format!(
                        "a host tier sits under the paged cache (vLLM's CPU offloading) or the radix cache (SGLang's \
                         HiCache): --policy {} has none; pass --policy paged or radix",
                        p.name()
                    ),
                ));
            }
        }
        let lmcache_chunk = self.lmcache_chunk()?;
        let hosts: Vec<Option<u64>> = match self.host_capacity_tokens.as_slice() {
            [] => vec![None],
            h => h.iter().map(|&t| Some(t)).collect(),
        };
        if !self.disk_capacity_tokens.is_empty() && lmcache_chunk.is_none() {
            return Err(cachesim::Error::invalid(
                "--disk-capacity-tokens",
                "LMCache's local disk sits under its CPU backend: give --kv-offloading-backend lmcache and \
                 --host-capacity-tokens too",
            ));
        }
        let disks: Vec<Option<u64>> = match self.disk_capacity_tokens.as_slice() {
            [] => vec![None],
            d => d.iter().map(|&t| Some(t)).collect(),
        };
        let mut out = Vec::new();
        for &cap in &self.capacity_tokens {
            for &policy in &self.policy.0 {
                let spec = CacheSpec {
                    policy,
                    block_size: None,
                    page_size: None,
                    capacity_tokens: cap,
                    hybrid: None,
                    sglang_pool: None,
                };
                let caches: Vec<CacheSpec> = match policy {
                    Policy::Paged => self.block.iter().map(|&b| CacheSpec { block_size: Some(b), ..spec }).collect(),
                    Policy::Radix => self.page_size.iter().map(|&p| CacheSpec { page_size: Some(p), ..spec }).collect(),
                    Policy::Token | Policy::None => vec![spec],
                };
                for cache in caches {
                    let lmcache_chunk = lmcache_chunk.filter(|_| policy == Policy::Paged);
                    for &host_tokens in &hosts {
                        out.extend(disks.iter().map(|&disk_tokens| ReplaySpec {
                            cache,
                            host_tokens,
                            lmcache_chunk,
                            disk_tokens,
                        }));
                    }
                }
            }
        }
        Ok(out)
    }
}

impl CacheArgs {
    /// LMCache's chunk under the paged cache's host tier, if asked for; refuses what means
    /// nothing here.
    fn lmcache_chunk(&self) -> Result<Option<u32>, cachesim::Error> {
        use cachesim::engine::vllm_offload::{lmcache::CHUNK_TOKENS, OffloadBackend};
        if self.kv_offloading_backend.is_some() && self.host_capacity_tokens.is_empty() {
            return Err(cachesim::Error::invalid(
                "--kv-offloading-backend",
                "chooses the host tier's connector: give --host-capacity-tokens too",
            ));
        }
        if self.kv_offloading_backend != Some(OffloadBackend::Lmcache) {
            if self.lmcache_chunk_size.is_some() {
                return Err(cachesim::Error::invalid(
                    "--lmcache-chunk-size",
                    "an LMCache setting: give --kv-offloading-backend lmcache too",
                ));
            }
            return Ok(None);
        }
        if self.policy.0.iter().any(|&p| p != Policy::Paged) {
            return Err(cachesim::Error::invalid(
                "--kv-offloading-backend",
                "lmcache sits under vLLM's paged cache: pass --policy paged",
            ));
        }
        let chunk = self.lmcache_chunk_size.unwrap_or(CHUNK_TOKENS);
        if let Some(b) = self.block.iter().find(|&&b| b == 0 || chunk == 0 || !chunk.is_multiple_of(b)) {
            return Err(cachesim::Error::invalid(
                "--lmcache-chunk-size",
                format!("{chunk}: an LMCache chunk is keyed by its last block, so it must be a whole number of {b}-token blocks"),
            ));
        }
        Ok(Some(chunk))
    }
}

/// A size in bytes: digits, optionally followed by K, M, G or T (powers of 1024; `iB` or `B`
/// after it accepted).
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let bad = || format!("`{s}` is not a size in bytes (e.g. 1000000, 512M, 16G)");
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    match n.checked_mul(1 << shift) {
        Some(0) => Err(format!("`{s}`: a trace needs at least one byte")),
        Some(v) => Ok(v),
        None => Err(bad()),
    }
}

fn parse_tokenizer(s: &str) -> Result<TokenizerKind, String> {
    s.parse().map_err(|e: cachesim::Error| e.to_string())
}

fn parse_policies(s: &str) -> Result<Policies, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part == "all" {
            out.extend(Policy::ALL);
            continue;
        }
        let p = <Policy as clap::ValueEnum>::from_str(part, true)
            .map_err(|_| format!("unknown policy `{part}` (expected paged, radix, token, none or all)"))?;
        out.push(p);
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(*p));
    Ok(Policies(out))
}

/// `--dram-price`, `--ssd-price`: a finite number of USD per GiB-hour, at least 0.
fn parse_gib_hour_price(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a price in USD per GiB-hour (a finite number >= 0, e.g. 0.005)")),
    }
}

/// A host tier's tokens: 0, or a count as [`parse_capacity`] reads one (never `unlimited`).
fn parse_host_tokens(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    parse_capacity(s)?.ok_or_else(|| format!("`{s}`: a host tier holds a number of tokens (e.g. 0, 4M, 50M)"))
}

/// Parses `unlimited`, `inf`, `12345`, `512k`, `1.5M`, `2G`.
pub fn parse_capacity(s: &str) -> Result<Capacity, String> {
    let t = s.trim();
    if matches!(t, "unlimited" | "inf" | "none") {
        return Ok(None);
    }
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('M') => (&t[..t.len() - 1], 1e6),
        Some('G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| format!("`{s}` is not a token count (e.g. 65536, 512k, 2M, unlimited)"))?;
    let tokens = v * mult;
    if !(1.0..=1e15).contains(&tokens) || tokens.fract() != 0.0 {
        return Err(format!("`{s}` must be a whole number of tokens between 1 and 1e15"));
    }
    Ok(Some(tokens as u64))
}

/// `cachesim gen`.
#[derive(Debug, Subcommand)]
pub enum GenCommand {
    /// Independent prompts of random token ids (SGLang random-ids).
    Random(GenRandom),
    /// SGLang generated-shared-prefix: groups of requests sharing a system prompt.
    Gsp(GenGsp),
    /// Multi-turn sessions sharing a system prompt, with arrival times and think times.
    Sessions(GenSessions),
}

/// Options every generator takes.
#[derive(Debug, Args)]
pub struct GenCommon {
    /// Output file (native JSONL); stdout when omitted.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Random seed: the same arguments and seed give the same bytes.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0)]
    pub seed: u64,
    /// Token ids are drawn from [0, VOCAB).
    #[arg(allow_negative_numbers = true, long, default_value_t = gen::DEFAULT_VOCAB, value_parser = clap::value_parser!(u32).range(1..1 << 30))]
    pub vocab: u32,
    /// Length spread, SGLang semantics: lengths uniform on [max(1, L·r), L]; 1.0 = fixed.
    #[arg(allow_negative_numbers = true, long)]
    pub range_ratio: Option<f64>,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `gen random`.
#[derive(Debug, Args)]
pub struct GenRandom {
    #[arg(allow_negative_numbers = true, long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub num_prompts: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 1024)]
    pub input_len: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 1024)]
    pub output_len: u32,
    #[command(flatten)]
    pub common: GenCommon,
}

/// `gen gsp`.
#[derive(Debug, Args)]
pub struct GenGsp {
    #[arg(allow_negative_numbers = true, long, default_value_t = 64)]
    pub num_groups: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 16)]
    pub prompts_per_group: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 2048)]
    pub system_prompt_len: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 128)]
    pub question_len: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 256)]
    pub output_len: u32,
    /// Keep group order instead of shuffling (SGLang --gsp-ordered).
    #[arg(long)]
    pub ordered: bool,
    #[command(flatten)]
    pub common: GenCommon,
}

/// `gen sessions`.
#[derive(Debug, Args)]
pub struct GenSessions {
    #[arg(allow_negative_numbers = true, long, default_value_t = 100)]
    pub num_sessions: u32,
    /// User turns per session.
    #[arg(allow_negative_numbers = true, long, default_value_t = 4)]
    pub turns: u32,
    /// Tokens of the system prompt all sessions share.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1024)]
    pub system_prompt_len: u32,
    /// Tokens of each user message.
    #[arg(allow_negative_numbers = true, long, default_value_t = 128)]
    pub user_len: u32,
    #[arg(allow_negative_numbers = true, long, default_value_t = 256)]
    pub output_len: u32,
    /// Sessions started per second (Poisson).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0)]
    pub session_rate: f64,
    /// Mean seconds from one turn's arrival to the next (exponential).
    #[arg(allow_negative_numbers = true, long, default_value_t = 10.0)]
    pub think_time_s: f64,
    #[command(flatten)]
    pub common: GenCommon,
}

/// The big-model flags of `cachesim run` (flattened into its arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct LayoutArgs {
    /// Pipeline stages (vLLM --pipeline-parallel-size): layers split evenly, each stage on its
    /// own TP group; stages pass activations over NVLink or, across nodes, the network.
    #[arg(allow_negative_numbers = true, long, visible_alias = "pipeline-parallel-size", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=64), help_heading = "Big models")]
    pub pp: u64,
    /// Spread whole routed experts over the TP ranks instead of sharding each (vLLM
    /// --enable-expert-parallel; SGLang --ep-size equal to --tp).
    #[arg(long, visible_alias = "ep", help_heading = "Big models")]
    pub enable_expert_parallel: bool,
    /// SGLang --enable-dp-attention: attention data-parallel in --dp-size groups (default: one
    /// per TP rank), each with its own KV cache; the MoE layers stay tensor/expert parallel.
    #[arg(long, help_heading = "Big models")]
    pub enable_dp_attention: bool,
    /// Attention DP groups with --enable-dp-attention (must divide --tp) [default: --tp].
    #[arg(allow_negative_numbers = true, long, value_parser = clap::value_parser!(u64).range(1..=64), help_heading = "Big models")]
    pub dp_size: Option<u64>,
    /// Nodes the instance spans (TP × PP GPUs split evenly; ranks fill a node first).
    #[arg(allow_negative_numbers = true, long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64), help_heading = "Big models")]
    pub nnodes: u64,
    /// Network between nodes (built in: see models/networks.toml).
    #[arg(long, default_value = "cx7-8x400", help_heading = "Big models")]
    pub network: String,
    /// A TOML file with a [[network]] table, instead of --network.
    #[arg(long, value_name = "FILE", help_heading = "Big models")]
    pub network_file: Option<PathBuf>,
    /// KV-cache element type (auto = the model's bf16; fp8 halves KV bytes per token).
    #[arg(long, value_enum, default_value = "auto", help_heading = "Big models")]
    pub kv_cache_dtype: KvCacheDtype,
    /// The recurrent state's element type in a model's linear-attention layers (Qwen3-Next):
    /// SGLang --mamba-ssm-dtype (default float32), vLLM --mamba-ssm-cache-dtype (default: the
    /// model's bfloat16). Refused for a model without such layers.
    #[arg(long, value_enum, alias = "mamba-ssm-cache-dtype", help_heading = "Big models")]
    pub mamba_ssm_dtype: Option<SsmDtype>,
    /// MoE routing skew in [0, 1): tokens route as though only the hottest (1 − skew) of the
    /// experts were in use, so a step reads fewer distinct experts (0 = uniform).
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.0, help_heading = "Big models")]
    pub moe_skew: f64,
    /// Speculative decoding draft (SGLang --speculative-algorithm; vLLM speculative_config method).
    #[arg(long, value_enum, default_value = "none", help_heading = "Big models")]
    pub speculative_algorithm: SpecAlgorithm,
    /// Draft tokens per step (SGLang --speculative-num-steps) [default: 3 for mtp/eagle, 4 for ngram].
    #[arg(allow_negative_numbers = true, long, visible_alias = "speculative-num-steps", value_parser = clap::value_parser!(u32).range(1..=16),
          help_heading = "Big models")]
    pub num_speculative_tokens: Option<u32>,
    /// Acceptance rate per draft position, one value or a comma-separated list [default for
    /// mtp: 0.85, DeepSeek-V3 report §5.4.3].
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true, help_heading = "Big models")]
    pub spec_acceptance_rate: Vec<f64>,
    /// SGLang --moe-a2a-backend: deepep prices MoE all-to-alls as DeepEP's kernels (FP8
    /// dispatch, node-deduplicated RDMA in normal mode; implies expert parallelism; needs DP
    /// attention).
    #[arg(long, value_enum, default_value = "none", help_heading = "Big models")]
    pub moe_a2a_backend: MoeA2aBackend,
    /// SGLang 0.4's spelling of --moe-a2a-backend deepep.
    #[arg(long, help_heading = "Big models")]
    pub enable_deepep_moe: bool,
    /// SGLang --deepep-mode: auto (normal kernels for prefill, low-latency for decode), normal
    /// or low_latency.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Big models")]
    pub deepep_mode: DeepEpMode,
    /// SGLang --enable-two-batch-overlap: two micro-batches, each one's DeepEP all-to-alls
    /// behind the other's compute.
    #[arg(long, help_heading = "Big models")]
    pub enable_two_batch_overlap: bool,
}

impl LayoutArgs {
    /// Library options.
    pub fn options(&self) -> LayoutOptions {
        LayoutOptions {
            pp: self.pp,
            ep: self.enable_expert_parallel,
            dp_attention: self.enable_dp_attention,
            dp_size: self.dp_size,
            nnodes: self.nnodes,
            network: self.network.clone(),
            network_file: self.network_file.clone(),
            kv_cache_dtype: self.kv_cache_dtype,
            moe_skew: self.moe_skew,
            speculative_algorithm: self.speculative_algorithm,
            num_speculative_tokens: self.num_speculative_tokens,
            spec_acceptance_rate: self.spec_acceptance_rate.clone(),
            moe_a2a_backend: if self.enable_deepep_moe { MoeA2aBackend::Deepep } else { self.moe_a2a_backend },
            deepep_mode: self.deepep_mode,
            two_batch_overlap: self.enable_two_batch_overlap,
            ssm_dtype: self.mamba_ssm_dtype,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core names its closed choices itself (reports print those names); clap's values are
    /// the same words, so a flag's value and the report's word agree.
    #[test]
    fn clap_values_are_the_core_names() {
        use clap::ValueEnum;
        for v in EngineVersion::ALL {
            assert_eq!(EngineVersion::from_str(v.name(), false), Ok(v));
        }
        for r in RouterKind::ALL {
            assert_eq!(r.to_possible_value().unwrap().get_name(), r.name());
        }
        assert_eq!(RouterKind::value_variants(), RouterKind::ALL);
        for m in DeepEpMode::ALL {
            assert_eq!(m.to_possible_value().unwrap().get_name(), m.name());
        }
        assert_eq!(DeepEpMode::value_variants(), DeepEpMode::ALL);
    }

    /// `--enable-deepep-moe` is SGLang 0.4's spelling of `--moe-a2a-backend deepep`.
    #[test]
    fn layout_flags_parse_into_options() {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            layout: LayoutArgs,
        }
        let cli = Cli::parse_from(["x", "--enable-deepep-moe", "--deepep-mode", "low_latency"]);
        let o = cli.layout.options();
        assert_eq!(
            (o.moe_a2a_backend, o.deepep_mode, o.two_batch_overlap),
            (MoeA2aBackend::Deepep, DeepEpMode::LowLatency, false)
        );
        let cli = Cli::parse_from(["x", "--moe-a2a-backend", "deepep", "--enable-two-batch-overlap"]);
        assert_eq!(cli.layout.options().moe_a2a_backend, MoeA2aBackend::Deepep);
        assert!(cli.layout.options().two_batch_overlap);
    }

    /// Every flag that takes a number takes a negative one as its value (`--x -5`, not only
    /// `--x=-5`), so that the flag's own range check answers rather than clap's "unexpected
    /// argument '-5'". A flag takes numbers when `x` is refused as its value and `1` is not.
    #[test]
    fn numeric_flags_take_negative_values() {
        fn walk(cmd: &clap::Command, path: Vec<String>, bad: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let mut p = path.clone();
                p.push(sub.get_name().to_string());
                walk(sub, p, bad);
            }
            let root = <Cli as clap::CommandFactory>::command();
            for arg in cmd.get_arguments().filter(|a| a.get_action().takes_values() && a.get_long().is_some()) {
                let long = format!("--{}", arg.get_long().unwrap_or_default());
                let parse = |v: &str| {
                    let mut argv = vec!["cachesim".to_string()];
                    argv.extend(path.iter().cloned());
                    argv.extend([long.clone(), v.to_string()]);
                    root.clone().try_get_matches_from(argv)
                };
                let value_error = |e: &clap::Error| {
                    matches!(e.kind(), clap::error::ErrorKind::ValueValidation | clap::error::ErrorKind::InvalidValue)
                };
                let numeric = parse("1").as_ref().err().is_none_or(|e| !value_error(e))
                    && parse("x").as_ref().err().is_some_and(value_error);
                let dash = |e: &clap::Error| e.kind() == clap::error::ErrorKind::UnknownArgument;
                if numeric && parse("-5").as_ref().err().is_some_and(dash) {
                    bad.push(format!("{} {long}", path.join(" ")));
                }
            }
        }
        let mut bad = Vec::new();
        walk(&<Cli as clap::CommandFactory>::command(), Vec::new(), &mut bad);
        assert!(bad.is_empty(), "flags that take a number but not `-5` as a value: {bad:?}");
    }

    /// Every subcommand's help, with the path of words that reaches it.
    fn every_help() -> Vec<(Vec<String>, String)> {
        fn walk(cmd: &mut clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
            out.push((path.clone(), cmd.render_long_help().to_string()));
            for sub in cmd.get_subcommands_mut() {
                let mut p = path.clone();
                p.push(sub.get_name().to_string());
                walk(sub, p, out);
            }
        }
        let mut out = Vec::new();
        let mut root = <Cli as clap::CommandFactory>::command();
        root.build();
        walk(&mut root, Vec::new(), &mut out);
        out
    }

    /// The examples a help cites exist: every repository path it names (examples/…, docs/…,
    /// calibration/…, traces/…, models/…), every example command line (`cachesim …` lines)
    /// parses, and every command quoted in backticks names a subcommand and flags it has.
    #[test]
    fn help_examples_exist() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let cmd = <Cli as clap::CommandFactory>::command();
        let mut examples = 0;
        for (path, help) in every_help() {
            let at = format!("`cachesim {} --help`", path.join(" "));
            for word in help.split(|c: char| c.is_whitespace() || "(),;`'\"[]".contains(c)) {
                let word = word.trim_end_matches(['.', ':']);
                if ["examples/", "docs/", "calibration/", "traces/", "models/"].iter().any(|d| word.starts_with(d)) {
                    assert!(root.join(word).exists(), "{at} cites {word}, which does not exist");
                }
            }
            let example = |l: &&str| (l.starts_with("cachesim ") || *l == "cachesim") && !l.contains(['<', '[']);
            for line in help.lines().map(str::trim).filter(example) {
                let words: Vec<&str> = line.split(" #").next().unwrap_or_default().split_whitespace().collect();
                if let Err(e) = Cli::try_parse_from(&words) {
                    panic!("{at}: the example `{line}` does not parse: {e}");
                }
                examples += 1;
            }
            for quoted in help.split('`').skip(1).step_by(2).filter(|q| q.starts_with("cachesim ")) {
                let mut sub = &cmd;
                for word in quoted.split_whitespace().skip(1) {
                    if let Some(flag) = word.strip_prefix("--") {
                        assert!(
                            sub.get_arguments().any(|a| a.get_long() == Some(flag)),
                            "{at} quotes `{quoted}`: `{}` has no --{flag}",
                            sub.get_name()
                        );
                    } else if !word.starts_with('-') && sub.has_subcommands() {
                        sub =
                            sub.find_subcommand(word).unwrap_or_else(|| panic!("{at} quotes `{quoted}`: no `{word}`"));
                    }
                }
            }
        }
        assert!(examples >= 5, "the top-level help's examples were not found");
    }

    /// `sweep`, `plan` and `calibrate` list their own flags before the run flags they share.
    #[test]
    fn own_flags_come_first_in_help() {
        for (path, own, run) in
            [("sweep", "--rank-by", "--trace"), ("plan", "--slo", "--trace"), ("calibrate", "--report", "--trace")]
        {
            let help = every_help().into_iter().find(|(p, _)| p == &[path]).map(|(_, h)| h).unwrap_or_default();
            let at = |flag: &str| help.find(&format!("      {flag} ")).unwrap_or_else(|| panic!("{path}: {flag}"));
            assert!(at(own) < at(run), "`cachesim {path} --help` lists {run} before its own {own}");
            assert!(help.contains("\nRun:\n"), "`cachesim {path} --help` heads the run flags `Run:`");
        }
    }

    /// clap's own consistency checks (argument ids in conflicts and requirements, duplicate
    /// flags of flattened structs such as `calibrate`'s run flags).
    #[test]
    fn command_line_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn capacities() {
        assert_eq!(parse_capacity("unlimited"), Ok(None));
        assert_eq!(parse_capacity("512k"), Ok(Some(512_000)));
        assert_eq!(parse_capacity("1.5M"), Ok(Some(1_500_000)));
        assert_eq!(parse_capacity("4096"), Ok(Some(4096)));
        assert!(parse_capacity("0").is_err());
        assert!(parse_capacity("-5").is_err());
        assert!(parse_capacity("1.5").is_err());
        assert!(parse_capacity("lots").is_err());
    }

    #[test]
    fn policies_and_specs() {
        assert_eq!(parse_policies("all").unwrap().0, Policy::ALL.to_vec());
        assert_eq!(parse_policies("radix,paged,radix").unwrap().0, vec![Policy::Radix, Policy::Paged]);
        assert!(parse_policies("lru").is_err());
        let cli = Cli::parse_from([
            "cachesim",
            "cache",
            "--policy",
            "paged,none",
            "--block",
            "16,32",
            "--capacity-tokens",
            "1k,unlimited",
        ]);
        let Some(Command::Cache(args)) = cli.command else { panic!("cache") };
        let specs = args.specs().unwrap();
        assert_eq!(specs.len(), 6);
        assert_eq!(specs[1].cache.block_size, Some(32));
        assert_eq!(specs[2].cache.policy, Policy::None);
        assert_eq!(specs[3].cache.capacity_tokens, None);
        assert!(specs.iter().all(|s| s.host_tokens.is_none()));
        // Host tiers multiply the paged replays.
        let cli = Cli::parse_from(["cachesim", "cache", "--policy", "paged", "--host-capacity-tokens", "0,2M"]);
        let Some(Command::Cache(args)) = cli.command else { panic!("cache") };
        let hosts: Vec<_> = args.specs().unwrap().iter().map(|s| s.host_tokens).collect();
        assert_eq!(hosts, [Some(0), Some(2_000_000)]);
    }

    #[test]
    fn rejects_bad_numbers() {
        assert!(Cli::try_parse_from(["cachesim", "cache", "--block", "0"]).is_err());
        assert!(Cli::try_parse_from(["cachesim", "cache", "--block", "513"]).is_err());
        assert!(Cli::try_parse_from(["cachesim", "cache", "--inflight", "0"]).is_err());
        assert!(Cli::try_parse_from(["cachesim", "cache", "--tokenizer", "gpt9"]).is_err());
    }
}

// ---- `sweep`, `merge` and `plan`: grids over the run flags ----

/// The grid flags `sweep` and `plan` share.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// A run flag and its values: FLAG=v1,v2,… where a value may be an integer range a..b or
    /// a..b:step (b included), e.g. max-num-seqs=16,24,32 or max-num-batched-tokens=2048..8192:1024.
    /// Flags without a value take true/false; `unset` leaves out a flag that has no default
    /// (kv-offloading-size=unset,16,64: no host tier, then two sizes). Repeated: the cartesian product, the first --grid
    /// varying slowest.
    #[arg(long, value_name = "FLAG=VALUES", help_heading = "Grid")]
    pub grid: Vec<String>,
    /// Zipped lists: the k-th values of every --zip flag go together (equal lengths); the group
    /// is the last axis of the --grid product.
    #[arg(long, value_name = "FLAG=VALUES", help_heading = "Grid")]
    pub zip: Vec<String>,
    /// GPU profiles to compare, as many as given: `--gpus a,b` is `--grid gpu=a,b` (the list
    /// becomes that axis before the other flags are read, so this value itself is never used).
    #[arg(long, value_name = "GPU,…", help_heading = "Grid")]
    pub gpus: Option<String>,
    /// A sweep file (TOML): fixed run flags in [run], axes in [grid] and [zip], rank-by,
    /// ascending, and slo for plan (see examples/vllm-tuning.toml and docs/guide/sweep.md). Flags on the command line win
    /// over [run]; --grid and --zip axes follow the file's.
    #[arg(long, value_name = "FILE.toml", help_heading = "Grid")]
    pub file: Option<PathBuf>,
    /// Most points a grid may have (a larger one is refused before anything runs: each point is
    /// a whole simulation); raise it up to 1000000.
    #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000), help_heading = "Grid")]
    pub max_points: u64,
}

/// `cachesim sweep`: every run flag sets the base; the grid overrides the flags it names.
#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub grid: GridArgs,
    /// Rank by this metric (a key of `cachesim run --json`, e.g. output_throughput,
    /// median_ttft_ms, p99_tpot_ms); ties go to the table's next metric, then grid order.
    #[arg(long, default_value = "output_throughput", help_heading = "Grid")]
    pub rank_by: String,
    /// Smallest first [default for latencies (`*_ms`), duration, failed and preemptions].
    #[arg(long, conflicts_with = "descending", help_heading = "Grid")]
    pub ascending: bool,
    /// Largest first [default for throughputs and counts].
    #[arg(long, help_heading = "Grid")]
    pub descending: bool,
    /// Write one row per point, in grid order, to this CSV file (point, the knobs, the metric
    /// keys of `run --json`, error); written to a temporary file and renamed.
    #[arg(long, value_name = "FILE", help_heading = "Grid")]
    pub csv: Option<PathBuf>,
    /// Run only slice I of N disjoint slices of the grid (0 <= I < N; point k is in slice
    /// k mod N), for job arrays; `cachesim merge` joins the slices' CSVs. Beside the --csv FILE
    /// goes FILE.sweep.json, the slice and what identifies the sweep, which merge compares.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, help_heading = "Grid")]
    pub shard: Option<cachesim::sweep::Shard>,
    /// Draw the --rank-by metric over the first two grid knobs (best over the others) to this
    /// SVG or PNG file.
    #[arg(long, value_name = "FILE.svg|png", help_heading = "Grid")]
    pub heatmap: Option<PathBuf>,
    /// Real runs to compare with (CSV: columns named as the grid knobs, - or _, and as metric
    /// keys or output_tok_s; others are labels): real against predicted, and Spearman's rho per
    /// metric.
    #[arg(long, value_name = "REAL.csv", help_heading = "Grid")]
    pub compare: Option<PathBuf>,
    /// The base of every point, after the sweep's own flags in the help.
    #[command(flatten, next_help_heading = "Run")]
    pub run: RunArgs,
}

fn parse_shard(s: &str) -> Result<cachesim::sweep::Shard, String> {
    s.parse()
}

/// `cachesim merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' CSV files (`cachesim sweep --shard I/N --csv …`), in any order, each with
    /// its .sweep.json sidecar beside it: shards of different sweeps, and a slice given twice
    /// or missing, are refused.
    #[arg(required = true, value_name = "SHARD.csv")]
    pub inputs: Vec<PathBuf>,
    /// The merged file: byte for byte the CSV of the same sweep run unsharded.
    #[arg(long, value_name = "FILE", required = true)]
    pub csv: PathBuf,
}

/// `cachesim plan`: every run flag sets the base (but --request-rate, which is searched).
#[derive(Debug, Args)]
#[command(mut_arg("plot", |a| a.help("Draw each SLO metric against the request rate for the --top configurations (or cheapest deployments), with the SLO limit, to this SVG or PNG file")))]
pub struct PlanArgs {
    /// Limits in ms, comma-separated: METRIC_STAT=MS with METRIC ttft, tpot, e2e or itl and STAT
    /// mean, median, max or pNN (e.g. ttft_p99=2000,tpot_p99=50), or the sglang JSON keys
    /// (p99_ttft_ms=2000); and failed_pct=P, at most P % of the requests sent failed (instance
    /// failures, rejections: the latency limits see completed requests only). METRIC_STAT@P
    /// limits the requests of priority P alone (a tenant's or class's SLO, e.g.
    /// ttft_p99@0=500,ttft_p99@1=5000 with --priority-mix 0:0.2,1:0.8).
    /// Required here or as `slo` in the --file.
    #[arg(long, value_parser = parse_slo, help_heading = "Plan")]
    pub slo: Option<cachesim::plan::Slo>,
    /// Relative precision of the answer: the reported rate R meets the SLO and a rate of
    /// R × (1 + tolerance) does not.
    #[arg(allow_negative_numbers = true, long, default_value_t = 0.01, help_heading = "Plan")]
    pub tolerance: f64,
    /// First rate tried (req/s); the search doubles or halves from it to bracket the boundary.
    #[arg(allow_negative_numbers = true, long, default_value_t = 1.0, help_heading = "Plan")]
    pub start_rate: f64,
    /// Highest rate tried (req/s); a configuration still within the SLO there is reported as
    /// unbounded.
    #[arg(allow_negative_numbers = true, long, default_value_t = 100_000.0, help_heading = "Plan")]
    pub max_rate: f64,
    /// Keep the trace's own arrival pattern and scale its time stamps (as --time-scale) to each
    /// rate tried, instead of Poisson arrivals; the rate is the mean send rate.
    #[arg(long, help_heading = "Plan")]
    pub trace_shape: bool,
    /// Find the cheapest deployment meeting the SLO at this rate (req/s) instead of each
    /// configuration's highest rate: the grid's points (e.g. --gpus a,b --tp 1,2,4) each with
    /// the fewest instances (--instances 1..16, bisected) that meet it, priced by --gpu-price
    /// (without prices: the deployment with the fewest GPUs).
    #[arg(allow_negative_numbers = true, long, value_name = "REQ/S", help_heading = "Deployment")]
    pub target_rate: Option<f64>,
    /// GPU prices in USD per GPU-hour, GPU=USD,… (e.g. h100-sxm=3.50,a100-80gb=1.80); none are
    /// built in. Repeatable.
    #[arg(long, value_name = "GPU=USD_PER_HOUR,…", value_parser = parse_prices, help_heading = "Deployment")]
    pub gpu_price: Vec<cachesim::plan::deploy::Prices>,
    /// Host memory in USD per GiB-hour, for the host KV tiers of each instance
    /// (--kv-offloading-size, also as a grid axis: kv-offloading-size=unset,64,256; HiCache's
    /// host pool; the segment each instance adds to a Mooncake store): the plan's cost adds
    /// instances × size × price. Needed by a priced plan with a host tier (0 prices
    /// memory you already have).
    #[arg(allow_negative_numbers = true, long, value_name = "USD_PER_GIB_HOUR", value_parser = parse_gib_hour_price, help_heading = "Deployment")]
    pub dram_price: Option<f64>,
    /// Disk in USD per GiB-hour, for the disk KV tiers of each instance (LMCache's
    /// --lmcache-max-local-disk-size on every rank; HiCache's file store at its max_size; also
    /// as a grid axis): the plan's cost adds instances × disk × price. Needed by a priced plan
    /// with a disk tier (0 prices disk you already have).
    #[arg(allow_negative_numbers = true, long, value_name = "USD_PER_GIB_HOUR", value_parser = parse_gib_hour_price, help_heading = "Deployment")]
    pub ssd_price: Option<f64>,
    /// Curves in the --plot figure: the best N configurations (cheapest N deployments).
    #[arg(allow_negative_numbers = true, long, default_value_t = 4, value_name = "N", help_heading = "Plan")]
    pub top: usize,
    #[command(flatten)]
    pub grid: GridArgs,
    /// The base of every configuration, after the plan's own flags in the help.
    #[command(flatten, next_help_heading = "Run")]
    pub run: RunArgs,
}

fn parse_prices(s: &str) -> Result<cachesim::plan::deploy::Prices, String> {
    s.parse().map_err(|e: cachesim::Error| e.to_string())
}

fn parse_slo(s: &str) -> Result<cachesim::plan::Slo, String> {
    s.parse().map_err(|e: cachesim::Error| e.to_string())
}

/// `cachesim calibrate`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["report", "fit"])))]
pub struct CalibrateArgs {
    /// The report file, as the benchmark client printed it (text), or its saved result (sglang
    /// result JSONL, vLLM --save-result JSON). Alone: print what was read. With -o: fit the
    /// step-time factors to it, the run flags (--deployment, --trace, --model, --gpu,
    /// --request-rate, --max-concurrency, --num-prompts, …) describing what was run.
    #[arg(long, value_name = "FILE", conflicts_with = "fit")]
    pub report: Option<PathBuf>,
    /// Fit the step-time factors to the cases named by --cases and write the profile to --out.
    #[arg(long, requires_all = ["cases", "out"])]
    pub fit: bool,
    /// Case names to fit on: globs over the case names in --cases-dir, comma-separated (e.g.
    /// 'P001,P009' or 'P00[19]').
    #[arg(long, value_name = "PATTERN")]
    pub cases: Option<String>,
    /// Folder of case files.
    #[arg(long, value_name = "DIR", default_value = "calibration/cases")]
    pub cases_dir: PathBuf,
    /// Where to write the profile (TOML); with --report, fit the profile to that report.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// With --report and -o: fit even when the report's totals (completed requests, input and
    /// output tokens) differ from the rebuilt run's by more than 1 % (the profile's
    /// assumptions say so).
    #[arg(long, requires = "report")]
    pub accept_totals_mismatch: bool,
    /// Metric weights of the objective, metric=weight,… [default: output_throughput=1,
    /// median_ttft_ms=1,median_tpot_ms=1,median_e2e_latency_ms=1; with --unknown-hardware also
    /// mean_ttft_ms, p99_ttft_ms, median_itl_ms, p99_itl_ms and peak_output_throughput at 1].
    #[arg(long, value_name = "LIST")]
    pub weights: Option<String>,
    /// Nelder–Mead iterations at most.
    #[arg(allow_negative_numbers = true, long, default_value_t = 150)]
    pub max_iters: u64,
    /// The cases' GPU and model are stand-ins for an unknown setup: fit a measured step law
    /// instead of the roofline's factors — device seconds per step + per prefill token + per
    /// decoding sequence + per context token, host overheads 0 (the law times the whole step).
    /// The stand-ins still size the KV pool. See --weights for its default objective.
    #[arg(long, conflicts_with = "wide_bounds")]
    pub unknown_hardware: bool,
    /// The GPU and model are known but the engine runs far from their physics (e.g. eagerly,
    /// or a worker engine not stated): let the roofline's factors leave their physical ranges
    /// (efficiencies down to 0.01, up to 1 s per step and 10 ms per sequence).
    #[arg(long)]
    pub wide_bounds: bool,
    /// Skip the leave-one-out refits (faster; the profile then records no hold-out error).
    #[arg(long)]
    pub no_loo: bool,
    /// With --fit: allow cases of different engine families (one GPU still) in one fit; the
    /// profile records engine `any`, which no run picks on its own (use `--calibration FILE`).
    /// For a cross-engine figure of a GPU's device factors, e.g. both H20 seed runs.
    #[arg(long, requires = "fit")]
    pub any_engine: bool,
    /// A note on the fit for its readers (repeatable), kept in the profile's `[fit] notes`. A
    /// refit to a file that already holds a profile keeps that profile's notes, so what was
    /// learnt about a fit survives its regeneration; the new notes are added after them.
    #[arg(long, value_name = "TEXT")]
    pub note: Vec<String>,
    /// Start the search from this profile's factors; the factors no case constrains keep its
    /// values (e.g. an H200 kernel profile's per-kernel floor for an H100 serving fit).
    #[arg(long, value_name = "FILE")]
    pub start: Option<PathBuf>,
    /// With --fit: fit only these factors (comma-separated names, e.g.
    /// `kernel_floor_s,step_overhead_s,per_seq_overhead_s`), every other one held at the
    /// --start profile's value (the priors without one) — a piece of the step time fitted where
    /// it is measured, e.g. an engine's host time and kernel count over one GPU's serving runs
    /// with the device factors held at a kernel profile's.
    #[arg(long, value_name = "LIST")]
    pub factors: Option<String>,
    /// A prior on every fitted factor: pull it toward its --start value (the priors without
    /// one) in log space, as if one more case measured it there within a factor of e^SIGMA
    /// (0.5: about 1.65×). Where few cases constrain a factor it stays near physics; many
    /// cases still move it. Kept in the profile's record; without it, no pull.
    #[arg(allow_negative_numbers = true, long, value_name = "SIGMA")]
    pub prior_sigma: Option<f64>,
    /// The data folder the cases' data sets are relative to [default: $CACHESIM_DATA].
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Which result of a JSONL file holding several (1-based).
    #[arg(allow_negative_numbers = true, long, value_name = "N")]
    pub record: Option<usize>,
    /// List the lines (or JSON keys) not recognised.
    #[arg(short, long)]
    pub verbose: bool,
    /// What the report's run was (with --report and -o), as for `cachesim run`; its --json
    /// prints the report read as JSON. After calibrate's own flags in the help.
    #[command(flatten, next_help_heading = "Run")]
    pub run: RunArgs,
}

/// `cachesim validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Case names to run: globs over the case names in --cases-dir, comma-separated (e.g.
    /// 'P001,P009' or 'P00*') [default: every case].
    #[arg(long, value_name = "PATTERN")]
    pub cases: Option<String>,
    /// Folder of case files (*.toml).
    #[arg(long, value_name = "DIR", default_value = "calibration/cases")]
    pub cases_dir: PathBuf,
    /// The data folder the cases' data sets are relative to [default: $CACHESIM_DATA]; cases
    /// whose data is absent are listed as not run.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Simulate with the raw roofline instead of the fitted profiles.
    #[arg(long, conflicts_with_all = ["leave_one_out", "leave_group_out"])]
    pub uncalibrated: bool,
    /// Predict each case a profile was fitted on from that profile refitted without it (same
    /// factors, bounds, weights and iterations as its `fit` record); held-out cases keep their
    /// prediction. The summary and the gate are then leave-one-out.
    #[arg(long, conflicts_with = "leave_group_out")]
    pub leave_one_out: bool,
    /// Predict each group of cases (by GPU, or by source: a published point's page; seed runs
    /// and other reports together) without the group's cases, from the first of: (a) its
    /// profile refitted on its cases outside the group; (b) the engine family's factors fitted
    /// on the family's cases of the same model class (dense or MoE/MLA, speculative decoding or
    /// not) outside the group, since a class's factors absorb what the roofline leaves out of
    /// it (expert routing, MLA, draft-and-verify steps) and do not transfer to another; (c) the
    /// device factors of the kernel steps when measured outside the group, the priors' host and
    /// communication time, rows marked `group-out (kernel device)`; (d) the step-time priors
    /// alone, fitted on nothing (as --uncalibrated), rows marked `group-out (prior)`. Every rung
    /// holds out every factor: all are in the mode's summary and the gate; the summary is
    /// printed again over the published points alone and per rung. A case no profile matches
    /// keeps the composed prior `run` gives it, without any engine piece fitted on its group.
    #[arg(long, value_enum, value_name = "gpu|source")]
    pub leave_group_out: Option<GroupBy>,
    /// Fail (exit status 1) when the median |error| of the honest predictions (held out; with
    /// --leave-one-out or --leave-group-out, those refits and priors) over the metrics
    /// output_throughput, median_ttft_ms, median_tpot_ms and median_e2e_latency_ms, pooled,
    /// exceeds this many percent.
    #[arg(allow_negative_numbers = true, long, value_name = "PCT")]
    pub max_held_out_error: Option<f64>,
    /// Print JSON: rows, summary per metric, the pooled figure --max-held-out-error gates, cases
    /// not expressible.
    #[arg(long)]
    pub json: bool,
    /// Also write the table as CSV: one row per case and metric (case, metric, measured,
    /// predicted, error_pct, profile = fitted, held-out, raw, loo, group-out, group-out (prior),
    /// or why no refit was possible).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw predicted against measured, log–log, one colour per source (a dot: priced by a
    /// profile that never saw the case, held out or refitted without it; a cross: by a profile
    /// fitted on it; a ring: by the raw roofline) to this SVG or PNG file.
    #[arg(long, value_name = "F.svg")]
    pub plot: Option<PathBuf>,
    /// Also write the residual table the error bars of `run`, `sweep` and `plan` come from
    /// (needs --leave-group-out source): one row per honestly predicted serving case and
    /// headline metric (output throughput, median TTFT, TPOT and E2E), with its deployment (GPU,
    /// architecture, engine family and release, model class, load regime), source, measured and
    /// predicted values. The built-in table is `calibration/residuals.csv`, written by
    /// `validate --data D --leave-group-out source --cases '*' --residuals calibration/residuals.csv`.
    #[arg(long, value_name = "FILE")]
    pub residuals: Option<PathBuf>,
}

/// How `validate --leave-group-out` groups the cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// The GPU profile a case runs on.
    Gpu,
    /// A published point's source page; seed runs and other reports form one group.
    Source,
}

/// A case's `cachesim run` arguments, parsed as the command line would be.
#[derive(Debug, Parser)]
#[command(name = "case")]
pub struct CaseRun {
    #[command(flatten)]
    pub run: RunArgs,
}
