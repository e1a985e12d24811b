//! Expert-parallel all-to-alls the way DeepEP moves tokens under SGLang (`--enable-deepep-moe`
//! or `--moe-a2a-backend deepep`, with `--deepep-mode`) and how two-batch overlap
//! (`--enable-two-batch-overlap`) hides them behind the other micro-batch's compute.
//!
//! Each MoE layer dispatches every rank's tokens to the ranks holding their top-k experts and
//! combines the expert outputs back. DeepEP has two kernel families (deepseek-ai/DeepEP V1,
//! `csrc/kernels/internode.cu` and `internode_ll.cu`; README of May 2025, now DeepEP `docs/legacy.md`):
//!
//! - **normal** (prefill): a token crosses the network once per destination *node* — to the GPU
//!   of the same local index there — and that GPU forwards it over NVLink to the node's GPUs
//!   holding its experts (`internode.cu` `dispatch`: the RDMA sender puts to every
//!   `dst_rdma_rank` but its own, where a memory fence stands in for the network). The network
//!   carries each token's copies to the *other* nodes it routes to; NVLink carries the last hop
//!   to each destination rank. Dispatch in FP8 with one fp32 scale per 128 elements
//!   (SGLang `token_dispatcher/deepep.py` `_DeepEPDispatcherImplNormal.dispatch_a` quantises
//!   with `per_token_group_quant_fp8(hidden_states, 128)` for DeepGEMM's FP8 grouped GEMM),
//!   combine in BF16.
//! - **low latency** (decode): every (token, expert) pair is one message straight over RDMA,
//!   no de-duplication: FP8 payload, its scales and a 16-byte header (DeepEP
//!   `tests/test_low_latency.py`: `num_fp8_bytes = hidden + hidden / 128 * 4 + 16`); the
//!   combine returns BF16 per pair (`num_bf16_bytes = hidden * 2`).
//!
//! SGLang's `--deepep-mode auto` (the default) takes normal for a batch with prefill (extend)
//! and low latency for decode (`DeepEPMode.resolve(is_extend_in_batch)`), which is what a
//! prefill-only or decode-only node of a PD-disaggregated deployment runs.
//!
//! Achieved bandwidth: the figures DeepEP states for H800 with one CX7 400 Gb/s NIC per GPU
//! (~50 GB/s line rate), DeepEP `docs/legacy.md` § Performance, as fractions of that line rate so a
//! network profile with another NIC scales them. Normal kernels at EP 32 (4 nodes): 58 GB/s
//! dispatch and 57 GB/s combine — DeepEP counts those bytes over every destination node,
//! its own included (`tests/test_internode.py`: `num_rdma_token_sent` over
//! `rdma_idx = topk_idx // (num_experts // num_nodes)`), which under the test's uniform
//! routing is 4/3 of what the NIC carries: 43.5 and 42.75 GB/s on the wire, 0.87 and 0.855
//! of line rate. Low-latency kernels: the stated RDMA bandwidth of the largest stated EP size
//! not above the deployment's (8: 98/127, 16: 63/74, 32: 48/53, 64: 43/46, 128: 39/39,
//! 256: 39/40 GB/s dispatch/combine), counted over all k copies as the test counts them.

use super::parallel::Links;
use serde::Serialize;

/// DeepEP's mode (SGLang `--deepep-mode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", value(rename_all = "snake_case"))]
pub enum DeepEpMode {
    /// Normal kernels for batches with prefill, low-latency ones for decode-only batches.
    #[default]
    Auto,
    /// Normal (high-throughput) kernels: node-deduplicated RDMA, NVLink forwarding.
    Normal,
    /// Low-latency kernels: one RDMA message per (token, expert).
    LowLatency,
}

impl DeepEpMode {
    /// Every mode, in `--deepep-mode`'s order.
    pub const ALL: [DeepEpMode; 3] = [DeepEpMode::Auto, DeepEpMode::Normal, DeepEpMode::LowLatency];

    /// The mode's name, as `--deepep-mode` takes it and the echo prints it.
    pub fn name(self) -> &'static str {
        match self {
            DeepEpMode::Auto => "auto",
            DeepEpMode::Normal => "normal",
            DeepEpMode::LowLatency => "low_latency",
        }
    }

    /// Whether a step runs the low-latency kernels (`prefill`: the batch has extend tokens).
    pub fn low_latency(self, prefill: bool) -> bool {
        match self {
            Self::Auto => !prefill,
            Self::Normal => false,
            Self::LowLatency => true,
        }
    }
}

