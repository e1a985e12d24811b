//! Which requests a benchmark sends and when (ENGINE_SPEC §7.4–7.5, docs/engines/clients.md).
//! Which: ShareGPT sampled by a client's rules replays that client's seeded Python shuffle
//! ([`ClientSample::order`](super::ClientSample::order)); otherwise `--num-prompts N` takes the
//! first N in order when the trace has times or sessions, else a seeded shuffle's first N.
//! When: the trace's own times (× `--time-scale`) when no rate is given; `inf` sends everything
//! at 0; a rate R follows the client's `get_request` ([`ArrivalProcess`]), drawing from NumPy's
//! legacy global generator seeded with `--seed` exactly as the client does, so the same seed
//! gives the client's own send times.

use super::pyrand::NumpyLegacy;
use super::Workload;
use crate::error::{Error, Result};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde::Serialize;

/// Whose `get_request` turns a finite `--request-rate` into send times (`--arrival-process`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ArrivalProcess {
    /// `vllm bench serve` (`vllm/benchmarks/serve.py::get_request`): N gaps drawn from
    /// `np.random.gamma(k, 1/(R·k))` (k = `--burstiness`), summed — so the first request also
    /// waits one gap — then rescaled so the last send is exactly N / R.
    Vllm,
    /// `benchmarks/benchmark_serving.py` of vLLM 0.9 and earlier (`get_request`): the first
    /// request at 0, then a gap of `np.random.gamma(k, 1/(R·k))` after each; no rescaling.
    #[cfg_attr(feature = "clap", value(name = "vllm-0.9"))]
    #[serde(rename = "vllm-0.9")]
    Vllm09,
    /// `python -m sglang.bench_serving` (`get_request`): the first request at 0, then a gap of
    /// `np.random.exponential(1/R)` after each; no burstiness, no rescaling.
    Sglang,
}

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
    /// How a finite rate becomes send times.
    pub process: ArrivalProcess,
}

