//! vLLM's hybrid KV cache manager at start-up, for models whose layers mix full attention with
//! sliding-window attention (gpt-oss, Gemma 3) or with linear attention (Qwen3-Next's Gated
//! DeltaNet, kept as Mamba state): how vLLM 0.33 groups the layers
//! (`vllm/v1/core/kv_cache_planning.py` `_get_kv_cache_groups_uniform_page_size`), what one
//! block then costs (`G` layers' pages, `G` the largest group), the sliding groups' admission cap
//! (`SlidingWindowSpec.max_admission_blocks_per_request`), the block size a Mamba state raises
//! (`platforms/interface.py` `Platform._align_hybrid_block_size`), `--prefix-cache-retention-interval`
//! (`CacheConfig`, checked as `kv_cache_coordinator.py`
//! `_validate_prefix_cache_retention_interval` does) and `--disable-hybrid-kv-cache-manager`
//! (every layer one full-attention group, `unify_hybrid_kv_cache_specs`). What runs is
//! [`crate::cache::hybrid::HybridCache`]; `docs/engines/hybrid-attention.md` says it all.

use super::{EngineKind, EngineVersion};
use crate::cache::hybrid::{HybridLayout, MambaRules};
use crate::cache::Policy;
use crate::catalog::{Arch, AttentionKind, Gpu, Model, SsmDtype};
use crate::error::{Error, Result};

/// `--prefix-cache-retention-interval` as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Tokens between kept sliding-window tails (0: only the tails a replay or a shared prefix
    /// reaches, vLLM 0.33's default).
    Interval(i64),
    /// `None`: every full sliding-window block cached.
    Dense,
}

impl std::str::FromStr for Retention {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            // vLLM's `optional_type`: "" and "None" mean None.
            "None" | "none" | "" => Ok(Retention::Dense),
            n => n.parse().map(Retention::Interval).map_err(|_| format!("{n} is neither a number of tokens nor None")),
        }
    }
}

/// The hybrid manager's flags as given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HybridOptions {
    /// `--disable-hybrid-kv-cache-manager`.
    pub disable: bool,
    /// `--prefix-cache-retention-interval`; `None`: not given (0).
    pub retention: Option<Retention>,
}

/// How vLLM groups a model's layers when it keeps the hybrid manager on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grouping {
    /// `G`: the layers of the largest group; a block costs `G` layers' pages in every group.
    pub layers_per_group: u64,
    pub full_groups: u64,
    pub sliding_groups: u64,
    /// Groups of linear-attention layers (their state kept as vLLM's Mamba state).
    pub mamba_groups: u64,
    /// The sliding or linear layers' kind appears first among the layers: their groups come
    /// first.
    pub other_first: bool,
}

/// vLLM's grouping of `model`'s layers on a rank holding all of them, or `None` when every
/// layer is full attention or the model has chunked-local layers (Llama 4: vLLM turns the hybrid
/// manager off unless `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`, `VllmConfig.__post_init__`).
/// Layers are bucketed by kind in first-appearance order; `group_size` is the smallest bucket,
/// or the largest when that is below 1.5× the smallest; each bucket splits into
/// `⌈n / group_size⌉` groups. (The catalog refuses a model with both sliding and linear layers,
/// and one with no softmax layer.) A model whose every layer slides (Mistral-7B-v0.1) has one
/// kind of spec: one group of all its layers, under `UnitaryKVCacheCoordinator` with a
/// `SlidingWindowManager` (`get_kv_cache_groups`, `get_kv_cache_coordinator`).
pub fn grouping(model: &Model) -> Option<Grouping> {
    let [full, sliding, chunked, linear] = model.layers_by_kind();
    if chunked > 0 {
        return None;
    }
    if full == 0 && linear == 0 && sliding > 0 {
        return Some(Grouping {
            layers_per_group: sliding,
            full_groups: 0,
            sliding_groups: 1,
            mamba_groups: 0,
            other_first: true,
        });
    }
    let other = sliding + linear;
    if other == 0 || full == 0 {
        return None;
    }
    let (min, max) = (full.min(other), full.max(other));
    let group_size = if (max as f64) < min as f64 * 1.5 { max } else { min };
    Some(Grouping {
        layers_per_group: group_size,
        full_groups: full.div_ceil(group_size),
        sliding_groups: sliding.div_ceil(group_size),
        mamba_groups: linear.div_ceil(group_size),
        other_first: model.layer_kind(0) != AttentionKind::Full,
    })
}

