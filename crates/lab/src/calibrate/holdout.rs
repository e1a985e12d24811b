//! Honest predictions for `cachesim validate`: which refit predicts which case under
//! `--leave-one-out` (each fitted case from its profile refitted without it) and
//! `--leave-group-out gpu|source` (each group from its profiles refitted without the group's
//! cases, else from the engine family's factors fitted on the other groups' cases of the same
//! model class, else from the device factors measured at kernel level outside the group with
//! the host factors at the priors, else from the step-time priors with no fitted factor at all:
//! the fallback chain of [`leave_group_out`], whose family rung takes a profile of the family
//! fitted wholly outside the group as fitted before it refits). This module only plans: it names each case's
//! training cases and the profile whose options the refit reuses; the command runs the fits (in
//! parallel, each distinct training set once).

use cachesim_core::error::{Error, Result};
use std::collections::BTreeSet;

/// What a case's row is marked with when a refit predicted it without the case.
pub const LOO: &str = "loo";
/// What a case's row is marked with when a refit predicted it without its group.
pub const GROUP_OUT: &str = "group-out";
/// What a case's row is marked with when no case outside its group could train it: the
/// step-time priors ([`cachesim_core::cost::Efficiency::default`], as `--uncalibrated`) predict it,
/// fitted on nothing ([`Plan::Prior`]).
pub const GROUP_OUT_PRIOR: &str = "group-out (prior)";
/// What a case's row is marked with when no serving case outside its group could train it but
/// a kernel-step profile fitted outside the group could: its device factors, the priors' host
/// and communication factors ([`cachesim_core::calibration::prior::kernel_device_prior`], [`Plan::Prior`] with `device_of`).
pub const GROUP_OUT_KERNELS: &str = "group-out (kernel device)";
/// The engine family of kernel-step profiles (`engine = "kernels"`): fitted on steps timed on a
/// GPU with no serving engine around them.
pub const KERNELS: &str = "kernels";
/// A case whose profile was fitted on it alone (leave-one-out).
pub const NO_TRAINING_LEFT: &str = "no training case left";

/// Which training set a refit uses (the rungs of [`leave_group_out`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// The case's profile refitted on its own other cases (leave-one-out, or outside the group).
    Profile,
    /// The engine family's factors fitted on its cases of the same model class on other GPUs,
    /// outside the group.
    Family,
    /// The device factors of a kernel-step profile fitted outside the group, the host and
    /// communication factors at the priors ([`Plan::Prior`] with `device_of`).
    Kernels,
    /// No fitted factor: the step-time priors ([`Plan::Prior`]).
    Prior,
}

impl Rung {
    /// Its name in the per-rung summary: `profile`, `family`, `kernels`, `prior`.
    pub fn name(self) -> &'static str {
        match self {
            Rung::Profile => "profile",
            Rung::Family => "family",
            Rung::Kernels => "kernels",
            Rung::Prior => "prior",
        }
    }
}

/// A step-time profile as the planner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRef {
    /// The cases it was fitted on (its `fit.cases`).
    pub cases: Vec<String>,
    /// Its engine family.
    pub family: String,
    /// Fitted with real hardware bounds: its factors are shares of peak and transfer across GPUs
    /// (a profile fitted with `--unknown-hardware` absorbs a stand-in setup and does not).
    pub transferable: bool,
    /// The GPU it was fitted for (the family rung prefers a profile of the case's GPU).
    pub gpu: String,
    /// A fitted factor of it ended at a bound of its search: it stands in for something the
    /// model leaves out, so the profile lends nothing as fitted to another group.
    pub at_bound: bool,
    /// The metrics its cases measured (its fit's residual rows), and those its fit weighs: a
    /// refit with its options trains only on profiles' cases that measured one of the latter.
    pub measured: Vec<String>,
    pub weighted: Vec<String>,
}

/// A case of the validation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub case: String,
    /// Its group under `--leave-group-out` (GPU, or source; unused by leave-one-out).
    pub group: String,
    /// Its engine family.
    pub family: String,
    /// Its GPU (catalog name).
    pub gpu: String,
    /// Its model class ([`cachesim_core::calibration::prior::model_class`]): the family rung trains only on cases of the same.
    pub class: String,
    /// The index of its profile in the planner's profile list; `None`: the raw roofline.
    pub profile: Option<usize>,
    /// Whether it is to be predicted (selected by `--cases`); the others only train.
    pub selected: bool,
}

