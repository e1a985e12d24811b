//! Honest predictions for `cachesim validate`: which refit predicts which case under
//! `--leave-one-out` (each fitted case from its profile refitted without it) and
//! `--leave-group-out gpu|source` (each group from its profiles refitted without the group's
//! cases, else from the engine family's factors fitted on the other groups). This module only
//! plans: it names each case's training cases and the profile whose options the refit reuses;
//! the command runs the fits (in parallel, each distinct training set once).

use crate::error::{Error, Result};
use std::collections::BTreeSet;

/// What a case's row is marked with when a refit predicted it without the case.
pub const LOO: &str = "loo";
/// What a case's row is marked with when a refit predicted it without its group.
pub const GROUP_OUT: &str = "group-out";
/// A case whose profile was fitted on it alone (leave-one-out).
pub const NO_TRAINING_LEFT: &str = "no training case left";
/// A case with no training case outside its group (leave-group-out).
pub const NO_TRAINING_OUTSIDE: &str = "no training case outside its group";

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
    /// `options_of`; `family`: the engine family's factors fitted on other GPUs' cases.
    Refit { training: Vec<String>, options_of: usize, family: bool, mark: &'static str },
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
                Plan::Refit { training, options_of: pi, family: false, mark: LOO }
            }
        })
        .collect()
}

/// Leave-group-out: a case whose profile was fitted on no case of its group keeps its
/// prediction; else the profile is refitted on its cases outside the group; when none is left,
/// a transferable profile's engine family is fitted on the cases of the other groups that a
/// transferable profile of that family was fitted on. Every training case must be a member
/// (its group must be known): else an error naming it.
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
        } else if !training.is_empty() {
            plans.push(Plan::Refit { training, options_of: pi, family: false, mark: GROUP_OUT });
        } else if !p.transferable {
            plans.push(Plan::NoTraining(NO_TRAINING_OUTSIDE));
        } else {
            let pool: BTreeSet<&str> = profiles
                .iter()
                .filter(|q| q.transferable && q.family == p.family)
                .flat_map(|q| q.cases.iter().map(String::as_str))
                .collect();
            let mut training = Vec::new();
            for o in members {
                if pool.contains(o.case.as_str()) && o.family == m.family && o.group != m.group {
                    training.push(o.case.clone());
                }
            }
            plans.push(if training.is_empty() {
                Plan::NoTraining(NO_TRAINING_OUTSIDE)
            } else {
                Plan::Refit { training, options_of: pi, family: true, mark: GROUP_OUT }
            });
        }
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
        Member { case: case.into(), group: group.into(), family: family.into(), profile, selected: true }
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
            family: false,
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
    /// H100 cases and the other way round; the lone sglang case and the stand-in have nothing.
    #[test]
    fn leave_gpu_out_by_hand() {
        let (members, profiles) = set();
        let family = |t: &[&str], pi| Plan::Refit {
            training: t.iter().map(|c| c.to_string()).collect(),
            options_of: pi,
            family: true,
            mark: GROUP_OUT,
        };
        let want = [
            family(&["h1", "h2"], 0),
            family(&["h1", "h2"], 0),
            family(&["h1", "h2"], 0),
            family(&["a1", "a2"], 1),
            family(&["a1", "a2"], 1),
            Plan::NoTraining(NO_TRAINING_OUTSIDE),
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
        let refit =
            |t: &str, pi| Plan::Refit { training: vec![t.to_string()], options_of: pi, family: false, mark: GROUP_OUT };
        assert_eq!(plans.len(), 7);
        assert_eq!(plans[0], refit("a1", 0), "a2 in s2: a1 is outside");
        assert_eq!(plans[1], refit("a1", 0), "a3 held out, its group s2 holds a2");
        // h1 and h2 are both in s1: none outside; of the family's transferable cases only a2
        // (s2) is outside s1 — a1, unselected, still trains where its group allows.
        assert_eq!(plans[2], Plan::Refit { training: vec!["a2".into()], options_of: 1, family: true, mark: GROUP_OUT });
        assert_eq!(plans[4], Plan::NoTraining(NO_TRAINING_OUTSIDE));
        assert_eq!((&plans[5], &plans[6]), (&Plan::Keep, &Plan::NoTraining(NO_TRAINING_OUTSIDE)));
        // A training case that is not a member is an error naming it.
        let e = leave_group_out(&members[1..], &profiles).unwrap_err().to_string();
        assert!(e.contains("case a1, which is not run here"), "{e}");
    }

    #[test]
    fn source_pages() {
        assert_eq!(source_page(None), "seed runs");
        assert_eq!(source_page(Some("https://x.org/blog/post/#table-2")), "https://x.org/blog/post");
        assert_eq!(source_page(Some("https://x.org/a?b=1")), "https://x.org/a");
    }
}