/// How a MoE layer's tokens move under EP with DP attention.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MoeA2a {
    /// DeepEP's all-to-all kernels and their mode; `None`: the plain all-to-all of top-k BF16
    /// copies over NVLink and the NICs.
    pub deepep: Option<DeepEpMode>,
    /// SGLang `--enable-two-batch-overlap`: two micro-batches, one's all-to-alls behind the
    /// other's compute.
    pub two_batch_overlap: bool,
}

impl MoeA2a {
    /// Neither DeepEP nor two-batch overlap (what the config echo leaves out).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }
}

/// DeepEP's normal-kernel RDMA bandwidth at EP 32 as a share of the NIC's line rate:
/// dispatch 58 GB/s and combine 57 GB/s counted over all 4 destination nodes, 3/4 of it on the
/// wire, of 50 GB/s (DeepEP `docs/legacy.md`, "Normal kernels with NVLink and RDMA forwarding").
pub const NORMAL_RDMA_SHARE: (f64, f64) = (58.0 * 0.75 / 50.0, 57.0 * 0.75 / 50.0);

/// DeepEP's low-latency RDMA bandwidth (dispatch, combine), GB/s, by EP size, on a 50 GB/s NIC
/// (DeepEP `docs/legacy.md`, "Low-latency kernels with pure RDMA").
pub const LOW_LATENCY_GBPS: [(u64, f64, f64); 6] =
    [(8, 98.0, 127.0), (16, 63.0, 74.0), (32, 48.0, 53.0), (64, 43.0, 46.0), (128, 39.0, 39.0), (256, 39.0, 40.0)];

/// The NIC line rate per GPU those figures were measured on (CX7 400 Gb/s), bytes/s.
pub const DEEPEP_NIC_BYTES_PER_S: f64 = 50e9;

/// Probability that a token's top-`k` of `experts` (uniform routing, distinct experts) include
/// one of a given `share` of them: 1 − C(E − E·share, k) / C(E, k).
pub fn hit_probability(experts: f64, k: f64, share: f64) -> f64 {
    let others = experts - experts * share;
    let mut miss = 1.0;
    let mut i = 0.0;
    while i < k {
        miss *= ((others - i) / (experts - i)).max(0.0);
        i += 1.0;
    }
    1.0 - miss
}

/// Bytes of one token's hidden state on the wire: FP8 with one fp32 scale per 128 elements
/// (`fp8`), else BF16.
pub fn token_bytes(hidden: f64, fp8: bool) -> f64 {
    if fp8 {
        hidden * (1.0 + 4.0 / 128.0)
    } else {
        hidden * 2.0
    }
}

/// The shape of one EP all-to-all: ranks, GPUs per node, routed experts, top-k, hidden size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EpShape {
    pub ranks: u64,
    pub gpus_per_node: u64,
    pub experts: f64,
    pub k: f64,
    pub hidden: f64,
    /// Dispatch in FP8 in normal mode (the model's GEMMs are FP8: DeepGEMM's input).
    pub fp8_dispatch: bool,
}

impl EpShape {
    fn nodes(&self) -> u64 {
        (self.ranks / self.gpus_per_node.max(1)).max(1)
    }

    /// (network bytes, NVLink bytes) one rank sends or receives in a normal-mode all-to-all of
    /// `tokens` tokens at `bytes` each: a copy to every *other* node the token routes to
    /// ((N − 1) · P(node hit)), and the NVLink hop to every destination rank but the
    /// forwarder itself (R · P(rank hit) · (g − 1)/g).
    pub fn normal_bytes(&self, tokens: f64, bytes: f64) -> (f64, f64) {
        let (r, g, n) = (self.ranks as f64, self.gpus_per_node.min(self.ranks).max(1) as f64, self.nodes() as f64);
        let net = tokens * (n - 1.0) * hit_probability(self.experts, self.k, 1.0 / n) * bytes;
        let nvl = tokens * r * hit_probability(self.experts, self.k, 1.0 / r) * (g - 1.0) / g * bytes;
        (net, nvl)
    }

