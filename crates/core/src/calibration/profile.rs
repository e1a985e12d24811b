//! Fitted step-time profiles (`calibration/profiles/<name>.toml`): the [`Efficiency`] factors of
//! one (GPU, engine family) fitted on named cases, with the fit's quality. The profiles of the
//! repository are built into the binary; `cachesim run` picks the one whose GPU, engine family
//! and model match the run ([`builtin_for`]) unless told `--calibration none` (the raw roofline)
//! or `--calibration FILE`.

use super::factors::FitOptions;
use crate::cost::Efficiency;
use crate::engine::EngineKind;
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// One row of a fit's residuals or hold-out predictions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Residual {
    pub case: String,
    pub metric: String,
    pub measured: f64,
    pub predicted: f64,
    pub error_pct: f64,
}

/// How a profile was fitted and how well (empty for a profile written by hand).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitInfo {
    /// The command that produced the profile.
    pub command: String,
    /// The cases fitted on.
    pub cases: Vec<String>,
    /// Metric weights of the objective.
    pub weights: BTreeMap<String, f64>,
    /// Factors fitted; the others are held at their defaults.
    pub fitted: Vec<String>,
    /// Factors held, each with why (no case constrains it).
    pub held: Vec<String>,
    /// Σ weight × ln(predicted / measured)² at the optimum.
    pub objective: f64,
    /// Root mean square of ln(predicted / measured) over the fitted rows.
    pub rms_log_error: f64,
    /// Median |error %| over the fitted rows.
    pub median_abs_error_pct: f64,
    /// Simulations of every case run by the optimiser.
    pub evaluations: u64,
    /// Nelder–Mead iterations at most (`--max-iters`); absent in a profile written before it
    /// was recorded (then read from `command`, see [`FitInfo::options`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iters: Option<u64>,
    /// Whether the step law of `--unknown-hardware` was fitted in place of the roofline's
    /// factors; absent as `max_iters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_hardware: Option<bool>,
    /// Whether the roofline's factors were searched within the wide bounds of `--wide-bounds`;
    /// absent when not (or in a profile written before the flag existed, whose command says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wide_bounds: Option<bool>,
    /// The factors the search started from and the held ones kept (`--start FILE`); absent:
    /// the raw roofline's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Efficiency>,
    /// The factors fitted by name (`--factors`), the others held at the start's values; absent:
    /// the factors the cases constrain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    /// The prior's width in ln units (`--prior-sigma`, [`FitOptions::prior_sigma`]): every
    /// fitted factor was pulled toward its `start` value; absent: no prior.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior_sigma: Option<f64>,
    /// How well the cases determine each fitted factor: the standard error of its natural
    /// logarithm at the optimum (the factor × or ÷ e^this at one standard error), from
    /// `calibrate --fit` and `--report`; a factor missing was within a step of a bound or not
    /// determined at all. Absent in a profile written before it was kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub spread: BTreeMap<String, f64>,
    /// What the fit assumed beyond its cases (e.g. a report whose totals differ from the rebuilt
    /// workload's, accepted by `--accept-totals-mismatch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<String>,
    /// What people wrote about the fit (`calibrate --fit --note`), kept when the profile is
    /// refitted to the same file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Leave-one-out: median |error %| predicting each case from a fit without it (`None` with
    /// a single case).
    pub loo_median_abs_error_pct: Option<f64>,
    pub residuals: Vec<Residual>,
    #[serde(default)]
    pub leave_one_out: Vec<Residual>,
}

impl FitInfo {
    /// The cases fitted on, for a line of text: every name up to three, else the count and the
    /// first two (a profile fitted on a silicon sample names dozens of rows).
    pub fn cases_named(&self) -> String {
        match self.cases.len() {
            0..=3 => self.cases.join(", "),
            n => format!("{n} cases: {}, …", self.cases[..2].join(", ")),
        }
    }

