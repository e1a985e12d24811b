//! SGLang's pools for a model with sliding-window layers (0.5.23): which models get them, the
//! window, and their sizes (`--swa-full-tokens-ratio`, `--disable-hybrid-swa-memory`); the
//! cache they feed is [`crate::cache::swa::SwaCache`], docs/engines/sglang-swa.md the rules.
//!
//! - **Which models** (`configs/model_config.py` `is_hybrid_swa_model`, `_derive_hybrid_model`):
//!   gpt-oss and Llama 4 among the catalog's; Gemma 2 and 3 are not (`arg_groups/
//!   model_overrides/gemma2_gemma3.py` sets `disable_hybrid_swa_memory`), so their sliding layers
//!   are cached as full attention. A catalog model of another architecture with sliding or
//!   chunked layers is taken to be served like gpt-oss.
//! - **The window** (`load_model_utils.resolve_sliding_window_size`): gpt-oss's
//!   `sliding_window − 1` (`models/gpt_oss.py` `get_attention_sliding_window_size`: the window
//!   counts the token itself); for Llama 4, whose local layers attend within chunks, the chunk
//!   (`attention_chunk_size`) as a plain window.
//! - **The sizes** (`model_executor/pool_configurator.py` `HybridSWAPoolConfigurator`): a full
//!   token costs every full layer's KV plus `ratio` of every window layer's
//!   (`_recompute_cell_size`); the full pool is what memory holds at that cost (or
//!   `--max-total-tokens`, when smaller), rounded down to pages, the window pool `ratio` of it,
//!   rounded down to pages (`_solve_pool_sizes`); a window pool no larger than one window and a
//!   page is refused at launch (`validate_swa_pool_size`). With the radix cache off and
//!   `--max-running-requests` given, the window pool holds each running request's window, the
//!   128 tokens it may hold past it and two pages, plus a chunk and a page
//!   (`SWARequestCapPoolConfigurator`, `compute_swa_request_cap`), and the full pool the rest.

use crate::catalog::{AttentionKind, Model};
use crate::engine::{EngineKind, EngineVersion};
use crate::error::{Error, Result};

/// `--swa-full-tokens-ratio`'s default.
pub const DEFAULT_RATIO: f64 = 0.8;

/// The flags as given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SwaOptions {
    /// `--swa-full-tokens-ratio`: window slots per full slot, in (0, 1].
    pub ratio: Option<f64>,
    /// `--disable-hybrid-swa-memory`: one pool, every layer cached as full attention.
    pub disable: bool,
}

/// What the decision reads from the deployment.
#[derive(Debug, Clone, Copy)]
pub struct SwaMachine<'a> {
    pub engine: EngineKind,
    pub version: EngineVersion,
    pub model: &'a Model,
    /// The radix cache is on (not `--disable-radix-cache` / `--policy none`).
    pub radix: bool,
    pub disaggregated: bool,
}

/// What sizes the pools.
#[derive(Debug, Clone, Copy)]
pub struct PoolInputs {
    /// Full tokens the KV memory holds at [`SwaPlan::cell_bytes`] a token.
    pub memory_tokens: u64,
    pub max_total_tokens: Option<u64>,
    /// `--max-running-requests` as given.
    pub max_running_requests: Option<u32>,
    pub chunked_prefill_size: u32,
    pub page: u32,
}

/// SGLang's window pool for a model, once resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwaPlan {
    /// `W`, tokens.
    pub window: u32,
    pub ratio: f64,
    /// Layers of full attention and of windowed attention.
    pub full_layers: u64,
    pub window_layers: u64,
    /// The radix cache is on: prefixes are shared, and a request keeps a page-rounded window.
    pub sharing: bool,
}

impl SwaPlan {
    /// Bytes one full slot costs with its share of the window pool, given one layer's KV
    /// bytes of a token (`_recompute_cell_size`), rounded up.
    pub fn cell_bytes(&self, layer_bytes: u64) -> u64 {
        let cell = layer_bytes as f64 * (self.full_layers as f64 + self.ratio * self.window_layers as f64);
        cell.ceil() as u64
    }

