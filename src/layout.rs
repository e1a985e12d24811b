//! The big-model flags of a run — pipeline stages, expert parallelism, DP attention, nodes and
//! their network, the KV element type, MoE routing skew and speculative decoding — resolved
//! into the [`Deployment`] the step-time model and the KV sizing use.

use crate::catalog::{self, Dtype, Model};
use crate::cost::ep::{DeepEpMode, MoeA2a};
use crate::cost::parallel::Parallel;
use crate::cost::spec::{SpecAlgorithm, SpecDecode};
use crate::cost::Deployment;
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::PathBuf;

/// vLLM / SGLang `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    /// The model's activation type (bf16 for every built-in model).
    #[default]
    Auto,
    /// One byte per element (fp8 e4m3).
    Fp8,
}

/// SGLang `--moe-a2a-backend` (the MoE all-to-all implementation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MoeA2aBackend {
    /// The plain all-to-all (cachesim: top-k BF16 copies over NVLink and the NICs).
    #[default]
    None,
    /// DeepEP's kernels: normal (prefill) and low-latency (decode) modes.
    Deepep,
}

/// What the user set; the defaults are a one-node TP instance without speculation.
#[derive(Debug, Clone, PartialEq)]
pub struct LayoutOptions {
    /// `--pp` (vLLM `--pipeline-parallel-size`).
    pub pp: u64,
    /// `--enable-expert-parallel` (SGLang `--ep-size` equal to TP).
    pub ep: bool,
    /// `--enable-dp-attention`.
    pub dp_attention: bool,
    /// `--dp-size` with DP attention; `None` = TP (SGLang's usual DeepSeek setting).
    pub dp_size: Option<u64>,
    /// `--nnodes`.
    pub nnodes: u64,
    /// `--network` (a built-in profile name) or `--network-file`.
    pub network: String,
    pub network_file: Option<PathBuf>,
    pub kv_cache_dtype: KvCacheDtype,
    /// `--moe-skew`.
    pub moe_skew: f64,
    pub speculative_algorithm: SpecAlgorithm,
    pub num_speculative_tokens: Option<u32>,
    /// `--spec-acceptance-rate`: one value, or one per draft position.
    pub spec_acceptance_rate: Vec<f64>,
    /// `--moe-a2a-backend` (`--enable-deepep-moe` = `deepep`).
    pub moe_a2a_backend: MoeA2aBackend,
    /// `--deepep-mode`.
    pub deepep_mode: DeepEpMode,
    /// `--enable-two-batch-overlap`.
    pub two_batch_overlap: bool,
}

impl Default for LayoutOptions {
    fn default() -> Self {
        Self {
            pp: 1,
            ep: false,
            dp_attention: false,
            dp_size: None,
            nnodes: 1,
            network: "cx7-8x400".into(),
            network_file: None,
            kv_cache_dtype: KvCacheDtype::Auto,
            moe_skew: 0.0,
            speculative_algorithm: SpecAlgorithm::None,
            num_speculative_tokens: None,
            spec_acceptance_rate: Vec::new(),
            moe_a2a_backend: MoeA2aBackend::None,
            deepep_mode: DeepEpMode::Auto,
            two_batch_overlap: false,
        }
    }
}