/// FlashInfer's GDN prefill kernel, which exports a state from inside a chunk every 64 tokens
/// (`FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`), runs on Hopper, and on Blackwell with key heads of
/// 128 (`qwen_gdn_linear_attn.py` `_resolve_gdn_prefill_backend`, vLLM 0.33's CUDA 13 wheels);
/// elsewhere Triton's, which exports none.
pub fn flashinfer_gdn(gpu: &Gpu, model: &Model) -> bool {
    match gpu.arch {
        Some(Arch::Hopper) => true,
        Some(Arch::Blackwell) => model.linear_attention.is_some_and(|l| l.key_head_dim == 128),
        _ => false,
    }
}

/// The smallest block the attention kernel takes (FlashAttention: multiples of 16).
const KERNEL_BLOCK: u64 = 16;

/// The block size vLLM 0.33 runs a model with linear layers at, from `block_size` (what the user
/// gave, or 16), a full-attention layer's KV of one token on one rank `attn_page` and one
/// sequence's state of one linear layer on one rank `state`
/// (`Platform._align_hybrid_block_size`): one block of attention must hold a state, in steps of
/// the kernel block — of 64 with FlashInfer's checkpoints. A block given larger stays.
pub fn mamba_block_size(block_size: u32, attn_page: u64, state: u64, flashinfer: bool) -> u32 {
    let mut k = KERNEL_BLOCK.max(block_size as u64);
    if flashinfer {
        k = num_lcm(k, FLASHINFER_CHECKPOINT);
    }
    let raised = k * state.div_ceil(k * attn_page.max(1));
    (block_size as u64).max(raised).min(u32::MAX as u64) as u32
}

/// `FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`.
const FLASHINFER_CHECKPOINT: u64 = 64;

fn num_lcm(a: u64, b: u64) -> u64 {
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    a / gcd(a, b) * b
}

/// One sequence's state of one linear layer on one of `attn_tp` ranks: the convolution in the
/// model's 16-bit type (`mamba_cache_dtype` auto), the recurrence in `ssm`
/// (`MambaStateDtypeCalculator.gated_delta_net_state_dtype`).
pub fn state_bytes(model: &Model, attn_tp: u64, ssm: SsmDtype) -> u64 {
    model.linear_attention.map_or(0, |l| l.state_bytes_per_rank(attn_tp, 2, ssm.bytes()))
}

/// What the resolution reads from the deployment being resolved.
#[derive(Debug, Clone, Copy)]
pub struct HybridMachine<'a> {
    pub engine: EngineKind,
    pub version: EngineVersion,
    pub model: &'a Model,
    /// The cache: `paged` (vLLM's prefix caching) or `none` (prefix caching off).
    pub policy: Policy,
    pub block_size: u32,
    pub pp: u64,
    pub disaggregated: bool,
    pub offloading: bool,
    /// Chunked prefill is on (Mamba prefix caching needs it).
    pub chunked_prefill: bool,
    /// Speculative decoding is on.
    pub speculative: bool,
}