    /// Seconds of one MoE layer's dispatch and combine of `tokens` tokens per rank (on one node
    /// both modes are priced as the NVLink hop).
    pub fn layer_s(&self, links: &Links, tokens: f64, low_latency: bool) -> f64 {
        if self.ranks <= 1 || tokens <= 0.0 {
            return 0.0;
        }
        if low_latency && self.nodes() > 1 {
            let nic = links.nic_line_per_gpu() / DEEPEP_NIC_BYTES_PER_S;
            let (_, d, c) =
                LOW_LATENCY_GBPS.iter().rev().find(|row| row.0 <= self.ranks).copied().unwrap_or(LOW_LATENCY_GBPS[0]);
            let copies = tokens * self.k;
            let dispatch = copies * (token_bytes(self.hidden, true) + 16.0) / (d * 1e9 * nic);
            let combine = copies * token_bytes(self.hidden, false) / (c * 1e9 * nic);
            return 2.0 * links.net_latency() + dispatch + combine;
        }
        let one = |bytes: f64, share: f64| {
            let (net, nvl) = self.normal_bytes(tokens, bytes);
            let mut t = links.intra_latency_s + nvl / links.intra_achieved();
            if net > 0.0 {
                t = t.max(links.net_latency() + net / (links.nic_line_per_gpu() * share));
            }
            t
        };
        one(token_bytes(self.hidden, self.fp8_dispatch), NORMAL_RDMA_SHARE.0)
            + one(token_bytes(self.hidden, false), NORMAL_RDMA_SHARE.1)
    }
}

/// SMs DeepEP's normal kernels take by default (deepseek-ai/DeepEP `Buffer.num_sms` = 20;
/// SGLang's `DeepEPConfig.num_sms` unless `--deepep-config` states another).
pub const DEEPEP_NUM_SMS: u32 = 20;

/// The share of the GPU's SMs DeepGEMM runs on in a prefill under two-batch overlap: SGLang's
/// prefill strategy (`python/sglang/srt/operations_strategy.py`
/// `_compute_moe_deepseek_blog_prefill`, mid-2025 main) sets `deep_gemm_num_sms =
/// total_num_sms − DeepEPConfig.num_sms`, since the other micro-batch's DeepEP kernels hold those
/// SMs; its decode strategy leaves DeepGEMM all of them (`deep_gemm_num_sms=None`). 1 where
/// the GPU's SM count is not known. H100: 112 of 132.
pub fn deepgemm_sm_share(gpu: &crate::catalog::Gpu) -> f64 {
    match gpu.sm_count {
        Some(n) if n > DEEPEP_NUM_SMS => f64::from(n - DEEPEP_NUM_SMS) / f64::from(n),
        _ => 1.0,
    }
}

