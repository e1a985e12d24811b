//! How a model is laid out over GPUs and what the layout costs in communication: tensor
//! parallelism (TP) inside and across nodes, pipeline stages (PP), experts spread over ranks
//! (EP) and data-parallel attention (SGLang's `--enable-dp-attention`).
//!
//! Ranks are numbered TP-major: a TP group fills a node before the next node, so TP 8 × PP 2 on
//! two 8-GPU nodes puts one stage on each node, and TP 16 on two nodes spans both. Collectives
//! are priced as rings: an all-reduce of S bytes over g GPUs of one node moves 2(g − 1)/g · S
//! over NVLink; across n nodes it is hierarchical (reduce-scatter in the node, all-reduce of the
//! S/g shard between nodes over each GPU's share of the node's NICs, all-gather in the node).
//! [`pipeline`] plays batches through stages for the timeline of in-flight PP batches.

use crate::catalog::{Model, Network};
use crate::error::{Error, Result};
use serde::Serialize;

/// The layout of one serving instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Parallel {
    /// Tensor-parallel ranks per stage (`--tp`).
    pub tp: u64,
    /// Pipeline stages (`--pp`, vLLM `--pipeline-parallel-size`).
    pub pp: u64,
    /// Routed experts spread whole over the TP ranks instead of each sharded
    /// (`--enable-expert-parallel`; SGLang `--ep-size` = TP).
    pub ep: bool,
    /// Attention data-parallel groups (`--enable-dp-attention` with `--dp-size`); 1 = off.
    pub dp_attention: u64,
    /// Nodes the instance spans (`--nnodes`).
    pub nnodes: u64,
}

impl Default for Parallel {
    fn default() -> Self {
        Self::tp(1)
    }
}

impl Parallel {
    /// Plain tensor parallelism on one node.
    pub fn tp(tp: u64) -> Self {
        Self { tp, pp: 1, ep: false, dp_attention: 1, nnodes: 1 }
    }
    /// GPUs of the instance.
    pub fn world(&self) -> u64 {
        self.tp * self.pp
    }
    /// GPUs per node.
    pub fn gpus_per_node(&self) -> u64 {
        self.world() / self.nnodes.max(1)
    }
    /// Ranks of one attention TP group (TP / DP-attention groups).
    pub fn attn_tp(&self) -> u64 {
        self.tp / self.dp_attention.max(1)
    }
    /// GPUs of one TP group on one node, and nodes the group spans.
    pub fn tp_span(&self) -> (u64, u64) {
        let g = self.tp.min(self.gpus_per_node().max(1));
        (g, self.tp / g)
    }
    /// Whether a pipeline stage hands its activations to another node.
    pub fn pp_crosses_nodes(&self) -> bool {
        self.pp > 1 && self.nnodes > 1 && self.tp >= self.gpus_per_node()
    }

    /// Checks the layout against the model: sizes that divide, DP attention within TP.
    pub fn check(&self, model: &Model) -> Result<()> {
        if self.pp == 0 || self.pp > model.layers {
            return Err(Error::invalid("--pp", format!("{} stages for {} layers", self.pp, model.layers)));
        }
        if self.nnodes == 0 || !self.world().is_multiple_of(self.nnodes) {
            return Err(Error::invalid(
                "--nnodes",
                format!(
                    "{} nodes do not split {} GPUs (TP {} × PP {}) evenly",
                    self.nnodes,
                    self.world(),
                    self.tp,
                    self.pp
                ),
            ));
        }
        if self.dp_attention == 0 || !self.tp.is_multiple_of(self.dp_attention) {
            return Err(Error::invalid(
                "--dp-size",
                format!("{} attention DP groups do not split TP {}", self.dp_attention, self.tp),
            ));
        }
        if self.ep && !model.is_moe() {
            return Err(Error::invalid("--enable-expert-parallel", format!("{} has no experts", model.name)));
        }
        Ok(())
    }

    /// Layers of the largest stage (vLLM's `get_pp_indices` splits as evenly as it can; the
    /// KV budget is set by the rank with the most layers).
    pub fn stage_layers(&self, layers: u64) -> u64 {
        layers.div_ceil(self.pp.max(1))
    }

