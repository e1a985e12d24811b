//! The validation scatter (`cachesim validate --plot F.svg`): every compared figure but single
//! GEMMs as a point, measured on x and predicted on y, both on log scales so that throughputs,
//! latencies and counts share one picture; the diagonal is a perfect prediction and the dashed
//! lines ±25 %. One colour per source of the real runs (published source, or the seed runs); the
//! mark says what priced the figure ([`Mark`]): a filled dot a profile that never saw the case
//! (held out, or refitted without it), a cross a profile fitted on the case, a ring the raw
//! roofline.

use super::validation::{role, Validation};
use crate::plot::PALETTE as COLORS;
use crate::plot::{render, DrawResult, Figure};
use cachesim_core::error::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// What priced a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A fitted profile that never saw the case: held out, or refitted without it.
    Unseen,
    /// A profile fitted on the case (its residual, not a prediction).
    Fitted,
    /// The raw roofline: no fitted profile (the case names none, `--uncalibrated`, or the
    /// leave-group-out prior).
    Raw,
}

/// One point: (source, what priced it, measured, predicted).
type Point = (String, Mark, f64, f64);

/// The points of `v`: its rows whose measured and predicted figures are both positive (a log
/// scale has no zero), each with its case's source and role. Single-GEMM rows are left out:
/// hundreds of one-kernel timings would hide the serving figures (the table lists them).
pub fn points(v: &Validation) -> Vec<Point> {
    v.rows
        .iter()
        .filter(|r| r.measured > 0.0 && r.predicted > 0.0 && r.predicted.is_finite())
        .filter(|r| !r.metric.starts_with("gemm_"))
        .filter_map(|r| {
            let c = v.cases.iter().find(|c| c.case == r.case)?;
            let mark = if c.no_profile || c.calibration.starts_with("none") || c.rung.as_deref() == Some("prior") {
                Mark::Raw
            } else if role(v, &c.case) == "fitted" {
                Mark::Fitted
            } else {
                Mark::Unseen
            };
            Some((c.source.clone(), mark, r.measured, r.predicted))
        })
        .collect()
}

struct Scatter {
    title: String,
    points: Vec<Point>,
}

impl Figure for Scatter {
    const SIZE: (u32, u32) = (900, 820);
    fn title(&self) -> &str {
        &self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let (lo, hi) =
            self.points.iter().fold((f64::INFINITY, 0f64), |(a, b), p| (a.min(p.2).min(p.3), b.max(p.2).max(p.3)));
        let (lo, hi) = if lo.is_finite() && hi > 0.0 { (lo / 1.6, hi * 1.6) } else { (0.1, 10.0) };
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .x_desc("measured (log; ms, tok/s, req/s, s or count by metric)")
            .y_desc("predicted (log)")
            .draw()?;
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.stroke_width(1)))?
            .label("predicted = measured")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK.stroke_width(1)));
        for f in [1.25, 1.0 / 1.25] {
            let series = DashedLineSeries::new([(lo, lo * f), (hi, hi * f)], 6, 4, grey.stroke_width(1));
            let s = chart.draw_series(series)?;
            if f > 1.0 {
                s.label("±25 %")
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(1)));
            }
        }
        let mut sources: Vec<&str> = self.points.iter().map(|p| p.0.as_str()).collect();
        sources.sort();
        sources.dedup();
        for (i, src) in sources.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let mine = self.points.iter().filter(|p| p.0 == *src);
            chart
                .draw_series(mine.map(|p| -> DynElement<'static, DB, (f64, f64)> {
                    match p.1 {
                        Mark::Unseen => Circle::new((p.2, p.3), 4, color.filled()).into_dyn(),
                        Mark::Raw => Circle::new((p.2, p.3), 4, color.stroke_width(2)).into_dyn(),
                        Mark::Fitted => Cross::new((p.2, p.3), 3, color.stroke_width(1)).into_dyn(),
                    }
                }))?
                .label(*src)
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
        }
        // The marks, in black, with no points of their own.
        let none = std::iter::empty::<Circle<(f64, f64), i32>>;
        chart
            .draw_series(none())?
            .label("dot: priced without the case (held out, refitted)")
            .legend(|(x, y)| Circle::new((x + 9, y), 4, BLACK.filled()));
        chart
            .draw_series(none())?
            .label("cross: by a profile fitted on it")
            .legend(|(x, y)| Cross::new((x + 9, y), 3, BLACK.stroke_width(1)));
        chart
            .draw_series(none())?
            .label("ring: by the raw roofline")
            .legend(|(x, y)| Circle::new((x + 9, y), 4, BLACK.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    }
}

/// Draws the validation scatter of `v` into `path` (SVG or PNG by its extension).
pub fn validation_plot(path: &Path, title: &str, v: &Validation) -> Result<()> {
    render(path, &Scatter { title: title.to_string(), points: points(v) })
}

/// A log axis tick: 0.5, 1, 10, 1k, 10k, 1M (the decades without trailing zeros).
fn tick(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let text = format!("{scaled:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::validation::{CaseInfo, Row};

    fn info(case: &str, source: &str, no_profile: bool) -> CaseInfo {
        CaseInfo {
            case: case.into(),
            calibration: String::new(),
            fitted: false,
            no_profile,
            gpu: "h20".into(),
            engine: "vllm".into(),
            source: source.into(),
            refit: None,
            refit_on: None,
            rung: None,
        }
    }

    fn row(case: &str, measured: f64, predicted: f64) -> Row {
        Row { case: case.into(), shape: None, metric: "median_ttft_ms".into(), measured, predicted, error_pct: 0.0 }
    }

    /// Points carry their case's source and role; a zero figure (no log position) is left out;
    /// the SVG has one legend entry per source.
    #[test]
    fn scatter_points_and_svg() {
        let v = Validation {
            rows: vec![row("a", 10.0, 12.0), row("b", 100.0, 50.0), row("b", 0.0, 3.0), row("c", 5.0, 5.0)],
            cases: vec![
                CaseInfo { fitted: true, ..info("a", "src one", false) },
                info("b", "seed runs", true),
                info("c", "src one", false),
            ],
            ..Validation::default()
        };
        let p = points(&v);
        assert_eq!(
            p,
            vec![
                ("src one".to_string(), Mark::Fitted, 10.0, 12.0),
                ("seed runs".to_string(), Mark::Raw, 100.0, 50.0),
                ("src one".to_string(), Mark::Unseen, 5.0, 5.0)
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("v.svg");
        validation_plot(&f, "validation", &v).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(
            svg.contains("\nsrc one\n")
                && svg.contains("\nseed runs\n")
                && svg.contains("\nvalidation\n")
                && svg.contains("\ncross: by a profile fitted on it\n"),
            "{svg}"
        );
        let e = validation_plot(&dir.path().join("v.txt"), "x", &v).unwrap_err().to_string();
        let ticks: Vec<String> = [0.5, 1.0, 10.0, 1000.0, 25_000.0, 1e6].iter().map(|v| super::tick(*v)).collect();
        assert_eq!(ticks, ["0.5", "1", "10", "1k", "25k", "1M"]);
        assert!(e.contains("name an .svg or .png file"), "{e}");
    }
}
