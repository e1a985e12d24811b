//! Models with linear-attention layers (Qwen3-Next's Gated DeltaNet): no KV per token in those
//! layers, one fixed recurrent state per sequence. What each engine defaults to for that state,
//! and the flags that mean nothing for a model without such layers.

use super::EngineKind;
use crate::catalog::{Model, SsmDtype};
use crate::error::{Error, Result};

/// The recurrent state's element type when no flag names one: SGLang 0.5
/// `server_args.py` `mamba_ssm_dtype = "float32"`; vLLM 0.33 `CacheConfig.mamba_ssm_cache_dtype
/// = "auto"`, the model's own type (bfloat16).
pub fn ssm_default(engine: EngineKind) -> SsmDtype {
    match engine {
        EngineKind::Sglang => SsmDtype::Float32,
        _ => SsmDtype::Bfloat16,
    }
}

/// Refuses `--mamba-ssm-dtype` for a model with no linear layer (the flag would change nothing),
/// and a model with linear layers on an engine whose state cache is not modelled: every engine
/// but vLLM v1, whose hybrid manager keeps Mamba groups ([`super::vllm_hybrid`]), and SGLang,
/// whose state pool and radix cache are modelled ([`super::sglang::mamba`]); each refuses the
/// deployments it does not model.
pub fn check(model: &Model, engine: EngineKind, ssm_dtype: Option<SsmDtype>) -> Result<()> {
    if ssm_dtype.is_some() && model.linear_layers() == 0 {
        return Err(Error::invalid(
            "--mamba-ssm-dtype",
            format!("{} has no linear-attention layer, whose state the flag types", model.name),
        ));
    }
    // vLLM's hybrid manager (`engine::vllm_hybrid`) and SGLang's state pool
    // (`engine::sglang::mamba`) hold the states, each refusing what it does not model.
    if model.linear_layers() > 0 && !matches!(engine, EngineKind::Vllm | EngineKind::Sglang) {
        return Err(Error::invalid(
            "--model",
            format!(
                "{}'s linear-attention layers keep a state per sequence, which the {} cache does not model yet",
                model.name,
                engine.name()
            ),
        ));
    }
    Ok(())
}
