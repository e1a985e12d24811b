//! Which requests a benchmark sends and when (ENGINE_SPEC §7.4–7.5). `--num-prompts N` takes
//! the first N in order when the trace has times or sessions, else a seeded shuffle's first N
//! (as the clients sample). Send times: the trace's own (× `--time-scale`) when no rate is
//! given; `inf` sends everything at 0; a rate R follows `vllm bench serve`: gaps drawn from
//! Gamma(k, 1/(R·k)) (k = `--burstiness`, 1 = Poisson), summed, then rescaled so the last send
//! is exactly N / R.

use super::Workload;
use crate::error::{Error, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_distr::{Distribution, Gamma};
use serde::Serialize;

/// `--request-rate`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Rate {
    /// Everything at t = 0.
    Inf,
    /// Requests per second.
    PerSecond(f64),
}

impl std::str::FromStr for Rate {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        if s == "inf" {
            return Ok(Rate::Inf);
        }
        match s.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Ok(Rate::PerSecond(r)),
            _ => Err(format!("`{s}` is not a request rate (a positive number or `inf`)")),
        }
    }
}

/// How requests are picked and sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ArrivalOptions {
    /// `None`: trace times if the trace has them, else `inf`.
    pub rate: Option<Rate>,
    pub burstiness: f64,
    /// Multiplies trace times (2 = half the load).
    pub time_scale: f64,
    pub num_prompts: Option<usize>,
    pub seed: u64,
}

impl Default for ArrivalOptions {
    fn default() -> Self {
        Self { rate: None, burstiness: 1.0, time_scale: 1.0, num_prompts: None, seed: 0 }
    }
}

/// (request index, send time in seconds), in send order.
pub fn schedule(w: &Workload, o: &ArrivalOptions) -> Result<Vec<(u32, f64)>> {
    if !(o.burstiness.is_finite() && o.burstiness > 0.0) {
        return Err(Error::invalid("--burstiness", format!("{} must be a positive number", o.burstiness)));
    }
    if !(o.time_scale.is_finite() && o.time_scale > 0.0) {
        return Err(Error::invalid("--time-scale", format!("{} must be a positive number", o.time_scale)));
    }
    let mut rng = StdRng::seed_from_u64(o.seed);
    let timed = w.requests.iter().all(|r| r.arrival_ms.is_some());
    let ordered = timed || w.requests.iter().any(|r| r.session.is_some());
    let mut ids: Vec<u32> = (0..w.requests.len() as u32).collect();
    if let Some(n) = o.num_prompts {
        if !ordered {
            ids.shuffle(&mut rng);
        }
        ids.truncate(n);
    }
    let n = ids.len();
    let times: Vec<f64> = match o.rate {
        None if timed => {
            let t0 =
                ids.iter().map(|&i| w.requests[i as usize].arrival_ms.unwrap_or(0.0)).fold(f64::INFINITY, f64::min);
            ids.iter().map(|&i| (w.requests[i as usize].arrival_ms.unwrap_or(0.0) - t0) / 1e3 * o.time_scale).collect()
        }
        None | Some(Rate::Inf) => vec![0.0; n],
        Some(Rate::PerSecond(r)) => {
            let k = o.burstiness;
            let gamma = Gamma::new(k, 1.0 / (r * k)).map_err(|e| Error::invalid("--burstiness", e.to_string()))?;
            let mut t = 0.0;
            let mut v: Vec<f64> = (0..n)
                .map(|_| {
                    t += gamma.sample(&mut rng);
                    t
                })
                .collect();
            if let Some(&last) = v.last() {
                let scale = n as f64 / r / last;
                v.iter_mut().for_each(|x| *x *= scale);
            }
            v
        }
    };
    check_span(o, &ids, &times)?;
    Ok(ids.into_iter().zip(times).collect())
}

/// Latest send time accepted, in seconds (about 31.7 years): beyond it a run is surely a mistake
/// in `--request-rate` or `--time-scale`, and times lose sub-second precision.
pub const MAX_SEND_S: f64 = 1e9;

/// Refuses send times past [`MAX_SEND_S`], naming the flag and the request that caused them.
fn check_span(o: &ArrivalOptions, ids: &[u32], times: &[f64]) -> Result<()> {
    let Some(i) = times.iter().position(|t| !(t.is_finite() && *t <= MAX_SEND_S)) else { return Ok(()) };
    let (id, t) = (ids[i], times[i]);
    match o.rate {
        Some(Rate::PerSecond(r)) => Err(Error::invalid(
            "--request-rate",
            format!("{r:e} sends request {id} at {t:.3e} s, past the limit of {MAX_SEND_S:e} s (about 31 years)"),
        )),
        _ if o.time_scale > 1.0 => Err(Error::invalid(
            "--time-scale",
            format!(
                "{:e} puts request {id} at {t:.3e} s after the first, past the limit of {MAX_SEND_S:e} s (about 31 years)",
                o.time_scale
            ),
        )),
        _ => Err(Error::invalid(
            "--trace",
            format!(
                "request {id} arrives {t:.3e} s after the first, past the limit of {MAX_SEND_S:e} s (about 31 years); \
                 shrink the trace's times with --time-scale below 1"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!("inf".parse::<Rate>(), Ok(Rate::Inf));
        assert_eq!("2.5".parse::<Rate>(), Ok(Rate::PerSecond(2.5)));
        assert!("0".parse::<Rate>().is_err());
        assert!("-1".parse::<Rate>().is_err());
        assert!("fast".parse::<Rate>().is_err());
    }
}
