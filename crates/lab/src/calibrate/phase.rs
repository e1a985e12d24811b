//! Phase points: published steady-state throughputs of one phase of a prefill/decode
//! disaggregated deployment — prefill-only or decode-only nodes kept full at a stated batch per
//! device, the other phase assumed unlimited (the LMSYS large-scale EP blog's P039–P044). Such a
//! figure is one step repeated, not a request stream: a case's `[phase]` table states the step
//! (sequences per device, new tokens and cached context of each), the case's `cachesim run`
//! flags state the deployment, and the step-time model of that deployment prices one step over
//! every device's batch. The prediction is tokens per node per second: the step's tokens (a
//! decode sequence's [`CostModel::tokens_per_step`], so speculative decoding counts its accepted
//! drafts) over the step's seconds (host and device overlapped as the engine does) over nodes.

use super::case::{LoadedCase, PhaseKind, PhaseSpec};
use super::validation::{CaseInfo, Row};
use cachesim_core::cost::parallel::Parallel;
use cachesim_core::cost::{BatchShape, CostModel};
use cachesim_core::error::{Error, Result};

impl PhaseSpec {
    /// The metric the point's figure is compared as.
    pub fn metric(&self) -> &'static str {
        match self.phase {
            PhaseKind::Prefill => "input_throughput",
            PhaseKind::Decode => "output_throughput",
        }
    }

    /// Checks the table against the phase: prefill steps compute whole chunks (more than one
    /// token), decode steps one token; at least one sequence.
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.seqs_per_device == 0 {
            return Err("phase.seqs_per_device must be at least 1".into());
        }
        match self.phase {
            PhaseKind::Prefill if self.new_tokens < 2 => Err("a prefill phase needs new_tokens ≥ 2".into()),
            PhaseKind::Decode if self.new_tokens != 1 => Err("a decode phase has new_tokens = 1".into()),
            _ => Ok(()),
        }
    }

    /// The step over all `world` devices: `world × seqs_per_device` sequences.
    pub fn batch(&self, world: u64) -> BatchShape {
        let mut b = BatchShape::default();
        for _ in 0..world * self.seqs_per_device as u64 {
            b.add(self.context, self.new_tokens);
        }
        b
    }

    /// Predicted tokens per node per second under `cost` for the layout `p` (`overlap`: the
    /// engine overlaps host work with the forward pass). Prefill counts the prompts' tokens;
    /// decode counts [`CostModel::tokens_per_step`] per sequence.
    pub fn per_node(&self, cost: &dyn CostModel, p: &Parallel, overlap: bool) -> f64 {
        let world = p.world();
        let b = self.batch(world);
        let per_seq = match self.phase {
            PhaseKind::Prefill => self.new_tokens as f64,
            PhaseKind::Decode => cost.tokens_per_step(),
        };
        let tokens = b.seqs as f64 * per_seq;
        tokens / cost.step_time(&b, overlap) / p.nnodes.max(1) as f64
    }
}

