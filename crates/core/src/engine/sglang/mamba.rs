//! SGLang's recurrent-state pool for a model with linear-attention layers (0.5.23, Qwen3-Next):
//! which strategy keeps states for the tree, how the memory is split between the state pool and
//! the full-attention KV pool, and the request cap the slots set; the cache they feed is
//! [`crate::cache::mamba::MambaCache`], docs/engines/sglang-mamba.md the rules.
//!
//! - **The strategy** (`arg_groups/overrides.py` `_mamba_radix_cache_resolution`,
//!   `arg_groups/mamba_hook.py` `validate_mamba_no_buffer` / `validate_mamba_extra_buffer`):
//!   `auto` is `extra_buffer` under the overlap scheduler or pages above one token (Qwen3-Next
//!   supports it with the default triton linear-attention backend), else `no_buffer`;
//!   `no_buffer` refuses the overlap scheduler and pages above one token; `extra_buffer` needs
//!   the track interval a multiple of the page and the cache chunk and the page to divide one
//!   another. `extra_buffer_lazy` is not modelled.
//! - **The sizes** (`mem_cache/kv_cache_configurator.py` `_handle_max_mamba_cache`,
//!   `resolve_max_num_reqs`, `_calculate_mamba_ratio`): the memory left for caches (`rest`) goes
//!   `r : 1` to states and KV (`--mamba-full-memory-ratio r`, 0.9), the state pool holding
//!   `⌊(rest·r/(1+r) − slot)/slot⌋` slots — or `--max-mamba-cache-size` slots, or with the
//!   radix cache off and `--max-running-requests` given that many — and its padding slot; the
//!   KV pool the rest at the full-attention layers' bytes per token, in whole pages, capped by
//!   `--max-total-tokens`. The request cap is SGLang's (`--max-running-requests`, else from the
//!   pool and the context) capped at `slots // ratio`: 3 states a request under `no_buffer`,
//!   3 and its ping-pong slots under `extra_buffer`, 1 with the radix cache off.
//! - **A slot** (`configs/mamba_utils.py` `Mamba2StateShape.create`, `mamba_cache_per_req`):
//!   every linear layer's convolution state (`conv_kernel − 1` inputs of every channel, in
//!   bfloat16) and recurrent state (in `--mamba-ssm-dtype`, float32 by default), split over
//!   the attention TP ranks.

use crate::cache::mamba::{MambaLayout, Strategy};
use crate::catalog::Model;
use crate::cost::spec::SpecAlgorithm;
use crate::engine::launch::{EngineFlags, Launch, Machine};
use crate::engine::{EngineKind, EngineVersion};
use crate::error::{Error, Result};

/// `--mamba-full-memory-ratio`'s default (`ServerArgs.mamba_full_memory_ratio`).
pub const DEFAULT_RATIO: f64 = 0.9;
/// `--mamba-track-interval`'s default.
pub const DEFAULT_TRACK_INTERVAL: u32 = 256;
/// The state chunk of Qwen3-Next's gated delta rule kernels (FLA `CHUNK_SIZE`), the model
/// chunk `mamba_cache_chunk_size` starts from (`overrides.mamba_cache_chunk_size`).
pub const STATE_CHUNK: u32 = 64;
/// Bytes of one element of the convolution state (`SGLANG_MAMBA_CONV_DTYPE`, bfloat16).
const CONV_BYTES: u64 = 2;

/// `--mamba-radix-cache-strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum StrategyFlag {
    /// extra_buffer under the overlap scheduler or with pages above one token, else no_buffer
    /// (SGLang's default).
    #[default]
    #[cfg_attr(feature = "clap", value(name = "auto"))]
    Auto,
    /// The state at each insert's end, copied from the request's own (page size 1, no overlap).
    #[cfg_attr(feature = "clap", value(name = "no_buffer"))]
    NoBuffer,
    /// States tracked at grid points into ping-pong slots.
    #[cfg_attr(feature = "clap", value(name = "extra_buffer"))]
    ExtraBuffer,
    /// extra_buffer allocating its second ping-pong slot on demand (not modelled: refused).
    #[cfg_attr(feature = "clap", value(name = "extra_buffer_lazy"))]
    ExtraBufferLazy,
}