    /// KV bytes per token on one rank. MLA: the latent is replicated on every rank of an
    /// attention TP group (vLLM `ModelConfig.get_num_kv_heads` is 1 and `get_head_size`
    /// `kv_lora_rank + qk_rope_head_dim` under MLA; SGLang `get_cell_size_per_token` has no
    /// TP divisor under MLA). GQA: KV heads split over the attention TP ranks, never below one
    /// (`max(1, kv_heads // tp)`). Only the rank's own stage's layers cache KV.
    pub fn kv_bytes_per_token_per_rank(&self, model: &Model, kv_dtype_bytes: u64) -> u64 {
        let layers = self.stage_layers(model.kv_cache_layers());
        let per_layer = if model.is_mla() {
            model.kv_elems_per_layer()
        } else {
            2 * (model.kv_heads / self.attn_tp()).max(1) * model.head_dim
        };
        layers * per_layer * kv_dtype_bytes
    }

    /// Weight bytes on one rank: attention split over the attention TP group (replicated per
    /// DP-attention group), everything else — dense FFNs, shared and routed experts (sharded or,
    /// with EP, whole experts per rank: the same bytes), embedding and LM head — over TP; each
    /// stage holds its share of the layers.
    pub fn weight_bytes_per_rank(&self, model: &Model) -> f64 {
        if self.attn_tp() == self.tp {
            return model.weight_bytes(2) / self.tp as f64 / self.pp as f64;
        }
        let attn = model.attn_weight_bytes();
        let rest = model.weight_bytes(2) - attn;
        (attn / self.attn_tp() as f64 + rest / self.tp as f64) / self.pp as f64
    }
}

/// The links an instance's collectives run over, with achieved-bandwidth factors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Links {
    /// One direction between GPUs of a node, bytes/s.
    pub intra_bytes_per_s: f64,
    /// Latency of one collective inside a node, seconds.
    pub intra_latency_s: f64,
    /// Between nodes; `None` on one node.
    pub net: Option<Network>,
    /// GPUs per node (they share the node's NICs).
    pub gpus_per_node: u64,
    /// Achieved share of link bandwidth.
    pub efficiency: f64,
}

impl Links {
    /// Each GPU's share of its node's NICs, bytes/s, achieved.
    fn net_per_gpu(&self) -> f64 {
        self.net.as_ref().map_or(f64::INFINITY, |n| n.node_bytes_per_s() / self.gpus_per_node.max(1) as f64)
            * self.efficiency
    }
    /// One latency hop between nodes, seconds (0 on one node).
    pub(crate) fn net_latency(&self) -> f64 {
        self.net.as_ref().map_or(0.0, |n| n.latency_us * 1e-6)
    }
    /// Each GPU's share of its node's NICs at line rate, bytes/s (infinite on one node).
    pub(crate) fn nic_line_per_gpu(&self) -> f64 {
        self.net.as_ref().map_or(f64::INFINITY, |n| n.node_bytes_per_s() / self.gpus_per_node.max(1) as f64)
    }
    /// NVLink bytes/s one GPU achieves.
    pub(crate) fn intra_achieved(&self) -> f64 {
        self.intra_bytes_per_s * self.efficiency
    }

    /// Seconds of one all-reduce of `bytes` over `g` GPUs per node on `n` nodes: a ring over
    /// NVLink inside the node, then (n > 1) a ring of the `bytes / g` shard between nodes,
    /// 2(n − 1) latency hops.
    pub fn all_reduce_s(&self, bytes: f64, g: u64, n: u64) -> f64 {
        let mut t = 0.0;
        if g > 1 {
            let ring = 2.0 * (g as f64 - 1.0) / g as f64;
            t += self.intra_latency_s + ring * bytes / (self.intra_bytes_per_s * self.efficiency);
        }
        if n > 1 {
            let nf = n as f64;
            t +=
                2.0 * (nf - 1.0) * self.net_latency() + 2.0 * (nf - 1.0) / nf * (bytes / g as f64) / self.net_per_gpu();
        }
        t
    }

