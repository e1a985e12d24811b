//! Honest predictions for `cachesim validate`: which refit predicts which case under
//! `--leave-one-out` (each fitted case from its profile refitted without it) and
//! `--leave-group-out gpu|source` (each group from its profiles refitted without the group's
//! cases, else from the engine family's factors fitted on the other groups, else from the
//! device factors fitted on other engines' cases with the case's own host overheads: the
//! fallback chain of [`leave_group_out`]). This module only plans: it names each case's
//! training cases and the profile whose options the refit reuses; the command runs the fits
//! (in parallel, each distinct training set once).

use crate::error::{Error, Result};
use std::collections::BTreeSet;

/// What a case's row is marked with when a refit predicted it without the case.
pub const LOO: &str = "loo";
/// What a case's row is marked with when a refit predicted it without its group.
pub const GROUP_OUT: &str = "group-out";
/// A case predicted by device factors fitted on another engine's cases on its GPU outside its
/// group, with its own profile's host overheads (leave-group-out, [`Rung::SameGpu`]).
pub const GROUP_OUT_SAME_GPU: &str = "group-out (same GPU, other engine)";
/// A case predicted by device factors fitted on other GPUs' and engines' cases outside its
/// group, with its own profile's host overheads (leave-group-out, [`Rung::AnyGpu`]).
pub const GROUP_OUT_OTHER: &str = "group-out (other GPU, other engine)";
/// A case whose profile was fitted on it alone (leave-one-out).
pub const NO_TRAINING_LEFT: &str = "no training case left";
/// A case with no training case outside its group (leave-group-out).
pub const NO_TRAINING_OUTSIDE: &str = "no training case outside its group";

/// The host-overhead factors: an engine's (its scheduler, batching and sampling on the CPU),
/// not a GPU's, so a refit on another engine's cases holds them at the case's own profile's.
pub const HOST_FACTORS: [&str; 2] = ["step_overhead_s", "per_seq_overhead_s"];

/// Whether a refit's mark says only the device factors were held out (rungs 3 and 4 of
/// [`leave_group_out`]): the host overheads come from the case's own profile, fitted on its
/// group, so these rows are summarised apart and not gated.
pub fn device_only(mark: &str) -> bool {
    mark == GROUP_OUT_SAME_GPU || mark == GROUP_OUT_OTHER
}

/// Which training set a refit uses (the rungs of [`leave_group_out`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    /// The case's profile refitted on its own other cases (leave-one-out, or outside the group).
    Profile,
    /// The engine family's factors fitted on its cases on other GPUs, outside the group.
    Family,
    /// The device factors fitted on other engines' cases on the same GPU, outside the group;
    /// the host overheads ([`HOST_FACTORS`]) held at the case's own profile's.
    SameGpu,
    /// The device factors fitted on other GPUs' and engines' cases, outside the group; the host
    /// overheads held at the case's own profile's.
    AnyGpu,
}