/// The flags as given.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MambaOptions {
    /// `--mamba-radix-cache-strategy` (`None`: auto).
    pub strategy: Option<StrategyFlag>,
    /// `--mamba-full-memory-ratio`: state bytes per KV byte.
    pub full_memory_ratio: Option<f64>,
    /// `--max-mamba-cache-size`: state slots.
    pub max_cache_size: Option<i64>,
    /// `--mamba-track-interval`: tokens between decode checkpoints (extra_buffer).
    pub track_interval: Option<i64>,
}

impl MambaOptions {
    /// The first flag set, as the command line spells it.
    fn given(&self) -> Option<&'static str> {
        [
            (self.strategy.is_some(), "--mamba-radix-cache-strategy"),
            (self.full_memory_ratio.is_some(), "--mamba-full-memory-ratio"),
            (self.max_cache_size.is_some(), "--max-mamba-cache-size"),
            (self.track_interval.is_some(), "--mamba-track-interval"),
        ]
        .into_iter()
        .find_map(|(set, flag)| set.then_some(flag))
    }
}

/// What the decision reads from the deployment beside the launch's machine and flags.
#[derive(Debug, Clone, Copy)]
pub struct MambaMachine {
    pub engine: EngineKind,
    pub version: EngineVersion,
    /// The radix cache is on (not `--disable-radix-cache` / `--policy none`).
    pub radix: bool,
    pub page: u32,
    pub disaggregated: bool,
    /// `--enable-hierarchical-cache`.
    pub hicache: bool,
}

/// The state pool, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MambaPlan {
    pub strategy: Strategy,
    /// Ping-pong slots a request holds under extra_buffer (2 under the overlap scheduler).
    pub track_slots: u32,
    pub overlap: bool,
    pub ratio: f64,
    pub max_cache_size: Option<u64>,
    pub radix: bool,
    pub page: u32,
    /// Bytes of one slot on one rank.
    pub slot_bytes: u64,
    pub track_interval: u32,
}

/// The pools and the request cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatePools {
    /// State slots.
    pub slots: u64,
    /// Full-attention tokens, before and after `--max-total-tokens`.
    pub profiled_kv_tokens: u64,
    pub kv_tokens: u64,
    /// `max_running_requests`, and whether the slots capped it.
    pub max_running: u32,
    pub capped: bool,
}

/// The state pool's outcome for `config::resolve`: the launch with the pools' sizes and the
/// request cap, the cache's layout (`None` with the radix cache off: nothing is cached) and the
/// run's startup note.
#[derive(Debug, Clone)]
pub struct Applied {
    pub launch: Launch,
    pub layout: Option<MambaLayout>,
    pub note: String,
}

impl MambaPlan {
    /// States per request the cap divides the slots by (`_calculate_mamba_ratio`).
    pub fn slots_per_request(&self) -> u64 {
        match (self.radix, self.strategy) {
            (false, _) => 1,
            (true, Strategy::NoBuffer) => 3,
            (true, Strategy::ExtraBuffer) => 3 + self.track_slots as u64,
        }
    }

    /// The pools from `rest` bytes of memory left for caches on a rank, `cell` KV bytes a token,
    /// the flags `--max-total-tokens` and `--max-running-requests` and the context length.
    pub fn size(
        &self,
        rest: f64,
        cell: u64,
        max_total_tokens: Option<u64>,
        requested: Option<u32>,
        context: u64,
    ) -> Result<StatePools> {
        let slot = self.slot_bytes as f64;
        let slots = match (self.max_cache_size, requested) {
            (Some(k), _) => k as i64,
            (None, Some(r)) if !self.radix => r.max(1) as i64,
            _ => ((rest * self.ratio / (1.0 + self.ratio) - slot) / slot).floor() as i64,
        };
        if slots <= 0 {
            return Err(Error::invalid(
                "--mem-fraction-static",
                format!(
                    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed \
                     max_mamba_cache_size={slots} (total_rest_memory={:.2} GB, mamba_cache_per_req={:.2} MB): \
                     SGLang refuses to start; raise --mem-fraction-static or the ratio, or use more GPUs",
                    rest / (1u64 << 30) as f64,
                    slot / (1u64 << 20) as f64
                ),
            ));
        }
        let kv_bytes = rest - (slots as f64 + 1.0) * slot;
        if kv_bytes <= 0.0 {
            return Err(Error::invalid(
                "--max-mamba-cache-size",
                format!(
                    "{slots} state slots of {:.2} MiB leave no GPU memory for the KV cache: SGLang refuses to start",
                    slot / (1u64 << 20) as f64
                ),
            ));
        }
        let page = self.page.max(1) as u64;
        let profiled = (kv_bytes / cell.max(1) as f64).floor() as u64 / page * page;
        let kv_tokens = max_total_tokens.map_or(profiled, |t| t.min(profiled)) / page * page;
        let estimated = ((kv_tokens as f64 / context.max(1) as f64 * 512.0) as u64).clamp(2048, 4096);
        let running = requested.map_or(estimated, |r| r as u64).min(kv_tokens / 2);
        let cap = slots as u64 / self.slots_per_request();
        let max_running = running.min(cap);
        if max_running == 0 {
            return Err(Error::invalid(
                "--max-mamba-cache-size",
                format!(
                    "Hybrid (mamba/linear-attention) state cache is too small to serve any requests: \
                     max_mamba_cache_size={slots}, mamba_ratio={}, resulting max_num_reqs=0 (SGLang refuses to start)",
                    self.slots_per_request()
                ),
            ));
        }
        Ok(StatePools {
            slots: slots as u64,
            profiled_kv_tokens: profiled,
            kv_tokens,
            max_running: max_running.min(u32::MAX as u64) as u32,
            capped: cap < running,
        })
    }

