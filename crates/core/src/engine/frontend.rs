//! The engines' request validation, applied when a request reaches the server: what the
//! frontend rejects (the client counts an HTTP 400 as a failed request) and what it quietly
//! changes (SGLang and LightLLM shorten `max_new_tokens` to fit). The benchmark clients send
//! `max_tokens` = the trace's output length with ignore-EOS, so a request is (prompt, output).
//!
//! Rules (docs/engines/refusals.md has the upstream files and versions):
//! - vLLM v1: `max_tokens < 1` is rejected (`SamplingParams._verify_args`); max_tokens above
//!   `max_model_len` (`TokenizeParams.__post_init__`) and prompt + max_tokens above it are
//!   rejected (`renderers/params.py TokenizeParams._token_len_check`;
//!   `InputProcessor._validate_prompt_len` also rejects a prompt of `max_model_len` or more).
//! - vLLM V0: the same, worded by the old `serving_engine.py _validate_input`.
//! - SGLang: the tokenizer manager (`_validate_one_request`) rejects input ≥ context length and
//!   input + max_new_tokens ≥ context length; the scheduler rejects input above
//!   `max_req_input_len` = min(context − 1, pool − 1) − 5 and cuts max_new_tokens to
//!   `max_req_len − input − 1`; `max_new_tokens` 0 is valid (a prefill-only request).
//! - LightLLM: `max_new_tokens < 1` is rejected; prompt + max_new_tokens above
//!   min(pool − 36, max_req_total_len) cuts max_new_tokens, or rejects when nothing is left.

use super::EngineKind;
use serde::Serialize;

/// The limits the frontend checks against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RequestLimits {
    /// vLLM `max_model_len`, SGLang `context_len`, LightLLM `max_req_total_len`.
    pub max_model_len: u64,
    /// KV slots of one instance (SGLang `max_total_num_tokens`, LightLLM `max_total_token_num`).
    pub pool_tokens: u64,
}

/// Why a request failed, for the failure counts (one label per rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// `max_tokens` (output length) 0 where the engine requires at least 1.
    ZeroMaxTokens,
    /// Prompt + output above the model length (HTTP 400 at the frontend).
    ContextLength,
    /// SGLang: the prompt is longer than the KV pool allows (`max_req_input_len`).
    InputExceedsPool,
    /// LightLLM: the prompt leaves no room for one output token in the pool.
    NoRoomForOutput,
    /// Could not run even alone in an empty engine (dropped by the simulator).
    NeverFits,
    /// Its instance failed while it was queued or running ([`crate::cluster::faults`]).
    InstanceFailed,
    /// It arrived while every instance was down.
    NoInstance,
    /// An autoscaler's scale-down stopped its instance at the drain timeout
    /// ([`crate::cluster::autoscale`]).
    ScaledDown,
    /// SGLang `--max-queued-requests`: it reached (or, retracted or preempted, went back to) a
    /// full waiting queue (HTTP 503).
    QueueFull,
    /// SGLang `--max-queued-requests` under priority scheduling: a more important arrival found
    /// the waiting queue full and took its place (HTTP 503).
    PriorityAbort,
    /// SGLang `--abort-on-priority-when-disabled`: sent with a priority to a server without
    /// priority scheduling (HTTP 503).
    PriorityDisabled,
    /// llm-d's `latency-slo-admitter`: a sheddable request (negative priority, an SLO header)
    /// that no endpoint was predicted to meet, none idle, none nearly empty.
    SloRejected,
}

impl FailReason {
    /// Short label for counts (stderr, JSON keys are the snake_case names).
    pub fn label(self) -> &'static str {
        match self {
            FailReason::ZeroMaxTokens => "max_tokens below 1",
            FailReason::ContextLength => "longer than the model length",
            FailReason::InputExceedsPool => "prompt longer than the KV pool allows",
            FailReason::NoRoomForOutput => "no room for output in the KV pool",
            FailReason::NeverFits => "never fits the KV cache",
            FailReason::InstanceFailed => "its instance failed",
            FailReason::NoInstance => "no instance serving",
            FailReason::ScaledDown => "its instance was scaled down",
            FailReason::QueueFull => "the waiting queue was full",
            FailReason::PriorityAbort => "aborted for a more important request",
            FailReason::PriorityDisabled => "sent with a priority to a server without priority scheduling",
            FailReason::SloRejected => "shed by the router's SLO admission",
        }
    }
}