    /// The options a profile was fitted with, from its `fit` record: its weights, `max_iters` and
    /// `unknown_hardware` and `wide_bounds` (for a record written before those were kept, the flags
    /// of its `command`: `--max-iters N`, `--unknown-hardware`, `--wide-bounds`; absent, the
    /// defaults), searching from the default factors as `calibrate --fit` does. A refit with these
    /// options on the same cases reproduces the profile.
    pub fn options(&self) -> FitOptions {
        let words: Vec<&str> = self.command.split_whitespace().collect();
        let flag_value = |flag: &str| words.windows(2).find(|w| w[0] == flag).map(|w| w[1]);
        let max_iters = self
            .max_iters
            .or_else(|| flag_value("--max-iters").and_then(|v| v.parse().ok()))
            .unwrap_or(FitOptions::default().max_iters);
        let unknown_hardware = self.unknown_hardware.unwrap_or_else(|| words.contains(&"--unknown-hardware"));
        let wide_bounds = self.wide_bounds.unwrap_or_else(|| words.contains(&"--wide-bounds"));
        let weights = match self.weights.is_empty() {
            false => self.weights.clone(),
            true if unknown_hardware => super::factors::unknown_hardware_weights(),
            true => super::factors::default_weights(),
        };
        let bounds = FitOptions { wide_bounds, unknown_hardware, ..FitOptions::default() };
        let only = self
            .only
            .iter()
            .filter_map(|n| bounds.bounds().iter().find(|f| f.name == n.as_str()).map(|f| f.name))
            .collect();
        FitOptions {
            weights,
            max_iters,
            start: self.start.unwrap_or_default(),
            unknown_hardware,
            wide_bounds,
            hold: Vec::new(),
            only,
            prior_sigma: self.prior_sigma,
        }
    }
}

/// A fitted profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    /// GPU profile name it applies to.
    pub gpu: String,
    /// Engine family: `vllm` (v1), `vllm-v0`, `sglang`, `lightllm`, `trtllm`; `kernels` for a profile
    /// fitted on kernel step cases alone, which no run picks on its own (`--calibration FILE`
    /// uses it).
    pub engine: String,
    /// Models it was fitted on and applies to.
    pub models: Vec<String>,
    pub efficiency: Efficiency,
    #[serde(default)]
    pub fit: FitInfo,
}

impl Profile {
    /// How well the profile is known to predict, in words: its leave-one-out median |error|,
    /// else (one case) its fit's, else `not fitted`; then the fitted factors that ended at a
    /// bound of their search ([`super::factors::at_bounds`]), which stand in for something the
    /// model leaves out.
    pub fn quality(&self) -> String {
        let error = match self.fit.loo_median_abs_error_pct {
            Some(e) => format!("leave-one-out median |error| {e:.1} %"),
            None if self.fit.cases.is_empty() => return "not fitted".to_string(),
            None => format!(
                "fit median |error| {:.1} % on {} case(s), no leave-one-out",
                self.fit.median_abs_error_pct,
                self.fit.cases.len()
            ),
        };
        let names = super::factors::names_at_bounds(&self.efficiency, &self.fit.fitted, &self.fit.options());
        match names.is_empty() {
            true => error,
            false => format!("{error}; at a bound of its search: {}", names.join(", ")),
        }
    }
}

/// The engine a profile fitted with `calibrate --fit --any-engine` records: cases of several
/// engine families, so it matches no run's [`family`] and is used only when named.
pub const ANY_ENGINE: &str = "any";

/// The engine family of a scheduler, as profiles name it. vLLM's V0 engine is a family of its
/// own: its host time (a slow Python scheduler, and under multi-step scheduling paid once per
/// batch of steps) does not transfer to v1, whose scheduler runs every step and overlaps it.
pub fn family(e: EngineKind) -> &'static str {
    match e {
        EngineKind::Vllm => "vllm",
        EngineKind::VllmV0 => "vllm-v0",
        EngineKind::Sglang => "sglang",
        EngineKind::Lightllm => "lightllm",
        EngineKind::Trtllm => "trtllm",
    }
}

/// The profiles of `calibration/profiles/`, built in: (file name, text).
const BUILTIN: &[(&str, &str)] = &[
    ("b200-trtllm-llama70b.toml", include_str!("../../../../calibration/profiles/b200-trtllm-llama70b.toml")),
    ("a100-80gb-sglang.toml", include_str!("../../../../calibration/profiles/a100-80gb-sglang.toml")),
    ("a100-80gb-vllm.toml", include_str!("../../../../calibration/profiles/a100-80gb-vllm.toml")),
    ("h100-sxm-sglang.toml", include_str!("../../../../calibration/profiles/h100-sxm-sglang.toml")),
    ("h100-sxm-sglang-qwen3.toml", include_str!("../../../../calibration/profiles/h100-sxm-sglang-qwen3.toml")),
    ("h100-sxm-trtllm.toml", include_str!("../../../../calibration/profiles/h100-sxm-trtllm.toml")),
    ("h100-sxm-trtllm-qwen3.toml", include_str!("../../../../calibration/profiles/h100-sxm-trtllm-qwen3.toml")),
    ("h100-sxm-vllm.toml", include_str!("../../../../calibration/profiles/h100-sxm-vllm.toml")),
    ("h100-sxm-vllm-qwen3.toml", include_str!("../../../../calibration/profiles/h100-sxm-vllm-qwen3.toml")),
    ("h20-sglang.toml", include_str!("../../../../calibration/profiles/h20-sglang.toml")),
    ("h20-vllm.toml", include_str!("../../../../calibration/profiles/h20-vllm.toml")),
    ("v100-vllm.toml", include_str!("../../../../calibration/profiles/v100-vllm.toml")),
    ("h200-trtllm.toml", include_str!("../../../../calibration/profiles/h200-trtllm.toml")),
];