impl Default for ArrivalOptions {
    fn default() -> Self {
        Self { rate: None, burstiness: 1.0, time_scale: 1.0, num_prompts: None, seed: 0, process: ArrivalProcess::Vllm }
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
    let timed = w.timed();
    let ordered = timed || w.requests.iter().any(|r| r.session.is_some());
    let ids: Vec<u32> = match &w.sample {
        Some(sample) => sample.order(o.seed, o.num_prompts),
        None => {
            let mut ids: Vec<u32> = (0..w.requests.len() as u32).collect();
            if let Some(n) = o.num_prompts {
                if !ordered {
                    ids.shuffle(&mut StdRng::seed_from_u64(o.seed));
                }
                ids.truncate(n);
            }
            ids
        }
    };
    let times = match o.rate {
        None if timed => {
            let t0 =
                ids.iter().map(|&i| w.requests[i as usize].arrival_ms.unwrap_or(0.0)).fold(f64::INFINITY, f64::min);
            ids.iter().map(|&i| (w.requests[i as usize].arrival_ms.unwrap_or(0.0) - t0) / 1e3 * o.time_scale).collect()
        }
        None | Some(Rate::Inf) => vec![0.0; ids.len()],
        Some(Rate::PerSecond(r)) => send_times(ids.len(), r, o)?,
    };
    check_span(o, &ids, &times)?;
    Ok(ids.into_iter().zip(times).collect())
}

/// When `sends` names a request more than once (a client's oversampling), a copy of `w` in
/// which every repeat is a request of its own (same sequence, so the same tokens) and `sends`
/// renumbered to it; `None` when every request is sent once.
pub fn split_repeats(w: &Workload, sends: &mut [(u32, f64)]) -> Option<Workload> {
    let mut seen = vec![false; w.requests.len()];
    let mut copy: Option<Workload> = None;
    for (id, _) in sends.iter_mut() {
        let i = *id as usize;
        if !std::mem::replace(&mut seen[i], true) {
            continue;
        }
        let c = copy.get_or_insert_with(|| w.clone());
        *id = c.requests.len() as u32;
        c.requests.push(w.requests[i]);
    }
    copy
}

/// Send times of `n` requests at `rate` per second, drawn as the client draws them.
pub fn send_times(n: usize, rate: f64, o: &ArrivalOptions) -> Result<Vec<f64>> {
    let seed = u32::try_from(o.seed)
        .map_err(|_| Error::invalid("--seed", format!("{} is above 2^32 - 1, NumPy's seed range", o.seed)))?;
    let mut np = NumpyLegacy::new(seed);
    match o.process {
        ArrivalProcess::Vllm => {
            let k = o.burstiness;
            let theta = 1.0 / (rate * k);
            let mut t = 0.0;
            let mut v: Vec<f64> = (0..n)
                .map(|_| {
                    t += np.gamma(k, theta);
                    t
                })
                .collect();
            if let Some(&last) = v.last().filter(|&&l| l != 0.0) {
                let normalize = n as f64 / rate / last;
                v.iter_mut().for_each(|x| *x *= normalize);
            }
            Ok(v)
        }
        ArrivalProcess::Vllm09 | ArrivalProcess::Sglang => {
            if o.process == ArrivalProcess::Sglang && o.burstiness != 1.0 {
                return Err(Error::invalid(
                    "--burstiness",
                    "sglang.bench_serving has no burstiness (its gaps are exponential): use --arrival-process vllm",
                ));
            }
            let k = o.burstiness;
            let mut t = 0.0;
            Ok((0..n)
                .map(|i| {
                    if i > 0 {
                        t += match o.process {
                            ArrivalProcess::Sglang => np.exponential(1.0 / rate),
                            _ => np.gamma(k, 1.0 / (rate * k)),
                        };
                    }
                    t
                })
                .collect())
        }
    }
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

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-14 * w.abs().max(1.0), "{got:?} vs {want:?}");
        }
    }

    fn opts(process: ArrivalProcess, burstiness: f64, seed: u64) -> ArrivalOptions {
        ArrivalOptions { process, burstiness, seed, ..ArrivalOptions::default() }
    }

    // Expected send times: the clients' get_request loops run with NumPy 2.x, e.g. for vLLM
    // np.random.seed(0); d = [np.random.gamma(shape=k, scale=1/(r*k)) for _ in range(n)];
    // cumulative sum; × (n / r) / d[-1]. For SGLang np.random.seed(1); t = 0; per request:
    // send at t, then t += np.random.exponential(1 / r).

    #[test]
    fn vllm_gamma_gaps_rescaled_to_n_over_rate() {
        let t = send_times(5, 2.0, &opts(ArrivalProcess::Vllm, 1.0, 0)).unwrap();
        close(&t, &[0.4612933000308972, 1.189237769060302, 1.724343049132401, 2.180609223781806, 2.5]);
        assert_eq!(t[4], 2.5, "the last send is exactly N / R");
        let t = send_times(5, 4.0, &opts(ArrivalProcess::Vllm, 0.5, 7)).unwrap();
        close(&t, &[0.008325043160875246, 0.28311600144338456, 0.38613900756618985, 1.1312955390150545, 1.25]);
        let t = send_times(4, 1.0, &opts(ArrivalProcess::Vllm, 3.0, 0)).unwrap();
        close(&t, &[1.452294115371493, 2.1828514090951057, 3.703883538194544, 4.0]);
    }

    #[test]
    fn sglang_first_at_zero_then_exponential_gaps() {
        let t = send_times(5, 2.0, &opts(ArrivalProcess::Sglang, 1.0, 1)).unwrap();
        close(&t, &[0.0, 0.2698029186295927, 0.9068655451362448, 0.9069227358155664, 1.0869291132425258]);
        let e = send_times(5, 2.0, &opts(ArrivalProcess::Sglang, 0.5, 1)).unwrap_err().to_string();
        assert!(e.contains("--burstiness") && e.contains("--arrival-process vllm"), "{e}");
        let e = send_times(5, 2.0, &opts(ArrivalProcess::Vllm, 1.0, 1 << 32)).unwrap_err().to_string();
        assert!(e.contains("--seed"), "{e}");
        assert!(send_times(0, 2.0, &opts(ArrivalProcess::Vllm, 1.0, 0)).unwrap().is_empty());
    }

    #[test]
    fn old_vllm_first_at_zero_then_gamma_gaps() {
        // np.random.seed(0); t = 0; per request: send at t, then
        // t += np.random.gamma(shape=0.5, scale=1 / (4 * 0.5)).
        let t = send_times(4, 4.0, &opts(ArrivalProcess::Vllm09, 0.5, 0)).unwrap();
        close(&t, &OLD_VLLM);
    }

    const OLD_VLLM: [f64; 4] = [0.0, 0.1520009448803522, 0.34113680491426, 0.43087849941570383];
}
