//! Attention over a window: what a layer that attends to less than every earlier token reads.
//! A sliding-window layer (gpt-oss, Gemma 3) attends to the last `W` tokens, the token itself
//! included (vLLM `FlashAttentionImpl` passes `window_size = (W − 1, 0)`; Hugging Face
//! `sliding_window`); a chunked-local layer (Llama 4's RoPE layers) attends to the tokens of its
//! own `C`-aligned chunk up to itself (vLLM `ChunkedLocalAttention`, `attention_chunk_size`).
//! The kernels skip what falls outside, so a step's attention FLOPs and KV reads in these
//! layers are the window's, not the context's. [`LocalWindow`] counts them exactly, in
//! integers, for the aggregates of [`super::BatchShape`]: query-key pairs of a prefill chunk and
//! earlier tokens a token reads.

use crate::catalog::{AttentionKind, Model};
use serde::Serialize;

/// The span a windowed layer attends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LocalWindow {
    /// The last `W` tokens, the token itself included.
    Sliding(u64),
    /// The tokens of the token's own `C`-aligned chunk, up to itself.
    Chunked(u64),
}

impl LocalWindow {
    /// The windowed layers of `model` and their share of its attention layers; `None` when every
    /// layer attends to every earlier token. The catalog refuses a model mixing both windowed
    /// kinds ([`Model`]'s checks), so one window describes all of its windowed layers.
    pub fn of(model: &Model) -> Option<(LocalWindow, f64)> {
        let [full, sliding, chunked, _] = model.layers_by_kind();
        let (window, local) = match (model.sliding_window, model.attention_chunk) {
            (Some(w), _) if sliding > 0 => (LocalWindow::Sliding(w), sliding),
            (_, Some(c)) if chunked > 0 => (LocalWindow::Chunked(c), chunked),
            _ => return None,
        };
        debug_assert!(sliding == 0 || chunked == 0, "one windowed kind per model");
        Some((window, local as f64 / (full + local) as f64))
    }

    /// The catalog's kind of these layers.
    pub fn kind(self) -> AttentionKind {
        match self {
            LocalWindow::Sliding(_) => AttentionKind::Sliding,
            LocalWindow::Chunked(_) => AttentionKind::Chunked,
        }
    }

    /// Earlier tokens (already in the KV cache) the token at position `context` (0-based: the
    /// count of tokens before it) reads: `min(context, W − 1)`, or `context mod C`.
    #[inline]
    pub fn before(self, context: u64) -> u64 {
        match self {
            LocalWindow::Sliding(w) => context.min(w.saturating_sub(1)),
            LocalWindow::Chunked(c) => context % c.max(1),
        }
    }

    /// Query-key pairs of the first `n` tokens of a sequence, each token paired with itself and
    /// the earlier tokens it reads.
    fn prefix_pairs(self, n: u64) -> u64 {
        match self {
            LocalWindow::Sliding(w) if n <= w => n * (n + 1) / 2,
            LocalWindow::Sliding(w) => w * (w + 1) / 2 + (n - w) * w,
            LocalWindow::Chunked(c) => {
                let c = c.max(1);
                let (q, r) = (n / c, n % c);
                q * (c * (c + 1) / 2) + r * (r + 1) / 2
            }
        }
    }

    /// Query-key pairs of `new` tokens computed after `context` earlier ones (the windowed form
    /// of a full layer's `new × (context + (new + 1) / 2)`).
    #[inline]
    pub fn pairs(self, context: u64, new: u64) -> u64 {
        self.prefix_pairs(context + new) - self.prefix_pairs(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Pairs by counting each token's keys one by one.
    fn counted(w: LocalWindow, context: u64, new: u64) -> u64 {
        (context..context + new).map(|p| w.before(p) + 1).sum()
    }

    #[test]
    fn windows_by_hand() {
        let s = LocalWindow::Sliding(4);
        // Tokens 0..6 read 0, 1, 2, 3, 3, 3 earlier tokens.
        assert_eq!((0..6).map(|p| s.before(p)).collect::<Vec<_>>(), [0, 1, 2, 3, 3, 3]);
        // A 6-token prompt: 1 + 2 + 3 + 4 + 4 + 4 pairs; 2 tokens after 5: 4 + 4.
        assert_eq!(s.pairs(0, 6), 18);
        assert_eq!(s.pairs(5, 2), 8);
        let c = LocalWindow::Chunked(3);
        // Chunks [0, 3), [3, 6): tokens read 0, 1, 2, 0, 1, 2, 0.
        assert_eq!((0..7).map(|p| c.before(p)).collect::<Vec<_>>(), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(c.pairs(0, 7), 13);
        assert_eq!(c.pairs(2, 3), 3 + 1 + 2);
    }

    #[test]
    fn a_model_s_windowed_layers_and_their_share() {
        let gpt = crate::catalog::model("gpt-oss-20b", None).unwrap();
        assert_eq!(LocalWindow::of(&gpt), Some((LocalWindow::Sliding(128), 0.5)));
        let gemma = crate::catalog::model("gemma-3-27b", None).unwrap();
        assert_eq!(LocalWindow::of(&gemma), Some((LocalWindow::Sliding(1024), 52.0 / 62.0)));
        let scout = crate::catalog::model("llama-4-scout", None).unwrap();
        assert_eq!(LocalWindow::of(&scout), Some((LocalWindow::Chunked(8192), 0.75)));
        assert_eq!(LocalWindow::of(&crate::catalog::model("llama-3.1-8b", None).unwrap()), None);
    }

    proptest! {
        #[test]
        fn pairs_count_every_token_s_keys(
            sliding in any::<bool>(), extent in 1u64..300, context in 0u64..2_000, new in 0u64..700,
        ) {
            let w = if sliding { LocalWindow::Sliding(extent) } else { LocalWindow::Chunked(extent) };
            prop_assert_eq!(w.pairs(context, new), counted(w, context, new));
            // Never more than a full layer's pairs; a window past the sequence is a full layer.
            let full = new * context + new * (new + 1) / 2;
            prop_assert!(w.pairs(context, new) <= full);
            if extent >= context + new {
                prop_assert_eq!(w.pairs(context, new), full);
            }
        }
    }
}