impl Rung {
    /// Whether the refit holds the host overheads at the case's own profile's.
    pub fn holds_host(self) -> bool {
        matches!(self, Rung::SameGpu | Rung::AnyGpu)
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
}

/// A case of the validation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    pub case: String,
    /// The GPU it runs on.
    pub gpu: String,
    /// Its group under `--leave-group-out` (GPU, or source; unused by leave-one-out).
    pub group: String,
    /// Its engine family.
    pub family: String,
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

/// Leave-group-out: a case whose profile was fitted on no case of its group keeps its
/// prediction; else it is predicted by the first rung of this chain that has a training case
/// outside its group (each training case a member of the run, in case order):
///
/// 1. [`Rung::Profile`] — its profile refitted on its cases outside the group (same GPU and
///    engine family);
/// 2. [`Rung::Family`] — a transferable profile: the engine family's factors fitted on the
///    cases of the other groups that a transferable profile of that family was fitted on
///    (efficiencies are shares of peak, so they transfer across GPUs);
/// 3. [`Rung::SameGpu`] — a transferable profile: the device factors fitted on the cases of
///    the other groups on the same GPU that any transferable profile was fitted on (another
///    engine family's, since rung 2 found none of its own), the host overheads held at the
///    case's own profile's;
/// 4. [`Rung::AnyGpu`] — the same on every GPU (then other GPUs and other engines).
///
/// Rungs 3 and 4 are marked [`GROUP_OUT_SAME_GPU`] / [`GROUP_OUT_OTHER`]: only the device
/// factors are held out ([`device_only`]). A case with no rung left, or whose profile is not
/// transferable, is [`NO_TRAINING_OUTSIDE`]. Every training case must be a member (its group
/// must be known): else an error naming it.
pub fn leave_group_out(members: &[Member], profiles: &[ProfileRef]) -> Result<Vec<Plan>> {
    let group_of = |case: &str| -> Result<&str> {
        members.iter().find(|m| m.case == case).map(|m| m.group.as_str()).ok_or_else(|| {
            Error::invalid("--leave-group-out", format!("a profile was fitted on case {case}, which is not run here"))
        })
    };
    // The cases of the transferable profiles, by family.
    let pool = |family: Option<&str>| -> BTreeSet<&str> {
        profiles
            .iter()
            .filter(|q| q.transferable && family.is_none_or(|f| q.family == f))
            .flat_map(|q| q.cases.iter().map(String::as_str))
            .collect()
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
        } else if !p.transferable {
            plans.push(Plan::NoTraining(NO_TRAINING_OUTSIDE));
            continue;
        }
        let outside = |pool: &BTreeSet<&str>, keep: &dyn Fn(&Member) -> bool| -> Vec<String> {
            members
                .iter()
                .filter(|o| pool.contains(o.case.as_str()) && o.group != m.group && keep(o))
                .map(|o| o.case.clone())
                .collect()
        };
        let family = pool(Some(&p.family));
        let any = pool(None);
        let rungs: [(Rung, &'static str, Vec<String>); 3] = [
            (Rung::Family, GROUP_OUT, outside(&family, &|o| o.family == m.family)),
            (Rung::SameGpu, GROUP_OUT_SAME_GPU, outside(&any, &|o| o.gpu == m.gpu)),
            (Rung::AnyGpu, GROUP_OUT_OTHER, outside(&any, &|_| true)),
        ];
        plans.push(match rungs.into_iter().find(|(_, _, t)| !t.is_empty()) {
            Some((rung, mark, training)) => Plan::Refit { training, options_of: pi, rung, mark },
            None => Plan::NoTraining(NO_TRAINING_OUTSIDE),
        });
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
        let gpu = group.into();
        Member { case: case.into(), gpu, group: group.into(), family: family.into(), profile, selected: true }
    }

    fn p(cases: &[&str], family: &str, transferable: bool) -> ProfileRef {
        ProfileRef { cases: cases.iter().map(|c| c.to_string()).collect(), family: family.into(), transferable }
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

    /// By GPU every profile's cases share the group: the vLLM A100 cases are predicted from the
    /// H100 cases and the other way round; the lone H100 sglang case, with no sglang case and
    /// no other engine's case on H100 outside its group, falls to the last rung (the A100
    /// profile's cases: other GPU, other engine); the stand-in has nothing.
    #[test]
    fn leave_gpu_out_by_hand() {
        let (members, profiles) = set();
        let family = |t: &[&str], pi| Plan::Refit {
            training: t.iter().map(|c| c.to_string()).collect(),
            options_of: pi,
            rung: Rung::Family,
            mark: GROUP_OUT,
        };
        let want = [
            family(&["h1", "h2"], 0),
            family(&["h1", "h2"], 0),
            family(&["h1", "h2"], 0),
            family(&["a1", "a2"], 1),
            family(&["a1", "a2"], 1),
            Plan::Refit {
                training: vec!["a1".into(), "a2".into()],
                options_of: 2,
                rung: Rung::AnyGpu,
                mark: GROUP_OUT_OTHER,
            },
            Plan::Keep,
            Plan::NoTraining(NO_TRAINING_OUTSIDE),
        ];
        assert_eq!(leave_group_out(&members, &profiles).unwrap(), want);
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
        // s1 (sglang, H100, in s1): no sglang case and no H100 case outside s1; of every
        // transferable profile's cases only a2 is outside (a3 trains no profile, x1's does not
        // transfer).
        assert_eq!(
            plans[4],
            Plan::Refit { training: vec!["a2".into()], options_of: 2, rung: Rung::AnyGpu, mark: GROUP_OUT_OTHER }
        );
        assert_eq!((&plans[5], &plans[6]), (&Plan::Keep, &Plan::NoTraining(NO_TRAINING_OUTSIDE)));
        // A training case that is not a member is an error naming it.
        let e = leave_group_out(&members[1..], &profiles).unwrap_err().to_string();
        assert!(e.contains("case a1, which is not run here"), "{e}");
    }

    /// The fallback chain by source: two pages, each engine family on one. TensorRT-LLM on
    /// H100 (page 2) trains on the H100 sglang case of page 1 (same GPU, other engine) and the
    /// reverse; the H200 and A100 cases have no case of their GPU outside their page and take
    /// every transferable case outside it (other GPU, other engine); a stand-in profile's case
    /// neither transfers nor trains another. A same-family case outside the page comes first.
    #[test]
    fn fallback_rungs_by_hand() {
        let mk = |case: &str, gpu: &str, group: &str, family: &str, profile| Member {
            case: case.into(),
            gpu: gpu.into(),
            group: group.into(),
            family: family.into(),
            profile: Some(profile),
            selected: true,
        };
        let mut members = vec![
            mk("t1", "h100", "page2", "trtllm", 0),
            mk("t2", "h100", "page2", "trtllm", 0),
            mk("u1", "h200", "page2", "trtllm", 1),
            mk("g1", "h100", "page1", "sglang", 2),
            mk("v1", "a100", "page1", "vllm", 3),
            mk("x1", "h100", "page3", "vllm", 4),
        ];
        let mut profiles = vec![
            p(&["t1"], "trtllm", true),
            p(&["u1"], "trtllm", true),
            p(&["g1"], "sglang", true),
            p(&["v1"], "vllm", true),
            p(&["x1"], "vllm", false),
        ];
        let refit = |t: &[&str], pi, rung, mark| Plan::Refit {
            training: t.iter().map(|c| c.to_string()).collect(),
            options_of: pi,
            rung,
            mark,
        };
        let same = |t: &[&str], pi| refit(t, pi, Rung::SameGpu, GROUP_OUT_SAME_GPU);
        let other = |t: &[&str], pi| refit(t, pi, Rung::AnyGpu, GROUP_OUT_OTHER);
        assert_eq!(
            leave_group_out(&members, &profiles).unwrap(),
            [
                same(&["g1"], 0),
                same(&["g1"], 0),
                other(&["g1", "v1"], 1),
                same(&["t1"], 2),
                other(&["t1", "u1"], 3),
                Plan::NoTraining(NO_TRAINING_OUTSIDE),
            ]
        );
        assert!(device_only(GROUP_OUT_SAME_GPU) && device_only(GROUP_OUT_OTHER) && !device_only(GROUP_OUT));
        assert!(Rung::SameGpu.holds_host() && Rung::AnyGpu.holds_host() && !Rung::Family.holds_host());
        // An sglang case on page 3 (any GPU) puts g1 back on the family rung; the others keep
        // theirs, and v1's last rung now counts it too.
        members.push(mk("g2", "a100", "page3", "sglang", 5));
        profiles.push(p(&["g2"], "sglang", true));
        let plans = leave_group_out(&members, &profiles).unwrap();
        assert_eq!(plans[3], refit(&["g2"], 2, Rung::Family, GROUP_OUT));
        assert_eq!(plans[0], same(&["g1"], 0));
        // v1 (A100, page 1): g2 is an A100 case outside page 1, of another engine.
        assert_eq!(plans[4], same(&["g2"], 3));
    }

    #[test]
    fn source_pages() {
        assert_eq!(source_page(None), "seed runs");
        assert_eq!(source_page(Some("https://x.org/blog/post/#table-2")), "https://x.org/blog/post");
        assert_eq!(source_page(Some("https://x.org/a?b=1")), "https://x.org/a");
    }
}
