//! The big-model flags of a run — pipeline stages, expert parallelism, DP attention, nodes and
//! their network, the KV element type, MoE routing skew and speculative decoding — resolved
//! into the [`Deployment`] the step-time model and the KV sizing use.

use crate::catalog::{self, Dtype, Model, SsmDtype};
use crate::cost::ep::{DeepEpMode, MoeA2a};
use crate::cost::parallel::Parallel;
use crate::cost::spec::{SpecAlgorithm, SpecDecode};
use crate::cost::Deployment;
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::PathBuf;

/// vLLM / SGLang `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum KvCacheDtype {
    /// The model's activation type (bf16 for every built-in model).
    #[default]
    Auto,
    /// One byte per element (fp8 e4m3).
    Fp8,
}

/// SGLang `--moe-a2a-backend` (the MoE all-to-all implementation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
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
    /// The element type of linear layers' recurrent state; `None`: the engine's default.
    pub ssm_dtype: Option<SsmDtype>,
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
            ssm_dtype: None,
        }
    }
}

impl LayoutOptions {
    /// The deployment of `model` on `tp` ranks per stage, checked.
    pub fn resolve(&self, model: &Model, tp: u64, ssm_default: SsmDtype) -> Result<Deployment> {
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
            // Only a model with linear layers has such a state (the echo names it only then).
            ssm_dtype: if model.linear_layers() > 0 {
                self.ssm_dtype.unwrap_or(ssm_default)
            } else {
                SsmDtype::default()
            },
        })
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
        parts.push(format!("DeepEP {}", mode.name()));
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
        let d = o.resolve(&r1, 8, SsmDtype::default()).unwrap();
        assert_eq!((d.parallel.world(), d.parallel.gpus_per_node()), (16, 8));
        assert_eq!(d.network.as_ref().map(|n| n.name.as_str()), Some("cx7-8x400"));
        assert_eq!(describe(&d), "PP 2 · 2 nodes over cx7-8x400");
        let dp = LayoutOptions { dp_attention: true, ep: true, nnodes: 2, ..Default::default() };
        assert_eq!(dp.resolve(&r1, 16, SsmDtype::default()).unwrap().parallel.dp_attention, 16);
        let mtp = LayoutOptions { speculative_algorithm: SpecAlgorithm::Mtp, ..Default::default() };
        assert_eq!(mtp.resolve(&r1, 8, SsmDtype::default()).unwrap().spec.unwrap().k, 3);
        let l8 = catalog::model("llama-3.1-8b", None).unwrap();
        assert!(mtp.resolve(&l8, 1, SsmDtype::default()).unwrap_err().to_string().contains("MTP module"));
        let skew = LayoutOptions { moe_skew: 1.0, ..Default::default() };
        assert!(skew.resolve(&r1, 8, SsmDtype::default()).is_err());
        let dp_only = LayoutOptions { dp_size: Some(2), ..Default::default() };
        assert!(dp_only.resolve(&r1, 8, SsmDtype::default()).is_err());
        assert_eq!(describe(&LayoutOptions::default().resolve(&l8, 1, SsmDtype::default()).unwrap()), "");
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
        let d = o.resolve(&r1, 32, SsmDtype::default()).unwrap();
        assert!(d.parallel.ep);
        assert_eq!(d.a2a, MoeA2a { deepep: Some(DeepEpMode::Normal), two_batch_overlap: true });
        assert_eq!(
            describe(&d),
            "EP 32 · DP attention 32 · 4 nodes over cx7-8x400 · DeepEP normal · two-batch overlap"
        );
        let e = LayoutOptions { dp_attention: false, two_batch_overlap: false, ..o.clone() }.resolve(
            &r1,
            32,
            SsmDtype::default(),
        );
        assert!(e.unwrap_err().to_string().contains("--enable-dp-attention"));
        let e = LayoutOptions { moe_a2a_backend: MoeA2aBackend::None, ..o }.resolve(&r1, 32, SsmDtype::default());
        assert!(e.unwrap_err().to_string().contains("--enable-two-batch-overlap"));
    }
}