impl LayoutOptions {
    /// The deployment of `model` on `tp` ranks per stage, checked.
    pub fn resolve(&self, model: &Model, tp: u64) -> Result<Deployment> {
        let dp_attention = match (self.dp_attention, self.dp_size) {
            (false, None) => 1,
            (false, Some(_)) => {
                return Err(Error::invalid("--dp-size", "applies with --enable-dp-attention (attention DP inside TP)"))
            }
            (true, d) => d.unwrap_or(tp),
        };
        // SGLang sets ep_size = tp_size when DeepEP is on (server_args.py, `enable_deepep_moe`).
        let deepep = self.moe_a2a_backend == MoeA2aBackend::Deepep;
        let parallel = Parallel { tp, pp: self.pp, ep: self.ep || deepep, dp_attention, nnodes: self.nnodes };
        parallel.check(model)?;
        if deepep && dp_attention == 1 {
            return Err(Error::invalid(
                "--moe-a2a-backend",
                "DeepEP's all-to-alls are priced with --enable-dp-attention only (each rank dispatches its own tokens)",
            ));
        }
        if self.two_batch_overlap && !deepep {
            return Err(Error::invalid(
                "--enable-two-batch-overlap",
                "two-batch overlap is priced with DeepEP's all-to-alls only (--moe-a2a-backend deepep)",
            ));
        }
        if !(self.moe_skew.is_finite() && (0.0..1.0).contains(&self.moe_skew)) {
            return Err(Error::invalid("--moe-skew", format!("{} must be in [0, 1)", self.moe_skew)));
        }
        let spec =
            SpecDecode::resolve(self.speculative_algorithm, self.num_speculative_tokens, &self.spec_acceptance_rate)?;
        if spec.as_ref().is_some_and(|s| s.algorithm == SpecAlgorithm::Mtp) && model.mtp_layers.unwrap_or(0) == 0 {
            return Err(Error::invalid(
                "--speculative-algorithm",
                format!("mtp needs a model with an MTP module (DeepSeek-V3/R1); {} has none", model.name),
            ));
        }
        let network = if parallel.nnodes > 1 {
            Some(catalog::network(&self.network, self.network_file.as_deref())?)
        } else {
            None
        };
        Ok(Deployment {
            parallel,
            network,
            kv_dtype: match self.kv_cache_dtype {
                KvCacheDtype::Auto => Dtype::Bf16,
                KvCacheDtype::Fp8 => Dtype::Fp8,
            },
            moe_skew: self.moe_skew,
            spec,
            a2a: MoeA2a { deepep: deepep.then_some(self.deepep_mode), two_batch_overlap: self.two_batch_overlap },
        })
    }
}

/// The big-model flags of `cachesim run` (flattened into its arguments).
#[derive(Debug, Clone, clap::Args)]
pub struct LayoutArgs {
    /// Pipeline stages (vLLM --pipeline-parallel-size): layers split evenly, each stage on its
    /// own TP group; stages pass activations over NVLink or, across nodes, the network.
    #[arg(long, visible_alias = "pipeline-parallel-size", default_value_t = 1,
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
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64), help_heading = "Big models")]
    pub dp_size: Option<u64>,
    /// Nodes the instance spans (TP × PP GPUs split evenly; ranks fill a node first).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64), help_heading = "Big models")]
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
    /// MoE routing skew in [0, 1): tokens route as though only the hottest (1 − skew) of the
    /// experts were in use, so a step reads fewer distinct experts (0 = uniform).
    #[arg(long, default_value_t = 0.0, help_heading = "Big models")]
    pub moe_skew: f64,
    /// Speculative decoding draft (SGLang --speculative-algorithm; vLLM speculative_config method).
    #[arg(long, value_enum, default_value = "none", help_heading = "Big models")]
    pub speculative_algorithm: SpecAlgorithm,
    /// Draft tokens per step (SGLang --speculative-num-steps) [default: 3 for mtp/eagle, 4 for ngram].
    #[arg(long, visible_alias = "speculative-num-steps", value_parser = clap::value_parser!(u32).range(1..=16),
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
        }
    }
}

