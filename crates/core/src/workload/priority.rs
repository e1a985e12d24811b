//! Priority classes drawn by share (`--priority-mix 0:0.2,1:0.8`), for traces that carry no
//! `priority` of their own: each conversation (or each request outside one) draws its class once,
//! from a generator seeded by `--seed`, so every turn of a session keeps its tenant's class. vLLM
//! serves lower priorities first under `--scheduling-policy priority`.

use super::Request;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Classes and their shares of the requests, with the seed of the draw.
#[derive(Debug, Clone, PartialEq)]
pub struct PriorityMix {
    /// (priority, share), shares adding up to 1, each class once.
    pub shares: Vec<(i32, f64)>,
    pub seed: u64,
}

/// The classes and shares as given on a command line (one value, not a list of them).
#[derive(Debug, Clone, PartialEq)]
pub struct Shares(pub Vec<(i32, f64)>);

/// Parses `P:SHARE,P:SHARE,...` (priorities are integers, shares in (0, 1] adding up to 1).
pub fn parse_shares(s: &str) -> Result<Shares, String> {
    let mut shares: Vec<(i32, f64)> = Vec::new();
    for part in s.split(',') {
        let (p, share) =
            part.split_once(':').ok_or_else(|| format!("`{part}` is not PRIORITY:SHARE (e.g. 0:0.2,1:0.8)"))?;
        let p: i32 = p.trim().parse().map_err(|_| format!("`{}` is not an integer priority", p.trim()))?;
        let share: f64 = share.trim().parse().map_err(|_| format!("`{}` is not a share", share.trim()))?;
        if !(share > 0.0 && share <= 1.0) {
            return Err(format!("the share of priority {p} is {share}: a share is above 0 and at most 1"));
        }
        if shares.iter().any(|&(q, _)| q == p) {
            return Err(format!("priority {p} is given twice"));
        }
        shares.push((p, share));
    }
    let total: f64 = shares.iter().map(|&(_, s)| s).sum();
    if (total - 1.0).abs() > 1e-9 {
        return Err(format!("the shares add up to {total}, not 1"));
    }
    Ok(Shares(shares))
}

impl PriorityMix {
    /// The class a uniform draw `u` in [0, 1) falls in (the last class takes rounding's rest).
    fn class(&self, u: f64) -> i32 {
        let mut acc = 0.0;
        for &(p, share) in &self.shares {
            acc += share;
            if u < acc {
                return p;
            }
        }
        self.shares.last().map_or(0, |&(p, _)| p)
    }

    /// Gives every request its class: one draw per session (in the order sessions first
    /// appear), one per request outside a session.
    pub fn assign(&self, requests: &mut [Request]) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x7072_696f_7269_7479);
        let mut by_session: Vec<Option<i32>> = Vec::new();
        for r in requests {
            r.priority = Some(match r.session {
                Some(s) => {
                    let s = s as usize;
                    if by_session.len() <= s {
                        by_session.resize(s + 1, None);
                    }
                    *by_session[s].get_or_insert_with(|| self.class(rng.random::<f64>()))
                }
                None => self.class(rng.random::<f64>()),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_checked() {
        assert_eq!(parse_shares("0:0.25, 3:0.75").unwrap().0, vec![(0, 0.25), (3, 0.75)]);
        assert!(parse_shares("0:0.5,1:0.4").unwrap_err().contains("add up to"));
        assert!(parse_shares("0:0.5,0:0.5").unwrap_err().contains("twice"));
        assert!(parse_shares("0:0,1:1").unwrap_err().contains("above 0"));
        assert!(parse_shares("x:1").unwrap_err().contains("integer"));
        assert!(parse_shares("1").unwrap_err().contains("PRIORITY:SHARE"));
    }

    fn req(session: Option<u32>) -> Request {
        Request {
            seq: 0,
            prompt_len: 1,
            output_len: 1,
            arrival_ms: None,
            session,
            prev_turn: None,
            ignore_eos: true,
            priority: None,
            lora: 0,
        }
    }

    #[test]
    fn draws_follow_the_shares_and_sessions_keep_one_class() {
        let mix = PriorityMix { shares: vec![(-1, 0.2), (4, 0.8)], seed: 7 };
        let mut rs: Vec<Request> = (0..10_000).map(|_| req(None)).collect();
        mix.assign(&mut rs);
        let high = rs.iter().filter(|r| r.priority == Some(-1)).count();
        assert!((1_800..2_200).contains(&high), "{high} of 10,000 drew the 20 % class");
        assert!(rs.iter().all(|r| r.priority == Some(-1) || r.priority == Some(4)));
        let mut again: Vec<Request> = (0..10_000).map(|_| req(None)).collect();
        mix.assign(&mut again);
        assert_eq!(rs, again, "the same seed draws the same classes");
        let mut turns: Vec<Request> = (0..400).map(|i| req(Some(i % 40))).collect();
        mix.assign(&mut turns);
        for s in 0..40 {
            let classes: std::collections::BTreeSet<Option<i32>> =
                turns.iter().filter(|r| r.session == Some(s)).map(|r| r.priority).collect();
            assert_eq!(classes.len(), 1, "session {s} has one class");
        }
    }
}