    /// The window pool for a full pool of `full` slots, whole pages of `page` (`_solve_pool_sizes`).
    pub fn window_tokens(&self, full: u64, page: u32) -> u64 {
        let swa = (full as f64 * self.ratio) as u64;
        swa - swa % page as u64
    }

    /// Both pools, (full, window) tokens: by the ratio, or with the radix cache off and
    /// `--max-running-requests` given by the requests' windows (`compute_swa_request_cap`).
    pub fn pools(&self, i: &PoolInputs) -> (u64, u64) {
        let page = i.page as u64;
        let floor = |t: u64| t - t % page;
        match i.max_running_requests.filter(|_| !self.sharing && i.chunked_prefill_size > 0) {
            Some(running) => {
                let per_req = self.window as u64 + EVICTION_INTERVAL + 2 * page;
                let cap = per_req * running.max(1) as u64 + i.chunked_prefill_size as u64 + page;
                let window = cap.div_ceil(page) * page;
                let full = match i.max_total_tokens {
                    Some(t) => floor(t.min(i.memory_tokens)),
                    // The memory less the window pool's, at the full layers' cost alone.
                    None => {
                        let all =
                            i.memory_tokens as f64 * (self.full_layers as f64 + self.ratio * self.window_layers as f64);
                        let rest = all - window as f64 * self.window_layers as f64;
                        floor((rest / self.full_layers as f64).max(0.0) as u64)
                    }
                };
                (full, window.min(i.max_total_tokens.unwrap_or(u64::MAX)))
            }
            None => {
                let full = floor(i.max_total_tokens.map_or(i.memory_tokens, |t| t.min(i.memory_tokens)));
                (full, self.window_tokens(full, i.page))
            }
        }
    }
}

/// `SGLANG_SWA_EVICTION_INTERVAL`.
const EVICTION_INTERVAL: u64 = 128;

/// Whether SGLang serves `model` with its hybrid window pools: not Gemma 2 and 3, and not a
/// model without a full-attention layer (Mistral-7B-v0.1: `MistralForCausalLM` is not among
/// `is_hybrid_swa_model`'s architectures, so one pool holds every layer's KV; the pure-window
/// cache SGLang has for the architectures listed there, `PureSWARadixCache`, serves none of the
/// catalog's).
fn served_hybrid(model: &Model) -> bool {
    let id = format!("{} {}", model.hf_id, model.name).to_ascii_lowercase();
    model.is_hybrid() && model.layers_by_kind()[0] > 0 && !(id.contains("gemma-2") || id.contains("gemma-3"))
}

/// Resolves the window pool: `None` for a model SGLang caches as full attention, or an engine
/// other than SGLang; refusals for the flags that mean nothing here and the combinations not
/// modelled.
pub fn resolve(o: &SwaOptions, m: &SwaMachine) -> Result<Option<SwaPlan>> {
    if let Some(r) = o.ratio {
        if !(r > 0.0 && r <= 1.0) {
            return Err(Error::invalid("--swa-full-tokens-ratio", format!("{r}: a ratio in (0, 1]")));
        }
    }
    let given = if o.ratio.is_some() { "--swa-full-tokens-ratio" } else { "--disable-hybrid-swa-memory" };
    if (o.ratio.is_some() || o.disable) && !served_hybrid(m.model) {
        return Err(Error::invalid(
            given,
            format!(
                "{} has no window pool under SGLang (no sliding-window or chunked layers, no full-attention \
                 layer, or Gemma 2/3, which SGLang serves with disable_hybrid_swa_memory): the flag changes nothing",
                m.model.name
            ),
        ));
    }
    if m.engine != EngineKind::Sglang || !served_hybrid(m.model) || o.disable {
        return Ok(None);
    }
    if m.version != EngineVersion::Sglang05 {
        // 0.4.10's SWA pool and radix cache (`SWARadixCache`) differ: its runs cache every layer
        // as full attention, with a startup note saying so.
        if o.ratio.is_some() {
            return Err(Error::invalid(
                "--swa-full-tokens-ratio",
                format!("the window pool of {} is not modelled: run sglang@0.5 or drop the flag", m.version),
            ));
        }
        return Ok(None);
    }
    let refuse = |what: &str| {
        Err(Error::invalid(
            "--model",
            format!(
                "{}'s window pool with {what} is not modelled (SGLang 0.5.23 serves it); \
                 --disable-hybrid-swa-memory runs every layer as full attention",
                m.model.name
            ),
        ))
    };
    if m.disaggregated {
        return refuse("prefill/decode disaggregation");
    }
    let [full, sliding, chunked, _] = m.model.layers_by_kind();
    let window = if m.model.uses(AttentionKind::Chunked) {
        m.model.attention_chunk.expect("the catalog checks a chunked model's chunk")
    } else {
        m.model.sliding_window.expect("the catalog checks a sliding model's window").saturating_sub(1).max(1)
    };
    Ok(Some(SwaPlan {
        window: window as u32,
        ratio: o.ratio.unwrap_or(DEFAULT_RATIO),
        full_layers: full,
        window_layers: sliding + chunked,
        sharing: m.radix,
    }))
}