    /// Seconds of one all-to-all in which each of `ranks` ranks (`g` per node) sends `bytes`
    /// spread evenly over all ranks: the part for its own node over NVLink, the rest over its
    /// NIC share, concurrently.
    pub fn all_to_all_s(&self, bytes: f64, ranks: u64, g: u64) -> f64 {
        if ranks <= 1 {
            return 0.0;
        }
        let r = ranks as f64;
        let on_node = bytes * (g.min(ranks) as f64 - 1.0) / r;
        let off_node = bytes * (ranks.saturating_sub(g) as f64) / r;
        let mut t = self.intra_latency_s + on_node / (self.intra_bytes_per_s * self.efficiency);
        if off_node > 0.0 {
            t = t.max(self.net_latency() + off_node / self.net_per_gpu());
        }
        t
    }

    /// Seconds to hand `bytes` of activations to the next stage: each of the `tp` ranks sends
    /// a `1/tp` slice (over the network when the stage is on another node) and the receivers
    /// all-gather it (vLLM `send_tensor_dict` with `all_gather_group`).
    pub fn stage_send_s(&self, bytes: f64, tp: u64, cross_node: bool) -> f64 {
        let slice = bytes / tp as f64;
        let send = if cross_node {
            self.net_latency() + slice / self.net_per_gpu()
        } else {
            self.intra_latency_s + slice / (self.intra_bytes_per_s * self.efficiency)
        };
        let gather = if tp > 1 {
            self.intra_latency_s + (tp as f64 - 1.0) / tp as f64 * bytes / (self.intra_bytes_per_s * self.efficiency)
        } else {
            0.0
        };
        send + gather
    }
}

