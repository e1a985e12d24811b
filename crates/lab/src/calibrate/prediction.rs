//! What a case's simulation predicts ([`Prediction`]): the figures of a run's summary by the
//! benchmark clients' keys, or each figure's median over the runs of several seeds — the form
//! in which fits ([`super::fit`]) and the validation table ([`super::validation`]) read a
//! simulation.

use cachesim_core::metrics::Summary;
use std::collections::BTreeMap;

/// What a case's simulation predicts: each numeric figure of the run's summary, by sglang key —
/// of its one run, or, for a case simulated under several seeds, each figure's median over
/// them (numpy's linear median, as the clients compute theirs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Prediction(BTreeMap<String, f64>);

impl Prediction {
    /// The figures of one run's summary.
    pub fn of(s: &Summary) -> Self {
        let v = serde_json::to_value(s).unwrap_or_default();
        let figures = v.as_object().into_iter().flatten().filter_map(|(k, x)| Some((k.clone(), x.as_f64()?)));
        Prediction(figures.collect())
    }

    /// Each figure's median over `runs` (the figures every run has).
    pub fn median(runs: &[Prediction]) -> Self {
        let Some(first) = runs.first() else { return Prediction::default() };
        let figures = first.0.keys().filter_map(|k| {
            let mut v: Vec<f64> = runs.iter().map(|r| r.get(k)).collect::<Option<_>>()?;
            v.sort_by(f64::total_cmp);
            Some((k.clone(), cachesim_core::metrics::percentile(&v, 50.0)))
        });
        Prediction(figures.collect())
    }

    /// A figure by sglang key.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prediction_over_seeds_is_each_figures_median() {
        let p = |pairs: &[(&str, f64)]| Prediction(pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect());
        // Odd: the middle value; a figure one run lacks is left out.
        let runs = [p(&[("a", 3.0), ("b", 1.0)]), p(&[("a", 1.0), ("b", 5.0)]), p(&[("a", 2.0)])];
        assert_eq!(Prediction::median(&runs), p(&[("a", 2.0)]));
        // Even: numpy's linear median, the mean of the two middle values.
        let runs = [p(&[("a", 4.0)]), p(&[("a", 1.0)]), p(&[("a", 10.0)]), p(&[("a", 2.0)])];
        assert_eq!(Prediction::median(&runs).get("a"), Some(3.0));
        assert_eq!(Prediction::median(&[]), Prediction::default());
    }
}