    /// The cache's layout for `slots` slots (`None` with the radix cache off).
    pub fn layout(&self, slots: u64) -> Option<MambaLayout> {
        self.radix.then_some(MambaLayout {
            slots,
            strategy: self.strategy,
            track_slots: if self.strategy == Strategy::ExtraBuffer { self.track_slots } else { 0 },
            cache_chunk: STATE_CHUNK.max(self.page),
            state_chunk: STATE_CHUNK,
            track_interval: self.track_interval,
        })
    }
}

/// Bytes of one state slot on one of `attn_tp` ranks: every linear layer's convolution and
/// recurrent state, the latter of `ssm_bytes` an element.
pub fn slot_bytes(model: &Model, attn_tp: u64, ssm_bytes: u64) -> u64 {
    model.linear_attention.as_ref().map_or(0, |l| l.state_bytes_per_rank(attn_tp, CONV_BYTES, ssm_bytes))
        * model.linear_layers()
}

/// Resolves the state pool: `None` for a model without linear-attention layers, or an engine
/// other than SGLang (whose refusal of such a model is `engine::linear::check`'s); refusals for
/// the flags that mean nothing here and the combinations not modelled.
pub fn resolve(
    o: &MambaOptions,
    m: &MambaMachine,
    flags: &EngineFlags,
    machine: &Machine,
) -> Result<Option<MambaPlan>> {
    let model = machine.model;
    if let Some(r) = o.full_memory_ratio {
        if !(r.is_finite() && r > 0.0) {
            return Err(Error::invalid("--mamba-full-memory-ratio", format!("{r}: a ratio above 0")));
        }
    }
    if let Some(k) = o.max_cache_size {
        if k < 1 {
            return Err(Error::invalid("--max-mamba-cache-size", format!("{k}: at least one slot")));
        }
    }
    if let Some(t) = o.track_interval {
        if !(1..=u32::MAX as i64).contains(&t) {
            return Err(Error::invalid("--mamba-track-interval", format!("{t}: at least one token")));
        }
    }
    if model.linear_layers() == 0 {
        return match o.given() {
            Some(flag) => Err(Error::invalid(
                flag,
                format!("{} has no linear-attention layer, whose state pool the flag sizes", model.name),
            )),
            None => Ok(None),
        };
    }
    if m.engine != EngineKind::Sglang {
        return Ok(None);
    }
    let refuse = |what: &str| {
        Err(Error::invalid(
            "--model",
            format!("{}'s state pool with {what} is not modelled (docs/engines/sglang-mamba.md)", model.name),
        ))
    };
    if m.version != EngineVersion::Sglang05 {
        return refuse(&format!("{} (SGLang 0.5.23's UnifiedRadixCache is: sglang@0.5)", m.version));
    }
    let p = machine.layout.parallel;
    if m.disaggregated {
        return refuse("prefill/decode disaggregation");
    }
    if m.hicache {
        return Err(Error::invalid(
            "--enable-hierarchical-cache",
            format!("not modelled for {}: SGLang's host pool of recurrent states", model.name),
        ));
    }
    if flags.speculative != SpecAlgorithm::None {
        return refuse("speculative decoding (its intermediate state pools)");
    }
    if p.dp_attention > 1 {
        return refuse("DP attention (a state pool per DP shard)");
    }
    if p.pp > 1 {
        return refuse("pipeline parallelism (each stage's share of the linear layers)");
    }
    let overlap = crate::engine::overlap(m.engine, m.version, flags)?;
    let page = m.page.max(1);
    let flag = "--mamba-radix-cache-strategy";
    if !m.radix {
        // The radix cache off: nothing is cached, the strategy is left unresolved and one slot a
        // request suffices.
        if let Some(f) = [
            (o.strategy.is_some_and(|s| s != StrategyFlag::Auto), flag),
            (o.track_interval.is_some(), "--mamba-track-interval"),
        ]
        .into_iter()
        .find_map(|(set, f)| set.then_some(f))
        {
            return Err(Error::invalid(f, "changes nothing with the radix cache off: no state is cached"));
        }
    }
    let strategy = match o.strategy.unwrap_or_default() {
        StrategyFlag::Auto if overlap || page > 1 => Strategy::ExtraBuffer,
        StrategyFlag::Auto => Strategy::NoBuffer,
        StrategyFlag::NoBuffer => Strategy::NoBuffer,
        StrategyFlag::ExtraBuffer => Strategy::ExtraBuffer,
        StrategyFlag::ExtraBufferLazy => {
            return Err(Error::invalid(flag, "extra_buffer_lazy is not modelled: extra_buffer or no_buffer"))
        }
    };
    let track_interval = o.track_interval.map_or(DEFAULT_TRACK_INTERVAL, |t| t as u32);
    if m.radix {
        match strategy {
            Strategy::NoBuffer if page > 1 => {
                return Err(Error::invalid(flag, "no_buffer only supports page_size=1 (SGLang refuses to start)"))
            }
            Strategy::NoBuffer if overlap => {
                return Err(Error::invalid(
                    flag,
                    "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True \
                     (SGLang's refusal: add --disable-overlap-schedule)",
                ))
            }
            Strategy::NoBuffer if o.track_interval.is_some() => {
                return Err(Error::invalid("--mamba-track-interval", "only extra_buffer tracks states in decode"))
            }
            Strategy::ExtraBuffer if !track_interval.is_multiple_of(page) => {
                return Err(Error::invalid(
                    "--mamba-track-interval",
                    format!("{track_interval} is not a multiple of the page size {page} (SGLang refuses to start)"),
                ))
            }
            Strategy::ExtraBuffer
                if !STATE_CHUNK.max(page).is_multiple_of(page) && !page.is_multiple_of(STATE_CHUNK) =>
            {
                return Err(Error::invalid(
                    "--page-size",
                    format!("{page} and the state chunk {STATE_CHUNK} do not divide one another (SGLang refuses)"),
                ))
            }
            _ => {}
        }
    }
    if o.full_memory_ratio.is_some() && o.max_cache_size.is_some() {
        return Err(Error::invalid(
            "--mamba-full-memory-ratio",
            "changes nothing with --max-mamba-cache-size, which sets the state pool",
        ));
    }
    Ok(Some(MambaPlan {
        strategy,
        track_slots: if overlap { 2 } else { 1 },
        overlap,
        ratio: o.full_memory_ratio.unwrap_or(DEFAULT_RATIO),
        max_cache_size: o.max_cache_size.map(|k| k as u64),
        radix: m.radix,
        page,
        slot_bytes: slot_bytes(model, p.attn_tp(), machine.layout.ssm_dtype.bytes()),
        track_interval,
    }))
}