/// The built-in kernel-step profile (engine `kernels`): no run picks it on its own — it prices
/// no serving engine — but `--calibration kernels` lends its device factors.
const BUILTIN_KERNELS: (&str, &str) =
    ("h200-kernels.toml", include_str!("../../../../calibration/profiles/h200-kernels.toml"));

/// The built-in kernel-step profile with its file name.
pub fn builtin_kernels() -> (&'static str, Profile) {
    static PARSED: OnceLock<Profile> = OnceLock::new();
    let (f, t) = BUILTIN_KERNELS;
    (f, PARSED.get_or_init(|| parse(Path::new(f), t).expect("built-in profiles parse (tested)")).clone())
}

/// Parses a profile; `path` names the file in errors.
pub fn parse(path: &Path, text: &str) -> Result<Profile> {
    toml::from_str(text)
        .map_err(|e| Error::Report { path: path.to_path_buf(), message: crate::messages::toml_error(text, &e) })
}

/// Whether the TOML file at `path` is a step-time profile (it has an `[efficiency]` table), as
/// `calibrate --fit --out` writes one: a cases folder may hold the profile fitted on it.
pub fn is_profile_file(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .is_some_and(|t| t.get("efficiency").is_some_and(toml::Value::is_table))
}

/// Reads a profile file.
pub fn read(path: &Path) -> Result<Profile> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
    parse(path, &text)
}

/// Writes a profile as TOML.
pub fn to_toml(p: &Profile) -> String {
    toml::to_string(p).unwrap_or_default()
}

/// The built-in profiles, parsed once per process: every run resolves its calibration, and a
/// sweep resolves a run per grid point (parsing them each time was most of a small point's
/// cost).
fn parsed() -> &'static [(&'static str, Profile)] {
    static PARSED: OnceLock<Vec<(&'static str, Profile)>> = OnceLock::new();
    PARSED.get_or_init(|| {
        BUILTIN.iter().map(|(f, t)| (*f, parse(Path::new(f), t).expect("built-in profiles parse (tested)"))).collect()
    })
}

/// Every built-in profile with its file name.
pub fn builtin() -> Vec<(&'static str, Profile)> {
    parsed().to_vec()
}

/// The built-in profiles with their file names, borrowed: for lookups that keep none of them.
pub fn builtin_iter() -> impl Iterator<Item = &'static (&'static str, Profile)> {
    parsed().iter()
}