/// Plays batches through pipeline stages in order: `stages[b][s]` is batch b's time in stage
/// s; a stage takes the next batch when it is free and the batch has left the previous stage.
/// Returns each batch's completion time (all start at 0). With P stages of equal time t and
/// many batches a batch leaves every t instead of every P·t, while each batch still takes P·t.
pub fn pipeline(stages: &[Vec<f64>]) -> Vec<f64> {
    let depth = stages.iter().map(Vec::len).max().unwrap_or(0);
    let mut free = vec![0.0f64; depth];
    stages
        .iter()
        .map(|b| {
            let mut t = 0.0f64;
            for (s, d) in b.iter().enumerate() {
                t = t.max(free[s]) + d;
                free[s] = t;
            }
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    fn h20_links(nodes: u64) -> Links {
        Links {
            intra_bytes_per_s: 450e9,
            intra_latency_s: 10e-6,
            net: (nodes > 1).then(|| catalog::network("cx7-8x400", None).unwrap()),
            gpus_per_node: 8,
            efficiency: 0.7,
        }
    }

    #[test]
    fn tp16_two_node_all_reduce_by_hand() {
        // 1,000 tokens × 7,168 hidden × 2 B = 14,336,000 B over TP 16 = 8 GPUs × 2 nodes.
        let s = 14_336_000.0;
        let (g, n) = Parallel { nnodes: 2, ..Parallel::tp(16) }.tp_span();
        assert_eq!((g, n), (8, 2));
        // In the node: 10 µs + 2·7/8 · S / (450 GB/s · 0.7) = 10 + 79.644… µs.
        let intra = 10e-6 + 1.75 * s / 315e9;
        // Between nodes: 2 hops × 5 µs + 2·1/2 · (S/8) / (8 × 400 Gb/s / 8 GPUs · 0.7 = 35 GB/s).
        let inter = 10e-6 + (s / 8.0) / 35e9;
        let t = h20_links(2).all_reduce_s(s, g, n);
        assert!((t - (intra + inter)).abs() < 1e-12, "{t}");
        assert!((t * 1e6 - 150.844).abs() < 1e-3, "{}", t * 1e6);
        // On one node of 8 only the NVLink ring is left.
        assert!((h20_links(1).all_reduce_s(s, 8, 1) - intra).abs() < 1e-15);
        assert_eq!(h20_links(1).all_reduce_s(s, 1, 1), 0.0);
    }

    #[test]
    fn all_to_all_is_bound_by_the_slower_share() {
        let l = h20_links(2);
        // 16 ranks, 8 per node: 7/16 of the bytes over NVLink, 8/16 over 35 GB/s.
        let b = 1e6;
        let t = l.all_to_all_s(b, 16, 8);
        assert!((t - (5e-6 + 0.5 * b / 35e9).max(10e-6 + 7.0 / 16.0 * b / 315e9)).abs() < 1e-15);
        assert_eq!(l.all_to_all_s(b, 1, 8), 0.0);
    }

    #[test]
    fn two_stages_equal_batches() {
        // Two stages of 1 s. Alone, a batch takes 2 s whether or not others follow.
        assert_eq!(pipeline(&[vec![1.0, 1.0]]), vec![2.0]);
        // Two equal batches in flight: the second leaves 1 s after the first (3 s, not 4 s).
        assert_eq!(pipeline(&[vec![1.0, 1.0], vec![1.0, 1.0]]), vec![2.0, 3.0]);
        // Steady state: 10 batches in 11 s instead of 20 s — throughput doubles — yet each
        // batch still spends 2 s in the pipe: latency does not halve.
        let ten = pipeline(&vec![vec![1.0, 1.0]; 10]);
        assert_eq!(ten.last(), Some(&11.0));
        assert!(ten.windows(2).all(|w| w[1] - w[0] == 1.0));
        // Uneven batches leave a bubble: the short batch waits for stage 2.
        assert_eq!(pipeline(&[vec![1.0, 2.0], vec![0.5, 0.5]]), vec![3.0, 3.5]);
    }

    #[test]
    fn mla_kv_is_replicated_and_staged() {
        let r1 = catalog::model("deepseek-r1", None).unwrap();
        // (512 + 64) × 61 layers × 2 B = 70,272 B per token on every rank of TP 16.
        assert_eq!(r1.kv_bytes_per_token(2), 70_272);
        assert_eq!(Parallel::tp(16).kv_bytes_per_token_per_rank(&r1, 2), 70_272);
        assert_eq!(Parallel::tp(1).kv_bytes_per_token_per_rank(&r1, 2), 70_272);
        // Per layer: 576 × 2 = 1,152 B; fp8 KV halves it.
        assert_eq!(r1.kv_elems_per_layer() * 2, 1_152);
        assert_eq!(Parallel::tp(16).kv_bytes_per_token_per_rank(&r1, 1), 35_136);
        // PP 2: the larger stage has 31 layers → 31 × 1,152 = 35,712 B.
        let tp8pp2 = Parallel { pp: 2, nnodes: 2, ..Parallel::tp(8) };
        assert_eq!(tp8pp2.kv_bytes_per_token_per_rank(&r1, 2), 35_712);
        // GQA splits heads: Llama-3.1-70B at TP 8 keeps 1 of 8 KV heads.
        let l70 = catalog::model("llama-3.1-70b", None).unwrap();
        assert_eq!(Parallel::tp(8).kv_bytes_per_token_per_rank(&l70, 2), 40_960);
    }

    #[test]
    fn layouts_are_checked() {
        let r1 = catalog::model("deepseek-r1", None).unwrap();
        assert!(Parallel { nnodes: 2, ..Parallel::tp(16) }.check(&r1).is_ok());
        assert!(Parallel { nnodes: 3, ..Parallel::tp(16) }.check(&r1).is_err());
        assert!(Parallel { dp_attention: 3, ..Parallel::tp(16) }.check(&r1).is_err());
        let l8 = catalog::model("llama-3.1-8b", None).unwrap();
        assert!(Parallel { ep: true, ..Parallel::tp(2) }.check(&l8).is_err());
        assert!(Parallel { pp: 2, nnodes: 2, ..Parallel::tp(8) }.pp_crosses_nodes());
        assert!(!Parallel { pp: 2, ..Parallel::tp(4) }.pp_crosses_nodes());
    }
}