/// The state pool applied to SGLang's launch (`_profile_available_bytes` →
/// `_handle_max_mamba_cache`, then `resolve_max_num_reqs`): the KV pool and the request cap
/// recomputed with the slots' share of memory taken first; `None` where there is no pool.
pub fn apply(
    o: &MambaOptions,
    m: &MambaMachine,
    launched: Launch,
    flags: &EngineFlags,
    machine: &Machine,
) -> Result<Option<Applied>> {
    let Some(plan) = resolve(o, m, flags, machine)? else { return Ok(None) };
    let frac = launched.mem_fraction_static.expect("SGLang's launch sets mem_fraction_static");
    let rest = super::memory::sglang_rest_bytes_per_rank(machine.gpu, machine.weight_bytes_per_rank(), frac);
    let pools = plan.size(
        rest,
        machine.kv_bytes_per_token_per_rank,
        flags.max_total_tokens,
        flags.max_running_requests,
        machine.max_model_len,
    )?;
    let source = match (plan.max_cache_size, plan.radix) {
        (Some(_), _) => "--max-mamba-cache-size".to_string(),
        (None, false) if flags.max_running_requests.is_some() => "one a request, radix cache off".to_string(),
        (None, _) => format!("--mamba-full-memory-ratio {}", plan.ratio),
    };
    let how = if !plan.radix {
        "radix cache off: no state cached".to_string()
    } else if plan.strategy == Strategy::ExtraBuffer && plan.overlap {
        "extra_buffer under the overlap scheduler: two ping-pong slots a request, as SGLang's; its one-step \
         tracking lookahead is not modelled (states are tracked where the synchronous scheduler tracks them)"
            .to_string()
    } else {
        plan.strategy.name().to_string()
    };
    let note = format!(
        "{}: SGLang's recurrent-state pool: {} slots of {:.2} MiB ({source}), {how}; {} full-attention tokens; \
         max_running_requests {}{} (docs/engines/sglang-mamba.md)",
        machine.model.name,
        pools.slots,
        plan.slot_bytes as f64 / (1u64 << 20) as f64,
        pools.kv_tokens,
        pools.max_running,
        if pools.capped {
            format!(" (capped by the slots, {} a request)", plan.slots_per_request())
        } else {
            String::new()
        },
    );
    Ok(Some(Applied {
        launch: Launch {
            max_num_seqs: pools.max_running,
            kv_tokens: pools.kv_tokens,
            profiled_kv_tokens: pools.profiled_kv_tokens,
            ..launched
        },
        layout: plan.layout(pools.slots),
        note,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn plan(strategy: Strategy, overlap: bool) -> MambaPlan {
        MambaPlan {
            strategy,
            track_slots: if overlap { 2 } else { 1 },
            overlap,
            ratio: DEFAULT_RATIO,
            max_cache_size: None,
            radix: true,
            page: 1,
            slot_bytes: 0,
            track_interval: DEFAULT_TRACK_INTERVAL,
        }
    }

    /// Qwen3-Next-80B-A3B's slot per TP size, as SGLang's `mamba_cache_per_req` gives it
    /// (36 layers of a (8192/TP, 3) bf16 convolution state and a (32/TP, 128, 128) fp32
    /// recurrent state).
    #[test]
    fn qwen3_next_slots_as_sglang_sizes_them() {
        let m = catalog::model("qwen3-next-80b-a3b", None).unwrap();
        assert_eq!(slot_bytes(&m, 1, 4), 77_266_944);
        assert_eq!(slot_bytes(&m, 2, 4), 38_633_472);
        assert_eq!(slot_bytes(&m, 4, 4), 19_316_736);
        assert_eq!(slot_bytes(&m, 8, 4), 9_658_368);
        // bfloat16 recurrent states halve that part.
        assert_eq!(slot_bytes(&m, 4, 2), 36 * (12_288 + 262_144));
    }

    /// SGLang's own sizing functions on a stub: 30 GiB left, TP 4 (a slot of 18.42 MiB, 12,288
    /// KV bytes a token): 788 slots, 15.806 GiB of KV = 1,381,132 tokens, and the request cap
    /// 262 under no_buffer (788 // 3), 157 under extra_buffer with the overlap scheduler
    /// (788 // 5).
    #[test]
    fn the_ratio_splits_memory_as_sglang_does() {
        let rest = 30.0 * (1u64 << 30) as f64;
        let nb = MambaPlan { slot_bytes: 19_316_736, ..plan(Strategy::NoBuffer, false) };
        let p = nb.size(rest, 12_288, None, None, 262_144).unwrap();
        assert_eq!((p.slots, p.kv_tokens), (788, 1_381_132));
        assert_eq!((p.max_running, p.capped), (262, true));
        let eb = MambaPlan { slot_bytes: 19_316_736, ..plan(Strategy::ExtraBuffer, true) };
        assert_eq!(eb.size(rest, 12_288, None, None, 262_144).unwrap().max_running, 157);
        // A slot count given: the KV pool is the rest; a token cap and a request cap apply.
        let given = MambaPlan { max_cache_size: Some(64), ..nb };
        let p = given.size(rest, 12_288, Some(6000), Some(16), 262_144).unwrap();
        assert_eq!((p.slots, p.kv_tokens, p.max_running, p.capped), (64, 6000, 16, false));
        let small = MambaPlan { max_cache_size: Some(24), ..nb };
        assert_eq!(small.size(rest, 12_288, Some(8000), Some(16), 262_144).unwrap().max_running, 8);
        assert!(MambaPlan { max_cache_size: Some(2), ..nb }.size(rest, 12_288, None, None, 262_144).is_err());
    }
}