/// The hybrid manager vLLM runs for `m` under `o`: its grouping, or `None` for one group (every
/// layer full attention, or the manager disabled). Refuses what vLLM refuses and what cachesim
/// does not model, saying which.
pub fn resolve(o: &HybridOptions, m: &HybridMachine) -> Result<Option<Grouping>> {
    let vllm_v1 = m.engine == EngineKind::Vllm;
    if o.disable && m.model.linear_layers() > 0 {
        // `unify_hybrid_kv_cache_specs` cannot turn a Mamba spec into full attention.
        return Err(Error::invalid(
            "--disable-hybrid-kv-cache-manager",
            format!(
                "{}'s linear-attention layers keep a state, not KV: they cannot run as full attention (vLLM refuses \
                 to unify their KV cache specs)",
                m.model.name
            ),
        ));
    }
    // A model whose every layer slides keeps its one sliding group with the hybrid manager off:
    // its specs are uniform, so `unify_hybrid_kv_cache_specs` leaves them as they are.
    let every_layer_slides = m.model.layers_by_kind()[0] == 0;
    let groups = if !vllm_v1 || o.disable && !every_layer_slides { None } else { grouping(m.model) };
    match o.retention {
        Some(Retention::Interval(n)) if n != 0 && groups.is_none() => {
            return Err(Error::invalid(
                "--prefix-cache-retention-interval",
                format!(
                    "{n}: this model has no sliding-window KV cache group{}, so retention has no effect (vLLM \
                     refuses it: set it to 0)",
                    if o.disable { " with --disable-hybrid-kv-cache-manager" } else { "" }
                ),
            ))
        }
        Some(Retention::Interval(n)) if n < 0 || n % m.block_size as i64 != 0 => {
            return Err(Error::invalid(
                "--prefix-cache-retention-interval",
                format!("{n} must be non-negative and a multiple of scheduler_block_size ({})", m.block_size),
            ))
        }
        _ => {}
    }
    let Some(g) = groups else { return Ok(None) };
    let linear = g.mamba_groups > 0;
    let why = if m.version != EngineVersion::Vllm033 {
        Some(if linear {
            format!(
                "{}'s Mamba prefix caching (off by default, its modes all/align) is not modelled, only vllm@0.33's",
                m.version
            )
        } else if g.full_groups == 0 {
            format!("{}'s sliding-window manager is not modelled, only vllm@0.33's", m.version)
        } else {
            format!(
                "{}'s hybrid KV cache manager (it caches every sliding-window block) is not modelled, only vllm@0.33's",
                m.version
            )
        })
    } else if !(m.policy == Policy::Paged || linear && m.policy == Policy::None) {
        Some(format!(
            "the hybrid KV cache manager runs only with the paged cache (--policy paged{})",
            if linear { ", or none: prefix caching off" } else { "" }
        ))
    } else if m.pp > 1 {
        Some("pipeline stages with the hybrid KV cache manager are not modelled".to_string())
    } else if m.disaggregated {
        Some("prefill/decode disaggregation with the hybrid KV cache manager is not modelled".to_string())
    } else if m.offloading {
        Some("CPU KV offloading of a hybrid model's groups is not modelled".to_string())
    } else if linear && m.speculative {
        Some("speculative decoding with Mamba groups (their speculative state blocks) is not modelled".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        let rest = if linear {
            "its linear layers keep no KV, so they cannot run as full attention".to_string()
        } else if g.full_groups == 0 {
            "vLLM runs it with that manager whatever the flags (its layers' specs are uniform)".to_string()
        } else {
            "--disable-hybrid-kv-cache-manager runs every layer as full attention, as vLLM does then".to_string()
        };
        let layers = match (linear, g.full_groups) {
            (true, _) => "mixes linear-attention and full-attention layers",
            (false, 0) => "has only sliding-window layers",
            (false, _) => "mixes sliding-window and full-attention layers",
        };
        return Err(Error::invalid("--model", format!("{} {layers}: {why}; {rest}", m.model.name)));
    }
    if linear && !m.chunked_prefill {
        // `MambaModelConfig.verify_and_update_config`'s assertion.
        return Err(Error::invalid(
            "--no-enable-chunked-prefill",
            "Chunked prefill is required for Mamba prefix caching (vLLM refuses the model without it)",
        ));
    }
    if g.full_groups + g.sliding_groups + g.mamba_groups > u8::MAX as u64 {
        return Err(Error::invalid(
            "--model",
            format!("{} KV cache groups: too many", g.full_groups + g.sliding_groups + g.mamba_groups),
        ));
    }
    Ok(Some(g))
}

/// What the cache's view of a grouping reads from the run.
#[derive(Debug, Clone, Copy)]
pub struct LayoutInputs {
    pub retention: Option<Retention>,
    pub block_size: u32,
    /// The step budget (twice it under asynchronous scheduling): with `max_model_len` it sets a
    /// sliding group's admission cap `⌈min(W − 1 + max_in_flight_tokens, max_model_len) / bs⌉ + 1`.
    pub max_in_flight_tokens: u64,
    pub max_model_len: u64,
    /// The Mamba split's `max_prefill_tokens`: the step budget, capped by a positive
    /// `--long-prefill-token-threshold`.
    pub max_prefill_tokens: u32,
    /// FlashInfer's GDN kernel ([`flashinfer_gdn`]): prefill checkpoints every block.
    pub flashinfer: bool,
    /// Prefix caching is on (`--policy paged`).
    pub prefix_caching: bool,
}

/// The cache's view of grouping `g`.
pub fn layout(g: &Grouping, model: &Model, i: &LayoutInputs) -> HybridLayout {
    let retention = match i.retention {
        None => Some(0),
        Some(Retention::Dense) => None,
        Some(Retention::Interval(n)) => Some(n as u32),
    };
    let (window, cap) = match model.sliding_window.filter(|_| g.sliding_groups > 0) {
        Some(w) => (w, (w - 1 + i.max_in_flight_tokens).min(i.max_model_len).div_ceil(i.block_size as u64) + 1),
        None => (0, 0),
    };
    HybridLayout {
        full_groups: g.full_groups as u8,
        sliding_groups: g.sliding_groups as u8,
        sliding_first: g.sliding_groups > 0 && g.other_first,
        window: window.min(u32::MAX as u64) as u32,
        retention,
        admission_cap_blocks: cap.min(u32::MAX as u64) as u32,
        mamba_groups: g.mamba_groups as u8,
        mamba: (g.mamba_groups > 0).then_some(MambaRules {
            first: g.other_first,
            // The checkpoint grid is the cache-hit alignment, the block itself
            // (`get_mamba_prefill_checkpoint_grid`).
            checkpoint_alignment: (i.flashinfer && i.prefix_caching).then_some(i.block_size),
            max_prefill_tokens: i.max_prefill_tokens,
            prefix_caching: i.prefix_caching,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_as_vllm_033_groups_them() {
        // Checked against vLLM 0.33.0's own grouping code: gpt-oss-20b 12 + 12 layers in two
        // groups of 12 (sliding first); Gemma 3 27B 52 sliding + 10 full in 6 + 1 groups of 10.
        let oss = crate::catalog::model("gpt-oss-20b", None).unwrap();
        let g = grouping(&oss).unwrap();
        assert_eq!(
            g,
            Grouping { layers_per_group: 12, full_groups: 1, sliding_groups: 1, mamba_groups: 0, other_first: true }
        );
        let gemma = crate::catalog::model("gemma-3-27b", None).unwrap();
        let g = grouping(&gemma).unwrap();
        assert_eq!(
            g,
            Grouping { layers_per_group: 10, full_groups: 1, sliding_groups: 6, mamba_groups: 0, other_first: true }
        );
        // Qwen3-Next-80B: 36 linear layers before 12 full ones in three Mamba groups of 12 and one
        // full group, the Mamba groups first (vLLM 0.33.0's planner on its config).
        let next = crate::catalog::model("qwen3-next-80b-a3b", None).unwrap();
        assert_eq!(
            grouping(&next).unwrap(),
            Grouping { layers_per_group: 12, full_groups: 1, sliding_groups: 0, mamba_groups: 3, other_first: true }
        );
        assert!(grouping(&crate::catalog::model("llama-3.1-8b", None).unwrap()).is_none());
        // Mistral-7B-v0.1: every layer slides, one group of all 32 (vLLM 0.33.0's
        // UnitaryKVCacheCoordinator with a SlidingWindowManager, as its golden schedules show).
        let mistral = crate::catalog::model("mistral-7b-v0.1", None).unwrap();
        assert_eq!(
            grouping(&mistral).unwrap(),
            Grouping { layers_per_group: 32, full_groups: 0, sliding_groups: 1, mamba_groups: 0, other_first: true }
        );
        // 10 GiB of KV at block 16: vLLM's 27,306 blocks (gpt-oss-20b: 12 layers × 32 KiB pages)
        // and 8,192 (Gemma 3: 10 × 128 KiB).
        let per_layer = |m: &Model| 16 * 2 * m.kv_heads * m.head_dim * 2;
        assert_eq!((10u64 << 30) / (12 * per_layer(&oss)), 27_306);
        assert_eq!((10u64 << 30) / (10 * per_layer(&gemma)), 8_192);
    }

    #[test]
    fn retention_is_checked_as_vllm_checks_it() {
        let oss = crate::catalog::model("gpt-oss-20b", None).unwrap();
        let llama = crate::catalog::model("llama-3.1-8b", None).unwrap();
        let m = |model| HybridMachine {
            engine: EngineKind::Vllm,
            version: EngineVersion::Vllm033,
            model,
            policy: Policy::Paged,
            block_size: 16,
            pp: 1,
            disaggregated: false,
            offloading: false,
            chunked_prefill: true,
            speculative: false,
        };
        let with = |r| HybridOptions { disable: false, retention: Some(r) };
        assert!(resolve(&with(Retention::Interval(64)), &m(&oss)).unwrap().is_some());
        assert!(resolve(&with(Retention::Interval(24)), &m(&oss)).is_err());
        assert!(resolve(&with(Retention::Interval(-16)), &m(&oss)).is_err());
        assert!(resolve(&with(Retention::Interval(0)), &m(&llama)).unwrap().is_none());
        assert!(resolve(&with(Retention::Interval(64)), &m(&llama)).is_err());
        let off = HybridOptions { disable: true, retention: None };
        assert!(resolve(&off, &m(&oss)).unwrap().is_none());
        // Uniform specs stay as they are with the hybrid manager off: an all-sliding model keeps
        // its sliding group (`unify_hybrid_kv_cache_specs`), and takes a retention interval.
        let mistral = crate::catalog::model("mistral-7b-v0.1", None).unwrap();
        assert_eq!(resolve(&off, &m(&mistral)).unwrap().map(|g| g.sliding_groups), Some(1));
        assert!(resolve(&with(Retention::Interval(64)), &m(&mistral)).unwrap().is_some());
        let e =
            resolve(&off, &HybridMachine { version: EngineVersion::Vllm018, ..m(&mistral) }).unwrap_err().to_string();
        assert!(e.contains("has only sliding-window layers") && e.contains("whatever the flags"), "{e}");
        let older = HybridMachine { version: EngineVersion::newest(EngineKind::Vllm), ..m(&oss) };
        assert!(resolve(&HybridOptions::default(), &older).is_ok());
        assert_eq!("None".parse::<Retention>(), Ok(Retention::Dense));
        assert_eq!("128".parse::<Retention>(), Ok(Retention::Interval(128)));
    }
}