/// What the frontend does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Served, generating this many tokens (the trace's, or fewer where the engine cuts).
    Serve { output_len: u32 },
    /// Rejected with the engine's own message.
    Reject { reason: FailReason, message: String },
}

/// The verdict of `engine` on a request of `prompt` tokens asking for `output` tokens.
pub fn validate(engine: EngineKind, lim: RequestLimits, prompt: u32, output: u32) -> Verdict {
    let (p, o, len) = (prompt as u64, output as u64, lim.max_model_len);
    let reject = |reason, message: String| Verdict::Reject { reason, message };
    match engine {
        // TensorRT-LLM checks prompt + max_tokens against max_seq_len like vLLM (worded as vLLM V0's).
        EngineKind::Vllm | EngineKind::VllmV0 | EngineKind::Trtllm => {
            if o < 1 {
                return reject(FailReason::ZeroMaxTokens, format!("max_tokens must be at least 1, got {o}."));
            }
            if p + o <= len {
                return Verdict::Serve { output_len: output };
            }
            let message = if engine == EngineKind::Vllm && o > len {
                format!(
                    "max_tokens={o} cannot be greater than max_model_len={len}. Please request fewer output tokens."
                )
            } else if engine == EngineKind::Vllm {
                format!(
                    "You passed {p} input tokens and requested {o} output tokens. However, the model's \
                     context length is only {len} tokens, resulting in a maximum input length of {} tokens. \
                     Please reduce the length of the input prompt.",
                    len.saturating_sub(o)
                )
            } else {
                format!(
                    "This model's maximum context length is {len} tokens. However, you requested {} tokens \
                     ({p} in the messages, {o} in the completion). Please reduce the length of the messages \
                     or completion.",
                    p + o
                )
            };
            reject(FailReason::ContextLength, message)
        }
        EngineKind::Sglang => {
            if p >= len {
                return reject(
                    FailReason::ContextLength,
                    format!("The input ({p} tokens) is longer than the model's context length ({len} tokens)."),
                );
            }
            if p + o >= len {
                return reject(
                    FailReason::ContextLength,
                    format!(
                        "Requested token count exceeds the model's maximum context length of {len} tokens. \
                         You requested a total of {} tokens: {p} tokens from the input messages and {o} tokens \
                         for the completion. Please reduce the number of tokens in the input messages or the \
                         completion to fit within the limit.",
                        p + o
                    ),
                );
            }
            let max_req_len = (len - 1).min(lim.pool_tokens.saturating_sub(1));
            let max_input = max_req_len.saturating_sub(5);
            if p > max_input {
                return reject(
                    FailReason::InputExceedsPool,
                    format!(
                        "Input length ({p} tokens) exceeds the maximum allowed length ({max_input} tokens). \
                         Use a shorter input or enable --allow-auto-truncate."
                    ),
                );
            }
            Verdict::Serve { output_len: o.min(max_req_len - p - 1) as u32 }
        }
        EngineKind::Lightllm => {
            if o < 1 {
                return reject(FailReason::ZeroMaxTokens, format!("max_new_tokens must be at least 1, got {o}."));
            }
            let real = lim.pool_tokens.saturating_sub(36).min(len);
            if p + o <= real {
                return Verdict::Serve { output_len: output };
            }
            match real.checked_sub(p).filter(|&n| n > 0) {
                Some(n) => Verdict::Serve { output_len: n as u32 },
                None => reject(
                    FailReason::NoRoomForOutput,
                    format!("the input prompt token len {p} + max_new_tokens {o} > {real}"),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: RequestLimits = RequestLimits { max_model_len: 100, pool_tokens: 1000 };

    fn reason(v: Verdict) -> Option<FailReason> {
        match v {
            Verdict::Reject { reason, .. } => Some(reason),
            Verdict::Serve { .. } => None,
        }
    }

    #[test]
    fn vllm_serves_up_to_the_model_length_and_needs_one_output_token() {
        assert_eq!(validate(EngineKind::Vllm, LIM, 90, 10), Verdict::Serve { output_len: 10 });
        assert_eq!(reason(validate(EngineKind::Vllm, LIM, 90, 11)), Some(FailReason::ContextLength));
        assert_eq!(reason(validate(EngineKind::Vllm, LIM, 100, 1)), Some(FailReason::ContextLength));
        assert_eq!(
            validate(EngineKind::Vllm, LIM, 5, 0),
            Verdict::Reject {
                reason: FailReason::ZeroMaxTokens,
                message: "max_tokens must be at least 1, got 0.".into()
            }
        );
        let Verdict::Reject { message, .. } = validate(EngineKind::Vllm, LIM, 95, 10) else { panic!() };
        assert_eq!(
            message,
            "You passed 95 input tokens and requested 10 output tokens. However, the model's context length \
             is only 100 tokens, resulting in a maximum input length of 90 tokens. Please reduce the length \
             of the input prompt."
        );
        let Verdict::Reject { message, .. } = validate(EngineKind::Vllm, LIM, 5, 101) else { panic!() };
        assert_eq!(
            message,
            "max_tokens=101 cannot be greater than max_model_len=100. Please request fewer output tokens."
        );
        let Verdict::Reject { message, .. } = validate(EngineKind::VllmV0, LIM, 95, 10) else { panic!() };
        assert!(message.starts_with("This model's maximum context length is 100 tokens. However, you requested 105"));
    }

    #[test]
    fn sglang_rejects_at_the_context_length_and_cuts_to_the_pool() {
        // Input + output must stay below the context length (≥ rejects); the scheduler then cuts
        // to max_req_len − input − 1 with max_req_len = context − 1 = 99.
        assert_eq!(validate(EngineKind::Sglang, LIM, 88, 10), Verdict::Serve { output_len: 10 });
        assert_eq!(validate(EngineKind::Sglang, LIM, 89, 10), Verdict::Serve { output_len: 9 });
        assert_eq!(reason(validate(EngineKind::Sglang, LIM, 90, 10)), Some(FailReason::ContextLength));
        assert_eq!(
            validate(EngineKind::Sglang, LIM, 100, 0),
            Verdict::Reject {
                reason: FailReason::ContextLength,
                message: "The input (100 tokens) is longer than the model's context length (100 tokens).".into()
            }
        );
        // 0 outputs are valid in SGLang.
        assert_eq!(validate(EngineKind::Sglang, LIM, 5, 0), Verdict::Serve { output_len: 0 });
        // A pool of 50: max_req_len 49, max input 44; output cut to 49 − p − 1.
        let small = RequestLimits { max_model_len: 1000, pool_tokens: 50 };
        assert_eq!(validate(EngineKind::Sglang, small, 40, 100), Verdict::Serve { output_len: 8 });
        assert_eq!(validate(EngineKind::Sglang, small, 44, 1), Verdict::Serve { output_len: 1 });
        let Verdict::Reject { reason, message } = validate(EngineKind::Sglang, small, 45, 1) else { panic!() };
        assert_eq!(reason, FailReason::InputExceedsPool);
        assert!(message.starts_with("Input length (45 tokens) exceeds the maximum allowed length (44 tokens)."));
    }

    #[test]
    fn lightllm_cuts_the_output_and_rejects_when_nothing_is_left() {
        assert_eq!(validate(EngineKind::Lightllm, LIM, 90, 10), Verdict::Serve { output_len: 10 });
        assert_eq!(validate(EngineKind::Lightllm, LIM, 90, 30), Verdict::Serve { output_len: 10 });
        assert_eq!(
            validate(EngineKind::Lightllm, LIM, 100, 1),
            Verdict::Reject {
                reason: FailReason::NoRoomForOutput,
                message: "the input prompt token len 100 + max_new_tokens 1 > 100".into()
            }
        );
        assert_eq!(reason(validate(EngineKind::Lightllm, LIM, 5, 0)), Some(FailReason::ZeroMaxTokens));
        // The pool minus 36 bounds it too.
        let small = RequestLimits { max_model_len: 16384, pool_tokens: 100 };
        assert_eq!(validate(EngineKind::Lightllm, small, 60, 10), Verdict::Serve { output_len: 4 });
    }
}