/// A step under two-batch overlap: each micro-batch computes for `compute_half_s` and
/// all-to-alls for `a2a_half_s` over `layers` MoE layers; the compute stream and the
/// communication stream each run both micro-batches in turn, so the step is the busier stream
/// (2 × the larger half) plus one layer's pipeline fill (the smaller half over the layers).
pub fn two_batch_s(compute_half_s: f64, a2a_half_s: f64, layers: f64) -> f64 {
    2.0 * compute_half_s.max(a2a_half_s) + compute_half_s.min(a2a_half_s) / layers.max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// P(hit) by hand: 8 of 256 experts, a quarter of them (one of 4 nodes): 1 − Π (192 − i) /
    /// (256 − i); one expert of 256 alone: 8/256.
    #[test]
    fn hit_probability_by_hand() {
        let miss: f64 = (0..8).map(|i| (192.0 - i as f64) / (256.0 - i as f64)).product();
        assert!((hit_probability(256.0, 8.0, 0.25) - (1.0 - miss)).abs() < 1e-15);
        assert!((hit_probability(256.0, 8.0, 1.0 / 256.0) - 8.0 / 256.0).abs() < 1e-12);
        assert_eq!(hit_probability(256.0, 8.0, 1.0), 1.0);
        assert_eq!((token_bytes(7168.0, true), token_bytes(7168.0, false)), (7392.0, 14336.0));
        assert!(!DeepEpMode::Auto.low_latency(true));
        assert!(DeepEpMode::Auto.low_latency(false) && DeepEpMode::LowLatency.low_latency(true));
    }

    /// DeepGEMM's share of the SMs under a TBO prefill: 112 of an H100's 132, 58 of an H20's 78;
    /// all of them where the SM count is unknown.
    #[test]
    fn deepgemm_keeps_the_sms_deepep_leaves() {
        let mut g = crate::catalog::gpu("h100-sxm", None).unwrap();
        assert_eq!(deepgemm_sm_share(&g), 112.0 / 132.0);
        assert_eq!(deepgemm_sm_share(&crate::catalog::gpu("h20", None).unwrap()), 58.0 / 78.0);
        g.sm_count = None;
        assert_eq!(deepgemm_sm_share(&g), 1.0);
    }

    fn links() -> Links {
        Links {
            intra_bytes_per_s: 450e9,
            intra_latency_s: 10e-6,
            net: Some(crate::catalog::network("ib-8x400", None).unwrap()),
            gpus_per_node: 8,
            efficiency: 0.7,
        }
    }

    fn v3(ranks: u64, fp8_dispatch: bool) -> EpShape {
        EpShape { ranks, gpus_per_node: 8, experts: 256.0, k: 8.0, hidden: 7168.0, fp8_dispatch }
    }

    /// Normal mode on 4 nodes of 8 (EP 32), 1,000 tokens a rank. Node dedup: a token goes to
    /// 3 × 0.9036 = 2.711 other nodes, not the plain all-to-all's 8 × 24/32 = 6 copies off the
    /// node. FP8 dispatch: the RDMA-bound dispatch shrinks by (14,336 − 7,392) B a copy at
    /// 0.87 × 50 GB/s; the combine stays BF16.
    #[test]
    fn normal_mode_dedups_nodes_and_dispatches_fp8() {
        let p_node = hit_probability(256.0, 8.0, 0.25);
        let (net, nvl) = v3(32, true).normal_bytes(1000.0, 7392.0);
        assert!((net - 1000.0 * 3.0 * p_node * 7392.0).abs() < 1e-6);
        assert!((net / (1000.0 * 6.0 * 7392.0) - 0.4518).abs() < 1e-4, "{}", net / (1000.0 * 6.0 * 7392.0));
        let p_rank = hit_probability(256.0, 8.0, 1.0 / 32.0);
        assert!((nvl - 1000.0 * 32.0 * p_rank * 7.0 / 8.0 * 7392.0).abs() < 1e-6);
        let l = links();
        let combine = 3e-6 + 1000.0 * 3.0 * p_node * 14336.0 / (50e9 * 0.855);
        let dispatch = |b: f64| 3e-6 + 1000.0 * 3.0 * p_node * b / (50e9 * 0.87);
        let (fp8, bf16) = (v3(32, true).layer_s(&l, 1000.0, false), v3(32, false).layer_s(&l, 1000.0, false));
        assert!((fp8 - (dispatch(7392.0) + combine)).abs() < 1e-15, "{fp8}");
        assert!((bf16 - (dispatch(14336.0) + combine)).abs() < 1e-15, "{bf16}");
        // One node: no RDMA, only the NVLink hop to the 8 × P(rank) destinations but itself.
        let one = v3(8, true);
        let (net, nvl) = one.normal_bytes(1000.0, 7392.0);
        let p8 = hit_probability(256.0, 8.0, 1.0 / 8.0);
        assert_eq!(net, 0.0);
        assert!((nvl - 1000.0 * 8.0 * p8 * 7.0 / 8.0 * 7392.0).abs() < 1e-6);
    }

    /// Low-latency mode at EP 72 (DeepEP's EP 64 row: 43 / 46 GB/s): every (token, expert)
    /// pair is a message, 7,168 + 224 + 16 = 7,408 B out and 14,336 B back. A 128-token
    /// micro-batch dispatches in 128 × 8 × 7,408 / 43 GB/s = 176.4 µs (the LMSYS blog measures
    /// ~0.17 ms per layer) and combines in 128 × 8 × 14,336 / 46 GB/s = 319.1 µs, plus a 3 µs
    /// hop each.
    #[test]
    fn low_latency_sends_every_copy_over_rdma() {
        let t = v3(72, true).layer_s(&links(), 128.0, true);
        let (d, c): (f64, f64) = (1024.0 * 7408.0 / 43e9, 1024.0 * 14336.0 / 46e9);
        assert!((d * 1e6 - 176.4).abs() < 0.1 && (c * 1e6 - 319.1).abs() < 0.1);
        assert!((t - (6e-6 + d + c)).abs() < 1e-15, "{t}");
        // EP 16 takes the EP 16 row; the mode does not dedup, so it moves more than normal.
        let t16 = v3(16, true).layer_s(&links(), 128.0, true);
        assert!((t16 - (6e-6 + 1024.0 * 7408.0 / 63e9 + 1024.0 * 14336.0 / 74e9)).abs() < 1e-15);
    }

    /// Two-batch overlap takes the busier stream, not the sum: 1 s of compute and 0.6 s of
    /// all-to-all per micro-batch over 60 layers = 2 s + 0.01 s; the sum form would be 3.2 s.
    #[test]
    fn two_batch_is_the_max_form() {
        assert!((two_batch_s(1.0, 0.6, 60.0) - 2.01).abs() < 1e-12);
        assert!((two_batch_s(0.6, 1.0, 60.0) - 2.01).abs() < 1e-12);
    }
}