/// `validate_swa_pool_size`: the window pool must hold more than one window and a page.
pub fn check_pool(plan: &SwaPlan, window_tokens: u64, page: u32) -> Result<()> {
    if plan.window as u64 + page as u64 >= window_tokens {
        return Err(Error::invalid(
            "--swa-full-tokens-ratio",
            format!(
                "a window pool of {window_tokens} tokens does not hold the window ({}) and a page ({page}): \
                 SGLang refuses to start; raise --max-total-tokens or the ratio",
                plan.window
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn machine(model: &Model) -> SwaMachine<'_> {
        SwaMachine {
            engine: EngineKind::Sglang,
            version: EngineVersion::Sglang05,
            model,
            radix: true,
            disaggregated: false,
        }
    }

    #[test]
    fn gpt_oss_gets_its_window_pool_and_gemma_does_not() {
        let oss = catalog::model("gpt-oss-20b", None).unwrap();
        let p = resolve(&SwaOptions::default(), &machine(&oss)).unwrap().expect("a window pool");
        assert_eq!((p.window, p.full_layers, p.window_layers), (127, 12, 12));
        // 12 full layers of 2,048 bytes and 0.8 × 12 window layers: 44,236.8 bytes a full token.
        assert_eq!(p.cell_bytes(2048), 44237);
        assert_eq!(p.window_tokens(6000, 1), 4800);
        assert_eq!(p.window_tokens(6000, 16), 4800);
        assert_eq!(p.window_tokens(1001, 16), 800);
        let scout = catalog::model("llama-4-scout", None).unwrap();
        let p = resolve(&SwaOptions::default(), &machine(&scout)).unwrap().expect("a window pool");
        assert_eq!((p.window, p.full_layers, p.window_layers), (8192, 12, 36));
        // Gemma 2/3 (disable_hybrid_swa_memory) and an all-sliding Mistral (not a hybrid-SWA
        // architecture): one pool, the ratio refused.
        for name in ["gemma-3-27b", "mistral-7b-v0.1"] {
            let m = catalog::model(name, None).unwrap();
            assert_eq!(resolve(&SwaOptions::default(), &machine(&m)).unwrap(), None);
            assert!(resolve(&SwaOptions { ratio: Some(0.5), ..Default::default() }, &machine(&m)).is_err());
        }
        let off = SwaOptions { disable: true, ..Default::default() };
        assert_eq!(resolve(&off, &machine(&oss)).unwrap(), None);
        assert!(resolve(&SwaOptions { ratio: Some(1.5), ..Default::default() }, &machine(&oss)).is_err());
        let off = resolve(&SwaOptions::default(), &SwaMachine { radix: false, ..machine(&oss) }).unwrap().unwrap();
        // The radix cache off with 16 running requests, chunks of 512, window 127: each request
        // 127 + 128 + 2 tokens, 16 of them, a chunk and a page.
        let i = PoolInputs {
            memory_tokens: 100_000,
            max_total_tokens: Some(6000),
            max_running_requests: Some(16),
            chunked_prefill_size: 512,
            page: 1,
        };
        assert_eq!(off.pools(&i), (6000, 257 * 16 + 513));
        assert_eq!(p.pools(&PoolInputs { page: 16, ..i }), (6000, 4800));
        assert!(check_pool(&p, 8192 + 16, 16).is_err());
        assert!(check_pool(&p, 8192 + 17, 16).is_ok());
    }
}