/// The validation row and how a phase case was priced: `cfg` is the case's deployment resolved
/// as `cachesim run` would resolve its flags (the caller decides the profile: the case's own,
/// else the raw roofline).
pub fn validate(c: &LoadedCase, cfg: &cachesim_core::config::RunConfig) -> Result<(CaseInfo, Vec<Row>)> {
    let fail = |message: String| Error::Report { path: c.file.clone(), message };
    let spec = c.case.phase.as_ref().ok_or_else(|| fail("not a phase case (no [phase])".into()))?;
    spec.check().map_err(fail)?;
    let metric = spec.metric();
    let measured = c
        .measured
        .get(metric)
        .ok_or_else(|| fail(format!("a {:?} phase is compared as {metric}, which `measured` lacks", spec.phase)))?;
    let predicted = spec.per_node(&cfg.cost(), &cfg.deployment.parallel, cfg.engine.overlap);
    let own = c.profile_path().is_some();
    let info = CaseInfo {
        case: c.case.case.clone(),
        calibration: if own {
            cfg.calibration.clone()
        } else {
            "none (raw roofline: the case names no profile)".into()
        },
        fitted: false,
        no_profile: !own,
        gpu: cfg.gpu.name.clone(),
        engine: cachesim_core::calibration::profile::family(cfg.engine.engine).to_string(),
        source: c.source(),
        refit: None,
        refit_on: None,
        rung: None,
    };
    let error_pct = (predicted - measured) / measured * 100.0;
    let row = Row { case: c.case.case.clone(), shape: None, metric: metric.into(), measured, predicted, error_pct };
    Ok((info, vec![row]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachesim_core::cost::Affine;

    /// Per node by hand with a linear step model: 4 devices (2 nodes) × 2 prompts of 1,000
    /// tokens = 8,000 tokens in a step of 10 ms + 8,000 × 1 µs = 18 ms → 444,444.4 tokens/s, over
    /// 2 nodes 222,222.2; the same as decode, 8 sequences at KV 500: 10 ms + 8 × 1 ms + 4,000 ×
    /// 1 µs = 22 ms → 363.6 tokens/s, 181.8 per node. Host and device overlapped take the larger.
    #[test]
    fn per_node_by_hand() {
        let a = Affine { base_s: 0.01, per_prefill_token_s: 1e-6, per_decode_seq_s: 1e-3, per_ctx_token_s: 1e-6 };
        let p = Parallel { tp: 4, pp: 1, ep: true, dp_attention: 4, nnodes: 2 };
        let pre = PhaseSpec { phase: PhaseKind::Prefill, seqs_per_device: 2, new_tokens: 1000, context: 0 };
        assert_eq!(pre.batch(4).prefill_tokens, 8000);
        assert!((pre.per_node(&a, &p, false) - 8000.0 / 0.018 / 2.0).abs() < 1e-6);
        let dec = PhaseSpec { phase: PhaseKind::Decode, seqs_per_device: 2, new_tokens: 1, context: 500 };
        let b = dec.batch(4);
        assert_eq!((b.decode_seqs, b.decode_ctx_tokens), (8, 4000));
        assert!((dec.per_node(&a, &p, false) - 8.0 / 0.022 / 2.0).abs() < 1e-9);
        assert_eq!((pre.metric(), dec.metric()), ("input_throughput", "output_throughput"));
        assert!(PhaseSpec { new_tokens: 2, ..dec.clone() }.check().unwrap_err().contains("new_tokens = 1"));
        assert!(PhaseSpec { new_tokens: 1, ..pre.clone() }.check().is_err());
        assert!(PhaseSpec { seqs_per_device: 0, ..pre }.check().is_err());
    }

    /// P040 without DeepEP — the plain all-to-all (no `--moe-a2a-backend deepep`) — by hand
    /// with the raw roofline (FP8 GEMMs at 0.6 × 1,978.9 TFLOPS, attention at
    /// 0.4 × 989.4, HBM 0.8 × 3.35 TB/s, NVLink 450 GB/s and the node's 8 × 400 Gb/s NICs at
    /// 0.7): 32 H100s on 4 nodes, DP attention and EP 32, 8 prompts of 2,048 a device = 524,288
    /// tokens; dense GEMMs, 58 MoE layers of top-8 experts (FLOP bound at this batch), prefill
    /// attention over 128 heads of 192 + 128, 3 dense layers' all-reduces and 58 × 2 all-to-alls
    /// of top-8 copies of each rank's tokens; the host's 3 ms hidden behind the device.
    #[test]
    fn p040_prefill_step_by_hand() {
        use cachesim_core::cost::{Deployment, Efficiency, Roofline};
        let (h100, m) = (
            cachesim_core::catalog::gpu("h100-sxm", None).unwrap(),
            cachesim_core::catalog::model("deepseek-r1", None).unwrap(),
        );
        let p = Parallel { tp: 32, pp: 1, ep: true, dp_attention: 32, nnodes: 4 };
        let net = cachesim_core::catalog::network("ib-8x400", None).unwrap();
        let d = Deployment { parallel: p, network: Some(net), ..Deployment::default() };
        let r = Roofline::deployed(&h100, &m, d, Efficiency::default());
        let spec = PhaseSpec { phase: PhaseKind::Prefill, seqs_per_device: 8, new_tokens: 2048, context: 0 };
        let t = 524_288.0;
        let (flops, attn_flops, bw) = (1978.9e12 * 0.6, 989.4e12 * 0.4, 3350e9 * 0.8);
        let attn_w = m.attn_weight_bytes();
        let dense_bytes = attn_w + (m.dense_weight_bytes() - attn_w) / 32.0;
        let dense = (2.0 * m.dense_matmul_params() / 32.0 * t / flops).max(dense_bytes / bw);
        let moe_flops = 58.0 * 2.0 * t * 8.0 * m.expert_params() / 32.0 / flops;
        assert!(moe_flops > 58.0 * 256.0 * m.expert_bytes() / 32.0 / bw, "FLOP bound");
        let pairs = 256.0 * 2048.0 * 2049.0 / 2.0;
        let attn = 2.0 * 61.0 * 128.0 * 320.0 / 32.0 * pairs / attn_flops;
        let (nvlink, nic) = (450e9 * 0.7, 400e9 / 8.0 * 0.7);
        let act = t * 7168.0 * 2.0;
        let all_reduce = 10e-6 + 2.0 * 7.0 / 8.0 * act / nvlink + 2.0 * 3.0 * 3e-6 + 1.5 * (act / 8.0) / nic;
        let sent = act / 32.0 * 8.0;
        let all_to_all = (10e-6 + sent * 7.0 / 32.0 / nvlink).max(3e-6 + sent * 24.0 / 32.0 / nic);
        let step = dense + moe_flops + attn + 3.0 * all_reduce + 58.0 * 2.0 * all_to_all;
        let want = t / step / 4.0;
        let got = spec.per_node(&r, &p, true);
        assert!((got / want - 1.0).abs() < 1e-9, "{got} vs {want}");
        // The all-to-alls are most of the step (4.67 of 6.14 s), not overlapped with compute.
        assert!(58.0 * 2.0 * all_to_all > 0.75 * step, "{all_to_all} of {step}");
    }

    /// P040 as published — DeepEP normal dispatch and two-batch overlap
    /// (`--enable-deepep-moe --deepep-mode normal --enable-two-batch-overlap`) — by hand with
    /// the raw roofline. Each micro-batch is half the step: 4 prompts of 2,048 a device, 8,192
    /// tokens a rank, 262,144 in all. Its compute is the plain roofline's at that size without
    /// the all-to-alls (dense GEMMs, 58 FLOP-bound MoE layers, prefill attention, 3 dense
    /// all-reduces) with the GEMMs on the 112 of 132 SMs DeepEP's normal kernels leave them
    /// under TBO = 0.8243 s (0.7341 s on all 132). Its all-to-alls, per MoE layer: P(a token
    /// routes to a given one of the 4 nodes) = 1 − Π (192 − i)/(256 − i) = 0.9036, so a rank
    /// sends 8,192 × 3 × 0.9036 tokens over RDMA — 164.1 MB of FP8 (7,168 × (1 + 4/128) = 7,392 B a token) at
    /// 0.87 × 50 GB/s = 3.78 ms, and 318.3 MB of BF16 combine at 0.855 × 50 GB/s = 7.45 ms; the
    /// NVLink hops (32 × P(rank) = 32 × 0.2271 destinations, 7/8 of them from another GPU, at
    /// 0.7 × 450 GB/s: 1.23 and 2.38 ms) are shorter. 58 × 11.23 ms = 0.6511 s. Under TBO the
    /// step is 2 × max(compute, all-to-all) + min / 58 (one layer's pipeline fill), that is 2 ×
    /// 0.8243 plus 0.6511 / 58 = 1.6598 s; without it, the whole step's compute on all SMs plus
    /// its all-to-alls (at 16,384 tokens a rank) = 2.7700 s.
    #[test]
    fn p040_prefill_step_deepep_tbo_by_hand() {
        use cachesim_core::cost::ep::{DeepEpMode, MoeA2a};
        use cachesim_core::cost::{Deployment, Efficiency, Roofline};
        let (h100, m) = (
            cachesim_core::catalog::gpu("h100-sxm", None).unwrap(),
            cachesim_core::catalog::model("deepseek-r1", None).unwrap(),
        );
        let p = Parallel { tp: 32, pp: 1, ep: true, dp_attention: 32, nnodes: 4 };
        let net = cachesim_core::catalog::network("ib-8x400", None).unwrap();
        let deployed = |two_batch_overlap| {
            let a2a = MoeA2a { deepep: Some(DeepEpMode::Normal), two_batch_overlap };
            let d = Deployment { parallel: p, network: Some(net.clone()), a2a, ..Deployment::default() };
            Roofline::deployed(&h100, &m, d, Efficiency::default())
        };
        let spec = PhaseSpec { phase: PhaseKind::Prefill, seqs_per_device: 8, new_tokens: 2048, context: 0 };
        let (flops, attn_flops, bw) = (1978.9e12 * 0.6, 989.4e12 * 0.4, 3350e9 * 0.8);
        let attn_w = m.attn_weight_bytes();
        let dense_bytes = attn_w + (m.dense_weight_bytes() - attn_w) / 32.0;
        let (nvlink, nic) = (450e9 * 0.7, 400e9 / 8.0 * 0.7);
        // The compute of `prompts` prompts of 2,048 over all 32 ranks, dense all-reduces included,
        // the GEMMs on `sms` of the 132 SMs.
        let compute = |prompts: f64, sms: f64| {
            let flops = flops * sms / 132.0;
            let t = prompts * 2048.0;
            let dense = (2.0 * m.dense_matmul_params() / 32.0 * t / flops).max(dense_bytes / bw);
            let moe = 58.0 * 2.0 * t * 8.0 * m.expert_params() / 32.0 / flops;
            let attn = 2.0 * 61.0 * 128.0 * 320.0 / 32.0 * prompts * 2048.0 * 2049.0 / 2.0 / attn_flops;
            let act = t * 7168.0 * 2.0;
            let all_reduce = 10e-6 + 2.0 * 7.0 / 8.0 * act / nvlink + 2.0 * 3.0 * 3e-6 + 1.5 * (act / 8.0) / nic;
            dense + moe + attn + 3.0 * all_reduce
        };
        let p_node = 1.0 - (0..8).map(|i| (192.0 - i as f64) / (256.0 - i as f64)).product::<f64>();
        let p_rank = 1.0 - (0..8).map(|i| (248.0 - i as f64) / (256.0 - i as f64)).product::<f64>();
        assert!((p_node - 0.9036).abs() < 1e-4 && (p_rank - 0.2271).abs() < 1e-4);
        // Dispatch (FP8 at 0.87 of line rate) and combine (BF16 at 0.855) of `tokens` a rank.
        let a2a_layer = |tokens: f64| {
            let one = |bytes: f64, share: f64| {
                let rdma = 3e-6 + tokens * 3.0 * p_node * bytes / (50e9 * share);
                let nvl = 10e-6 + tokens * 32.0 * p_rank * 7.0 / 8.0 * bytes / nvlink;
                rdma.max(nvl)
            };
            one(7392.0, 0.87) + one(14336.0, 0.855)
        };
        let layer = a2a_layer(8192.0);
        assert!((layer - 11.226e-3).abs() < 1e-5, "{layer}");
        // Under TBO the prefill's DeepGEMM runs on the 112 SMs DeepEP's 20 leave.
        let (c, a) = (compute(128.0, 112.0), 58.0 * layer);
        assert!(c > a, "the half step is compute bound: {c} vs {a}");
        assert!((c - 0.8243).abs() < 1e-4 && (a - 0.6511).abs() < 1e-4, "{c} {a}");
        assert!((compute(128.0, 132.0) - 0.7341).abs() < 1e-4, "on all SMs");
        let tbo = 2.0 * c + a / 58.0;
        let got = spec.per_node(&deployed(true), &p, true);
        assert!((got / (524_288.0 / tbo / 4.0) - 1.0).abs() < 1e-9, "{got} vs {tbo}");
        // Without TBO the full step's all-to-alls add to its compute.
        let sum = compute(256.0, 132.0) + 58.0 * a2a_layer(16_384.0);
        let got = spec.per_node(&deployed(false), &p, true);
        assert!((got / (524_288.0 / sum / 4.0) - 1.0).abs() < 1e-9, "{got} vs {sum}");
        // 1.660 s with TBO against 2.770 s without: the max form, not the sum.
        assert!((tbo - 1.6598).abs() < 1e-3 && (sum - 2.7700).abs() < 1e-3, "{tbo} vs {sum}");
    }

    /// P042's layout resolves as `cachesim run` resolves it: TP 72 over 9 nodes is allowed, and
    /// with DP attention the 128 heads split over one rank's attention group (TP / 72 = 1), not
    /// over all 72 ranks; without DP attention they must split over 72 and do not.
    #[test]
    fn ep72_layout_resolves_with_dp_attention_only() {
        use cachesim_core::config::{resolve, Calibration, RunOptions, MAX_TP};
        use cachesim_core::layout::LayoutOptions;
        let layout =
            LayoutOptions { ep: true, dp_attention: true, nnodes: 9, network: "ib-8x400".into(), ..Default::default() };
        let o = RunOptions {
            engine: cachesim_core::engine::EngineKind::Sglang,
            model: "deepseek-r1".into(),
            gpu: "h100-sxm".into(),
            tp: 72,
            layout,
            calibration: Calibration::None,
            ..Default::default()
        };
        let cfg = resolve(&o).unwrap();
        let p = cfg.deployment.parallel;
        assert_eq!((p.world(), p.dp_attention, p.attn_tp(), p.gpus_per_node()), (72, 72, 1, 8));
        let plain = RunOptions { layout: LayoutOptions { dp_attention: false, ..o.layout.clone() }, ..o.clone() };
        let e = resolve(&plain).unwrap_err().to_string();
        assert!(e.contains("128 attention heads do not split over 72 GPUs"), "{e}");
        let e = resolve(&RunOptions { tp: MAX_TP + 1, ..o }).unwrap_err().to_string();
        assert!(e.contains("145 must be between 1 and 144"), "{e}");
    }

    /// A phase case loads without a workload's prompts or rate, rejects unknown `[phase]`
    /// fields, and yields one row under its phase's metric — refused when `measured` lacks it.
    #[test]
    fn phase_case_files_load_and_price_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.toml");
        let body = "case = \"x\"\nexpressible = true\n\n[measured]\noutput_throughput = 1000.0\n\n\
                    [deployment]\ngpu = \"h100-sxm\"\nmodel = \"deepseek-r1\"\nengine = \"sglang\"\n\
                    topology = \"8\"\n\n[workload]\ndataset = \"synthetic decode-only\"\n\n\
                    [phase]\nphase = \"decode\"\nseqs_per_device = 4\nnew_tokens = 1\ncontext = 100\n";
        std::fs::write(&f, body).unwrap();
        let c = super::super::case::load(&f).unwrap();
        let spec = c.case.phase.clone().unwrap();
        assert_eq!((spec.phase, spec.seqs_per_device, spec.context), (PhaseKind::Decode, 4, 100));
        let o = cachesim_core::config::RunOptions {
            engine: cachesim_core::engine::EngineKind::Sglang,
            model: "deepseek-r1".into(),
            gpu: "h200".into(),
            tp: 8,
            calibration: cachesim_core::config::Calibration::None,
            ..Default::default()
        };
        let cfg = cachesim_core::config::resolve(&o).unwrap();
        let (info, rows) = validate(&c, &cfg).unwrap();
        assert!(info.no_profile && !info.fitted);
        let want = spec.per_node(&cfg.cost(), &cfg.deployment.parallel, cfg.engine.overlap);
        assert_eq!((rows[0].metric.as_str(), rows[0].measured, rows[0].predicted), ("output_throughput", 1000.0, want));
        assert!((rows[0].error_pct - (want / 10.0 - 100.0)).abs() < 1e-9);
        std::fs::write(&f, body.replace("output_throughput", "input_throughput")).unwrap();
        let e = validate(&super::super::case::load(&f).unwrap(), &cfg).unwrap_err().to_string();
        assert!(e.contains("compared as output_throughput, which `measured` lacks"), "{e}");
        std::fs::write(&f, body.replace("context = 100", "ctx = 100")).unwrap();
        let e = super::super::case::load(&f).unwrap_err().to_string();
        assert!(e.contains("unknown field `ctx`"), "{e}");
    }
}
