//! What the two calibration commands share (`calibrate --fit` and `calibrate --report`):
//! `--weights` parsing, a fitted profile's factors as console text, and the notes a refitted
//! profile keeps from the file it replaces.

use anyhow::Context;
use cachesim::calibrate::case;
use cachesim::calibration::profile;
use std::collections::BTreeMap;
use std::path::Path;

/// `metric=weight,…`: each weight finite and 0 or more, one at least above 0 (an objective
/// of zeros fits nothing).
pub fn parse_weights(s: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let weights: BTreeMap<String, f64> = s
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').with_context(|| format!("--weights: `{kv}` is not metric=weight"))?;
            let w: f64 = v.trim().parse().with_context(|| format!("--weights: `{v}` is not a number"))?;
            let k = k.trim();
            if !case::METRICS.contains(&k) && !case::STEP_METRICS.contains(&k) {
                let all = [case::METRICS, case::STEP_METRICS].concat().join(", ");
                anyhow::bail!("--weights: unknown metric `{k}` (one of {all})");
            }
            if !(w.is_finite() && w >= 0.0) {
                anyhow::bail!("--weights: `{kv}`: a weight must be a finite number, 0 or more");
            }
            Ok((k.to_string(), w))
        })
        .collect::<anyhow::Result<_>>()?;
    if weights.values().all(|&w| w == 0.0) {
        anyhow::bail!(
            "--weights: every weight is 0, so the fit would have no objective: give one metric a weight above 0"
        );
    }
    Ok(weights)
}

/// A factor whose cases leave it uncertain by more than this factor at one standard error is
/// said to be poorly determined.
const POORLY_DETERMINED: f64 = 2.0;

/// The `[fit] spread` record of a fit's spreads: ln standard error by factor (`inf`: not
/// determined), the ones at a bound left out.
pub fn spread_record(spread: &[cachesim::calibrate::spread::Spread]) -> std::collections::BTreeMap<String, f64> {
    spread.iter().filter_map(|s| s.ln_se.map(|v| (s.name.to_string(), v))).collect()
}

/// A fitted profile's factors, one a line with how well the cases determine it, then the held
/// ones with why, what the fit assumed (its prior, a totals mismatch accepted), and a warning
/// when fewer figures were fitted than factors.
pub fn write_factors(o: &mut impl std::fmt::Write, p: &profile::Profile) -> std::fmt::Result {
    for name in &p.fit.fitted {
        let value = cachesim::calibration::factors::factor_text(&p.efficiency, name);
        let spread = match p.fit.spread.get(name).map(|s| s.exp()) {
            Some(x) if x.is_infinite() => {
                "  not determined: no row moves with it alone (host time hidden behind the device, or a \
                 combination of factors only)"
                    .to_string()
            }
            Some(x) if x > POORLY_DETERMINED => format!("  ×/÷ {x:.2} at one standard error: poorly determined"),
            Some(x) => format!("  ×/÷ {x:.2} at one standard error"),
            // A profile with spreads leaves out a factor within a step (5 %) of a bound.
            None if !p.fit.spread.is_empty() => "  no spread: within 5 % of a bound".to_string(),
            None => String::new(),
        };
        writeln!(o, "  {name:<20} {value}{spread}")?;
    }
    for h in &p.fit.held {
        writeln!(o, "  held: {h}")?;
    }
    for a in &p.fit.assumptions {
        writeln!(o, "  assumed: {a}")?;
    }
    for b in cachesim::calibration::factors::at_bounds(&p.efficiency, &p.fit.fitted, &p.fit.options()) {
        writeln!(
            o,
            "  at a bound: {b}: the figures would push it further, so the factor is standing in for \
             something the model leaves out (check the GPU's datasheet figures and the run's flags)"
        )?;
    }
    let (factors, figures) = (p.fit.fitted.len(), p.fit.residuals.len());
    if figures < factors {
        writeln!(
            o,
            "  under-determined: {factors} factors fitted on {figures} measured figures, so the factors the \
             figures do not separate keep where the search stopped (more runs, or more of each report's \
             figures through --weights, e.g. mean_ttft_ms, p99_ttft_ms, median_itl_ms, p99_itl_ms, pin them)"
        )?;
    }
    Ok(())
}

/// The notes of a profile refitted to `out`: those of the profile already there (what was learnt
/// about a fit survives its regeneration), then the new `--note`s not among them. A file at
/// `out` that is not a profile is an error rather than overwritten unread.
pub fn kept_notes(out: &Path, new: &[String]) -> anyhow::Result<Vec<String>> {
    let mut notes = match out.exists() {
        true => {
            profile::read(out)
                .with_context(|| format!("--out {} exists and is not a profile", out.display()))?
                .fit
                .notes
        }
        false => Vec::new(),
    };
    for n in new {
        if !notes.contains(n) {
            notes.push(n.clone());
        }
    }
    Ok(notes)
}