/// One line for the config echo: the layout beyond plain TP, empty when there is none.
pub fn describe(d: &Deployment) -> String {
    let p = d.parallel;
    let mut parts = Vec::new();
    if p.pp > 1 {
        parts.push(format!("PP {}", p.pp));
    }
    if p.ep {
        parts.push(format!("EP {}", p.tp));
    }
    if p.dp_attention > 1 {
        parts.push(format!("DP attention {}", p.dp_attention));
    }
    if p.nnodes > 1 {
        let net = d.network.as_ref().map_or(String::new(), |n| format!(" over {}", n.name));
        parts.push(format!("{} nodes{net}", p.nnodes));
    }
    if d.kv_dtype == Dtype::Fp8 {
        parts.push("fp8 KV".into());
    }
    if d.moe_skew > 0.0 {
        parts.push(format!("MoE skew {}", d.moe_skew));
    }
    if let Some(mode) = d.a2a.deepep {
        parts.push(format!(
            "DeepEP {}",
            clap::ValueEnum::to_possible_value(&mode).map_or("auto".into(), |v| v.get_name().to_string())
        ));
    }
    if d.a2a.two_batch_overlap {
        parts.push("two-batch overlap".into());
    }
    if let Some(s) = &d.spec {
        parts.push(format!("speculative {} k {} ({:.2} tokens/step)", s.algorithm.name(), s.k, s.tokens_per_step()));
    }
    parts.join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_resolve_and_are_checked() {
        let r1 = catalog::model("deepseek-r1", None).unwrap();
        let o = LayoutOptions { pp: 2, nnodes: 2, ..Default::default() };
        let d = o.resolve(&r1, 8).unwrap();
        assert_eq!((d.parallel.world(), d.parallel.gpus_per_node()), (16, 8));
        assert_eq!(d.network.as_ref().map(|n| n.name.as_str()), Some("cx7-8x400"));
        assert_eq!(describe(&d), "PP 2 · 2 nodes over cx7-8x400");
        let dp = LayoutOptions { dp_attention: true, ep: true, nnodes: 2, ..Default::default() };
        assert_eq!(dp.resolve(&r1, 16).unwrap().parallel.dp_attention, 16);
        let mtp = LayoutOptions { speculative_algorithm: SpecAlgorithm::Mtp, ..Default::default() };
        assert_eq!(mtp.resolve(&r1, 8).unwrap().spec.unwrap().k, 3);
        let l8 = catalog::model("llama-3.1-8b", None).unwrap();
        assert!(mtp.resolve(&l8, 1).unwrap_err().to_string().contains("MTP module"));
        let skew = LayoutOptions { moe_skew: 1.0, ..Default::default() };
        assert!(skew.resolve(&r1, 8).is_err());
        let dp_only = LayoutOptions { dp_size: Some(2), ..Default::default() };
        assert!(dp_only.resolve(&r1, 8).is_err());
        assert_eq!(describe(&LayoutOptions::default().resolve(&l8, 1).unwrap()), "");
    }

    /// `--enable-deepep-moe` (or `--moe-a2a-backend deepep`) implies EP as SGLang's does, needs
    /// DP attention, and is what two-batch overlap is priced with.
    #[test]
    fn deepep_and_two_batch_overlap_flags() {
        let r1 = catalog::model("deepseek-r1", None).unwrap();
        let o = LayoutOptions {
            dp_attention: true,
            nnodes: 4,
            moe_a2a_backend: MoeA2aBackend::Deepep,
            deepep_mode: DeepEpMode::Normal,
            two_batch_overlap: true,
            ..Default::default()
        };
        let d = o.resolve(&r1, 32).unwrap();
        assert!(d.parallel.ep);
        assert_eq!(d.a2a, MoeA2a { deepep: Some(DeepEpMode::Normal), two_batch_overlap: true });
        assert_eq!(
            describe(&d),
            "EP 32 · DP attention 32 · 4 nodes over cx7-8x400 · DeepEP normal · two-batch overlap"
        );
        let e = LayoutOptions { dp_attention: false, two_batch_overlap: false, ..o.clone() }.resolve(&r1, 32);
        assert!(e.unwrap_err().to_string().contains("--enable-dp-attention"));
        let e = LayoutOptions { moe_a2a_backend: MoeA2aBackend::None, ..o }.resolve(&r1, 32);
        assert!(e.unwrap_err().to_string().contains("--enable-two-batch-overlap"));
        use clap::Parser;
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
}