/// The built-in profile for a GPU, engine family and model, with its file name.
pub fn builtin_for(gpu: &str, engine: EngineKind, model: &str) -> Option<(&'static str, Profile)> {
    parsed()
        .iter()
        .find(|(_, p)| p.gpu == gpu && p.engine == family(engine) && p.models.iter().any(|m| m == model))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_come_from_the_record_else_the_command() {
        let mut info = FitInfo {
            command: "cachesim calibrate --fit --cases 'x' --out p.toml --max-iters 300 --unknown-hardware".into(),
            ..Default::default()
        };
        let o = info.options();
        assert_eq!((o.max_iters, o.unknown_hardware, o.wide_bounds), (300, true, false));
        assert_eq!(o.weights, crate::calibration::factors::unknown_hardware_weights());
        let wide = FitInfo { command: "cachesim calibrate --fit --wide-bounds".into(), ..Default::default() };
        let o = wide.options();
        assert_eq!((o.unknown_hardware, o.wide_bounds), (false, true));
        assert_eq!(o.weights, crate::calibration::factors::default_weights());
        info.max_iters = Some(20);
        info.unknown_hardware = Some(false);
        info.weights = [("median_ttft_ms".to_string(), 2.0)].into_iter().collect();
        info.prior_sigma = Some(0.5);
        let o = info.options();
        assert_eq!((o.max_iters, o.unknown_hardware, o.weights.len(), o.prior_sigma), (20, false, 1, Some(0.5)));
        let o = FitInfo::default().options();
        assert_eq!((o.max_iters, o.unknown_hardware), (150, false));
    }

    #[test]
    fn builtin_profiles_parse_and_match_at_most_one_setup() {
        let all = builtin();
        let (f, k) = builtin_kernels();
        assert!(f.ends_with(&format!("{}.toml", k.name)) && k.engine == "kernels", "{f}");
        for (i, (f, p)) in all.iter().enumerate() {
            assert!(f.ends_with(&format!("{}.toml", p.name)), "{f} holds profile {}", p.name);
            for (g, q) in &all[i + 1..] {
                let overlap = p.gpu == q.gpu && p.engine == q.engine && p.models.iter().any(|m| q.models.contains(m));
                assert!(!overlap, "{f} and {g} both match one setup");
            }
        }
    }

    /// The seed runs' profiles are picked for their deployments (GPU, engine family, model) and
    /// for nothing else; a profile fitted on vLLM's V0 engine prices V0 runs only, not v1 ones.
    #[test]
    fn seed_profiles_are_selected_for_their_deployments() {
        let pick = |gpu, e, model| builtin_for(gpu, e, model).map(|(f, p)| (f, p.fit.cases));
        let v100 = Some(("v100-vllm.toml", vec!["v100-llama11b-2dp-router".to_string()]));
        assert_eq!(pick("v100", EngineKind::VllmV0, "llama-3.2-11b"), v100);
        assert_eq!(pick("v100", EngineKind::Vllm, "llama-3.2-11b"), None);
        let a100 = Some(("a100-80gb-vllm.toml", vec!["P002".to_string(), "P010".to_string()]));
        assert_eq!(pick("a100-80gb", EngineKind::VllmV0, "llama-3.1-8b"), a100);
        assert_eq!(pick("a100-80gb", EngineKind::Vllm, "llama-3.1-8b"), None);
        let h20v = Some(("h20-vllm.toml", vec!["h20-dsr1-vllm-tp8pp2".to_string()]));
        assert_eq!(pick("h20", EngineKind::VllmV0, "deepseek-r1"), h20v);
        assert_eq!(pick("h20", EngineKind::Vllm, "deepseek-r1"), None);
        let h20s = Some(("h20-sglang.toml", vec!["h20-dsr1-sglang-tp16-mtp".to_string()]));
        assert_eq!(pick("h20", EngineKind::Sglang, "deepseek-r1"), h20s);
        assert_eq!(pick("v100", EngineKind::Sglang, "llama-3.2-11b"), None);
        assert_eq!(pick("h20", EngineKind::Vllm, "llama-3.1-8b"), None);
        assert_eq!(pick("h20", EngineKind::Lightllm, "deepseek-r1"), None);
    }

    /// A fitted factor within 1 % of a bound of its search is named, with the side: the H20
    /// SGLang profile has seven, the A100 SGLang one none; the widened bounds of `--wide-bounds`
    /// move the lower ones.
    #[test]
    fn factors_at_a_bound_are_named() {
        use super::super::factors::{at_bounds, FitOptions};
        let e = crate::cost::Efficiency { mem_bw: 1.0, gemm_flops: 0.5, comm_bw: 0.1, ..Default::default() };
        let fitted = ["mem_bw", "gemm_flops", "comm_bw"];
        let plain = FitOptions::default();
        let got = at_bounds(&e, &fitted, &plain);
        assert_eq!(got, ["mem_bw 1.000 at its upper bound 1", "comm_bw 0.100 at its lower bound 0.1"]);
        let wide = FitOptions { wide_bounds: true, ..FitOptions::default() };
        assert_eq!(at_bounds(&e, &fitted, &wide), ["mem_bw 1.000 at its upper bound 1"]);
        assert!(at_bounds(&e, &["gemm_flops"], &plain).is_empty(), "only fitted factors");
        let all = builtin();
        let q = |name: &str| all.iter().find(|(_, p)| p.name == name).unwrap().1.quality();
        assert!(
            q("h20-sglang").ends_with(
                "no leave-one-out; at a bound of its search: gemm_flops, attn_flops, mem_bw, step_overhead_s, per_seq_overhead_s, comm_bw, comm_latency_s"
            ),
            "{}",
            q("h20-sglang")
        );
        assert_eq!(q("a100-80gb-sglang"), "leave-one-out median |error| 11.0 %");
    }
}