/// How one selected case is predicted.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Its profile's own prediction stands (held out already, or the raw roofline).
    Keep,
    /// A refit on `training` (case names, in case order) with the fit options of profile
    /// `options_of`, the training set chosen by `rung`; `mark`: the case's row mark.
    Refit { training: Vec<String>, options_of: usize, rung: Rung, mark: &'static str },
    /// The family rung without a refit: profile `from` — of the case's engine family, fitted
    /// with real hardware bounds on cases all outside the group and all of the case's model
    /// class, no factor at a bound of its search — predicts it with its factors as fitted (marked [`GROUP_OUT`]); `options_of`: the
    /// case's own profile.
    Transfer { from: usize, options_of: usize },
    /// No serving case outside its group can train it: the step-time priors predict it, no
    /// factor fitted on any serving case; `options_of`: its own profile, named in its profile
    /// line only. `device_of`: a kernel-step profile ([`KERNELS`]) whose every case lies outside
    /// the group — its device factors replace the priors' ([`cachesim_core::calibration::prior::kernel_device_prior`], marked
    /// [`GROUP_OUT_KERNELS`]); `None`: the priors alone (marked [`GROUP_OUT_PRIOR`]).
    Prior { options_of: usize, device_of: Option<usize> },
    /// No refit possible: the reason (its rows keep the profile's prediction, ungated).
    NoTraining(&'static str),
}

/// Leave-one-out: a case a profile was fitted on is predicted by that profile refitted on its
/// other cases; a held-out or raw case keeps its prediction.
pub fn leave_one_out(members: &[Member], profiles: &[ProfileRef]) -> Vec<Plan> {
    members
        .iter()
        .filter(|m| m.selected)
        .map(|m| {
            let Some(pi) = m.profile else { return Plan::Keep };
            let p = &profiles[pi];
            if !p.cases.contains(&m.case) {
                return Plan::Keep;
            }
            let training: Vec<String> = p.cases.iter().filter(|c| **c != m.case).cloned().collect();
            if training.is_empty() {
                Plan::NoTraining(NO_TRAINING_LEFT)
            } else {
                Plan::Refit { training, options_of: pi, rung: Rung::Profile, mark: LOO }
            }
        })
        .collect()
}

/// How far a profile fitted on GPU `fitted` is from a case on GPU `case`: 0 the same GPU, 1 one
/// of its architecture family ([`cachesim_core::calibration::prior::closeness`]), 2 any other (or
/// a GPU the catalog does not know).
fn gpu_distance(fitted: &str, case: &str) -> u8 {
    use cachesim_core::calibration::prior::{closeness, DeviceSource};
    if fitted == case {
        0
    } else if cachesim_core::catalog::gpu(case, None).is_ok_and(|g| closeness(fitted, &g) == DeviceSource::Family) {
        1
    } else {
        2
    }
}

/// Leave-group-out: a case whose profile was fitted on no case of its group keeps its
/// prediction; else it is predicted by the first rung of this chain that applies (each
/// training case a member of the run, in case order):
///
/// 1. [`Rung::Profile`] — its profile refitted on its cases outside the group (same GPU and
///    engine family);
/// 2. [`Rung::Family`] — the engine family's factors from other groups, of the same model class
///    ([`cachesim_core::calibration::prior::model_class`]; efficiencies are shares of peak, so
///    they transfer across GPUs; a class's factors absorb what the roofline leaves out of it —
///    expert routing, MLA, speculative steps — so they do not transfer across classes): a
///    transferable profile of the family every case of which lies outside the group and is of
///    the class, and no factor of which ended at a bound of its search, as fitted ([`Plan::Transfer`]: the one fitted for the case's GPU if any, else
///    for a GPU of its architecture family, else the one fitted on the most cases, else the
///    first); else a refit on the cases of the other
///    groups, of the class, that a transferable profile of the family was fitted on and whose
///    cases measured a metric the case's own profile's fit weighs;
/// 3. [`Rung::Kernels`] — [`Plan::Prior`] with `device_of`: the device factors (GEMM, HBM and
///    attention efficiency, the per-kernel floor) of a kernel-step profile ([`KERNELS`]: steps
///    timed on a GPU with no serving engine) all of whose cases lie outside the group, the host
///    and communication factors at the priors: what the hardware measurements say, with no
///    serving engine's overheads — the composed prior `run` falls back to
///    ([`cachesim_core::calibration::prior::composed`]), for a case of any model class (device
///    factors are the device's) and a stand-in profile's case too;
/// 4. [`Rung::Prior`] — [`Plan::Prior`] without `device_of`: the step-time priors, fitted on
///    nothing, so every factor is held out (what a user with no data from the group gets).
///
/// Rungs 1 and 2 are marked [`GROUP_OUT`], rung 3 [`GROUP_OUT_KERNELS`], rung 4
/// [`GROUP_OUT_PRIOR`]; all hold out every factor and are gated. Kernel-step cases are members
/// (family [`KERNELS`], never selected) so that their groups are known. (A transfer of the
/// device factors alone from other engines' cases, with the host overheads kept at the case's
/// own profile's, is not a rung: those overheads were fitted on the group itself.) Every training case must be a member (its group must be
/// known): else an error naming it.
pub fn leave_group_out(members: &[Member], profiles: &[ProfileRef]) -> Result<Vec<Plan>> {
    let group_of = |case: &str| -> Result<&str> {
        members.iter().find(|m| m.case == case).map(|m| m.group.as_str()).ok_or_else(|| {
            Error::invalid("--leave-group-out", format!("a profile was fitted on case {case}, which is not run here"))
        })
    };
    let mut plans = Vec::new();
    for m in members.iter().filter(|m| m.selected) {
        let Some(pi) = m.profile else {
            plans.push(Plan::Keep);
            continue;
        };
        let p = &profiles[pi];
        let mut training = Vec::new();
        for c in &p.cases {
            if group_of(c)? != m.group {
                training.push(c.clone());
            }
        }
        if training.len() == p.cases.len() {
            plans.push(Plan::Keep);
            continue;
        } else if !training.is_empty() {
            plans.push(Plan::Refit { training, options_of: pi, rung: Rung::Profile, mark: GROUP_OUT });
            continue;
        }
        // A transferable profile of the family fitted wholly outside the group, on the class.
        let outside = |q: &ProfileRef| {
            q.cases.iter().all(|c| {
                members.iter().any(|o| o.case == *c && o.group != m.group && o.family == m.family && o.class == m.class)
            })
        };
        let lender = profiles
            .iter()
            .enumerate()
            .filter(|(_, q)| q.transferable && !q.at_bound && q.family == p.family && !q.cases.is_empty())
            .filter(|(_, q)| outside(q))
            .min_by_key(|(qi, q)| (gpu_distance(&q.gpu, &m.gpu), std::cmp::Reverse(q.cases.len()), *qi));
        if let Some((from, _)) = lender.filter(|_| p.transferable) {
            plans.push(Plan::Transfer { from, options_of: pi });
            continue;
        }
        // The cases of the family's transferable profiles, outside the group, of the class.
        let pool: BTreeSet<&str> = profiles
            .iter()
            .filter(|q| q.transferable && q.family == p.family)
            .filter(|q| q.measured.iter().any(|m| p.weighted.contains(m)))
            .flat_map(|q| q.cases.iter().map(String::as_str))
            .collect();
        let family: Vec<String> = members
            .iter()
            .filter(|o| pool.contains(o.case.as_str()) && o.group != m.group)
            .filter(|o| o.family == m.family && o.class == m.class)
            .map(|o| o.case.clone())
            .collect();
        if p.transferable && !family.is_empty() {
            plans.push(Plan::Refit { training: family, options_of: pi, rung: Rung::Family, mark: GROUP_OUT });
            continue;
        }
        let mut device_of = None;
        for (qi, q) in profiles.iter().enumerate() {
            if q.family != KERNELS || !q.transferable || q.cases.is_empty() {
                continue;
            }
            let mut lends = true;
            for c in &q.cases {
                lends &= group_of(c)? != m.group;
            }
            if lends {
                device_of = Some(qi);
                break;
            }
        }
        plans.push(Plan::Prior { options_of: pi, device_of });
    }
    Ok(plans)
}

/// A published point's group under `--leave-group-out source`: its source URL's page (the URL
/// without fragment, query or trailing slash); a case without one (seed runs, other reports):
/// `seed runs`.
pub fn source_page(url: Option<&str>) -> String {
    let Some(u) = url else { return "seed runs".into() };
    let u = u.split(['#', '?']).next().unwrap_or(u);
    u.trim_end_matches('/').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(case: &str, group: &str, family: &str, profile: Option<usize>) -> Member {
        let (class, gpu) = ("dense".into(), String::new());
        Member { case: case.into(), group: group.into(), family: family.into(), gpu, class, profile, selected: true }
    }

    fn p(cases: &[&str], family: &str, transferable: bool) -> ProfileRef {
        let cases = cases.iter().map(|c| c.to_string()).collect();
        let measured = vec!["output_throughput".to_string()];
        ProfileRef {
            cases,
            family: family.into(),
            transferable,
            gpu: String::new(),
            at_bound: false,
            weighted: measured.clone(),
            measured,
        }
    }

    /// Two A100 cases and one held-out case of profile 0, two H100 cases of profile 1, one
    /// sglang case on its own, one raw case, one stand-in profile fitted on one case.
    fn set() -> (Vec<Member>, Vec<ProfileRef>) {
        let members = vec![
            m("a1", "a100", "vllm", Some(0)),
            m("a2", "a100", "vllm", Some(0)),
            m("a3", "a100", "vllm", Some(0)),
            m("h1", "h100", "vllm", Some(1)),
            m("h2", "h100", "vllm", Some(1)),
            m("s1", "h100", "sglang", Some(2)),
            m("r1", "v100", "vllm", None),
            m("x1", "stand-in", "vllm", Some(3)),
        ];
        let profiles = vec![
            p(&["a1", "a2"], "vllm", true),
            p(&["h1", "h2"], "vllm", true),
            p(&["s1"], "sglang", true),
            p(&["x1"], "vllm", false),
        ];
        (members, profiles)
    }

    #[test]
    fn leave_one_out_by_hand() {
        let (members, profiles) = set();
        let refit = |t: &[&str], pi| Plan::Refit {
            training: t.iter().map(|c| c.to_string()).collect(),
            options_of: pi,
            rung: Rung::Profile,
            mark: LOO,
        };
        assert_eq!(
            leave_one_out(&members, &profiles),
            [
                refit(&["a2"], 0),
                refit(&["a1"], 0),
                Plan::Keep,
                refit(&["h2"], 1),
                refit(&["h1"], 1),
                Plan::NoTraining(NO_TRAINING_LEFT),
                Plan::Keep,
                Plan::NoTraining(NO_TRAINING_LEFT),
            ]
        );
    }

    /// By GPU every profile's cases share the group: the vLLM A100 cases are predicted by the
    /// H100 profile as fitted and the other way round; the lone H100 sglang case, with no sglang
    /// case outside its group, and the stand-in (its factors do not transfer) fall to the priors.
    #[test]
    fn leave_gpu_out_by_hand() {
        let (members, profiles) = set();
        let transfer = |from, options_of| Plan::Transfer { from, options_of };
        let want = [
            transfer(1, 0),
            transfer(1, 0),
            transfer(1, 0),
            transfer(0, 1),
            transfer(0, 1),
            Plan::Prior { options_of: 2, device_of: None },
            Plan::Keep,
            Plan::Prior { options_of: 3, device_of: None },
        ];
        assert_eq!(leave_group_out(&members, &profiles).unwrap(), want);
    }

    /// A kernel-step profile fitted outside the group lends its device factors where the chain
    /// would fall to the priors; one fitted inside the group does not. Its cases are members
    /// (never selected, never planned).
    #[test]
    fn kernel_rung_by_hand() {
        let (mut members, mut profiles) = set();
        members.push(Member {
            case: "k1".into(),
            group: "h200".into(),
            family: KERNELS.into(),
            gpu: "h200".into(),
            class: "dense".into(),
            profile: Some(4),
            selected: false,
        });
        profiles.push(p(&["k1"], KERNELS, true));
        let plans = leave_group_out(&members, &profiles).unwrap();
        assert_eq!(plans.len(), 8, "the kernel case is not planned");
        assert_eq!(plans[5], Plan::Prior { options_of: 2, device_of: Some(4) });
        assert_eq!(plans[7], Plan::Prior { options_of: 3, device_of: Some(4) }, "a stand-in's case too");
        assert_eq!(plans[0], leave_group_out(&members[..8], &profiles[..4]).unwrap()[0], "rungs 1-2 unchanged");
        // In the sglang case's group, the kernel profile cannot lend its factors.
        members[8].group = "h100".into();
        let plans = leave_group_out(&members, &profiles).unwrap();
        assert_eq!(plans[5], Plan::Prior { options_of: 2, device_of: None });
        assert_eq!(plans[7], Plan::Prior { options_of: 3, device_of: Some(4) });
        // Device factors are the device's: they lend to a case of another model class too (dense
        // kernel steps, an MoE case), as `run`'s composed prior does.
        members[7].class = "MoE".into();
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[7], Plan::Prior { options_of: 3, device_of: Some(4) });
        assert_eq!(Rung::Kernels.name(), "kernels");
    }

    /// Groups that split a profile's cases refit it on the rest; a group holding none of them
    /// keeps the prediction; only selected cases are planned, all members train.
    #[test]
    fn leave_source_out_by_hand() {
        let (mut members, profiles) = set();
        for (mb, g) in members.iter_mut().zip(["s1", "s2", "s2", "s1", "s1", "s1", "s3", "s3"]) {
            mb.group = g.into();
        }
        members[0].selected = false;
        let plans = leave_group_out(&members, &profiles).unwrap();
        let refit = |t: &str, pi| Plan::Refit {
            training: vec![t.to_string()],
            options_of: pi,
            rung: Rung::Profile,
            mark: GROUP_OUT,
        };
        assert_eq!(plans.len(), 7);
        assert_eq!(plans[0], refit("a1", 0), "a2 in s2: a1 is outside");
        assert_eq!(plans[1], refit("a1", 0), "a3 held out, its group s2 holds a2");
        // h1 and h2 are both in s1: none outside; of the family's transferable cases only a2
        // (s2) is outside s1 — a1, unselected, still trains where its group allows.
        assert_eq!(
            plans[2],
            Plan::Refit { training: vec!["a2".into()], options_of: 1, rung: Rung::Family, mark: GROUP_OUT }
        );
        // s1 (sglang, in s1): no sglang case outside s1 — the vLLM cases outside do not train
        // it: the priors.
        assert_eq!(plans[4], Plan::Prior { options_of: 2, device_of: None });
        assert_eq!((&plans[5], &plans[6]), (&Plan::Keep, &Plan::Prior { options_of: 3, device_of: None }));
        // A training case that is not a member is an error naming it.
        let e = leave_group_out(&members[1..], &profiles).unwrap_err().to_string();
        assert!(e.contains("case a1, which is not run here"), "{e}");
    }

    /// The family rung by source trains on the family's cases of the same model class only:
    /// the dense vLLM cases of pages 1 and 2 predict each other; the MoE vLLM case of page 3
    /// skips them (another class) and falls to the priors, as do the lone TensorRT-LLM case and
    /// the two sglang cases (one dense, one MoE with speculative decoding: neither trains the
    /// other). A second MoE vLLM case on page 4 puts both MoE cases on the family rung.
    #[test]
    fn model_class_and_prior_rungs_by_hand() {
        let mk = |case: &str, group: &str, family: &str, class: &str, profile| Member {
            case: case.into(),
            group: group.into(),
            family: family.into(),
            gpu: String::new(),
            class: class.into(),
            profile: Some(profile),
            selected: true,
        };
        let mut members = vec![
            mk("d1", "page1", "vllm", "dense", 0),
            mk("d2", "page2", "vllm", "dense", 1),
            mk("e1", "page3", "vllm", "MoE", 2),
            mk("t1", "page2", "trtllm", "dense", 3),
            mk("g1", "page3", "sglang", "MoE, speculative", 4),
            mk("g2", "page1", "sglang", "dense", 5),
        ];
        let mut profiles = vec![
            p(&["d1"], "vllm", true),
            p(&["d2"], "vllm", true),
            p(&["e1"], "vllm", true),
            p(&["t1"], "trtllm", true),
            p(&["g1"], "sglang", true),
            p(&["g2"], "sglang", true),
        ];
        let family = |t: &[&str], pi| Plan::Refit {
            training: t.iter().map(|c| c.to_string()).collect(),
            options_of: pi,
            rung: Rung::Family,
            mark: GROUP_OUT,
        };
        let prior = |pi| Plan::Prior { options_of: pi, device_of: None };
        let transfer = |from, options_of| Plan::Transfer { from, options_of };
        assert_eq!(
            leave_group_out(&members, &profiles).unwrap(),
            [transfer(1, 0), transfer(0, 1), prior(2), prior(3), prior(4), prior(5)]
        );
        members.push(mk("e2", "page4", "vllm", "MoE", 6));
        profiles.push(p(&["e2"], "vllm", true));
        let plans = leave_group_out(&members, &profiles).unwrap();
        assert_eq!((&plans[2], &plans[6]), (&transfer(6, 2), &transfer(2, 6)));
        assert_eq!(plans[0], transfer(1, 0), "the MoE cases do not lend to a dense one");
        // A profile fitted partly inside the group lends nothing as fitted: the family's cases
        // outside the group are refitted with the case's own profile's options.
        profiles[1].cases.push("d1".into());
        let plans = leave_group_out(&members, &profiles).unwrap();
        assert_eq!(plans[0], family(&["d2"], 0));
        // Nor does a refit train on cases that measured none of the metrics its options weigh.
        profiles[0].weighted = vec!["median_tpot_ms".into()];
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], prior(0));
        assert_eq!(Rung::Prior.name(), "prior");
    }

    /// Of several profiles that could lend as fitted, the one of the case's GPU, else one of its
    /// architecture family, else the one fitted on the most cases, else the first.
    #[test]
    fn the_family_rung_prefers_the_cases_gpu_then_its_family_then_the_most_cases() {
        let mk = |case: &str, group: &str, gpu: &str, profile| Member {
            case: case.into(),
            group: group.into(),
            family: "sglang".into(),
            gpu: gpu.into(),
            class: "dense".into(),
            profile: Some(profile),
            selected: true,
        };
        let members = vec![
            mk("x", "page1", "h100", 0),
            mk("a1", "page2", "a100", 1),
            mk("a2", "page2", "a100", 1),
            mk("a3", "page2", "a100", 1),
            mk("h1", "page3", "h100", 2),
            mk("b1", "page4", "b200", 3),
        ];
        let q = |cases: &[&str], gpu: &str| ProfileRef { gpu: gpu.into(), ..p(cases, "sglang", true) };
        let mut profiles =
            vec![q(&["x"], "h100"), q(&["a1", "a2", "a3"], "a100"), q(&["h1"], "h100"), q(&["b1"], "b200")];
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 2, options_of: 0 });
        profiles[2].gpu = "h200".into();
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 2, options_of: 0 });
        profiles[2].gpu = "b300".into();
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 1, options_of: 0 });
        profiles[1].cases.truncate(1);
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 1, options_of: 0 });
        // A profile with a factor at a bound lends nothing as fitted; nor does a stand-in (not
        // transferable), whose case borrows nothing either.
        profiles[2].at_bound = true;
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 1, options_of: 0 });
        profiles[2].at_bound = false;
        profiles[1].transferable = false;
        assert_eq!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Transfer { from: 2, options_of: 0 });
        profiles[0].transferable = false;
        assert!(matches!(leave_group_out(&members, &profiles).unwrap()[0], Plan::Prior { .. }));
    }

    #[test]
    fn source_pages() {
        assert_eq!(source_page(None), "seed runs");
        assert_eq!(source_page(Some("https://x.org/blog/post/#table-2")), "https://x.org/blog/post");
        assert_eq!(source_page(Some("https://x.org/a?b=1")), "https://x.org/a");
    }
}
