//! The validation scatter (`cachesim validate --plot F.svg`): every compared figure as a point,
//! measured on x and predicted on y, both on log scales so that throughputs, latencies and
//! counts share one picture; the diagonal is a perfect prediction and the dashed lines ±25 %.
//! One colour per source of the real runs (published source, or the seed runs); filled points
//! were priced by a fitted profile, hollow ones by the raw roofline.

use super::case::Validation;
use crate::error::Result;
use crate::plot::PALETTE as COLORS;
use crate::plot::{render, DrawResult, Figure};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One point: (source, priced by the raw roofline, measured, predicted).
type Point = (String, bool, f64, f64);

/// The points of `v`: its rows whose measured and predicted figures are both positive (a log
/// scale has no zero), each with its case's source and role.
pub fn points(v: &Validation) -> Vec<Point> {
    v.rows
        .iter()
        .filter(|r| r.measured > 0.0 && r.predicted > 0.0 && r.predicted.is_finite())
        .filter_map(|r| {
            let c = v.cases.iter().find(|c| c.case == r.case)?;
            Some((c.source.clone(), c.no_profile || c.calibration.starts_with("none"), r.measured, r.predicted))
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
                .draw_series(mine.map(|p| {
                    let style = if p.1 { color.stroke_width(2) } else { color.filled() };
                    Circle::new((p.2, p.3), 4, style)
                }))?
                .label(*src)
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
        }
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
    use crate::calibrate::case::{CaseInfo, Row};

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
            cases: vec![info("a", "src one", false), info("b", "seed runs", true), info("c", "src one", false)],
            ..Validation::default()
        };
        let p = points(&v);
        assert_eq!(
            p,
            vec![
                ("src one".to_string(), false, 10.0, 12.0),
                ("seed runs".to_string(), true, 100.0, 50.0),
                ("src one".to_string(), false, 5.0, 5.0)
            ]
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("v.svg");
        validation_plot(&f, "validation", &v).unwrap();
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(
            svg.contains("\nsrc one\n") && svg.contains("\nseed runs\n") && svg.contains("\nvalidation\n"),
            "{svg}"
        );
        let e = validation_plot(&dir.path().join("v.txt"), "x", &v).unwrap_err().to_string();
        let ticks: Vec<String> = [0.5, 1.0, 10.0, 1000.0, 25_000.0, 1e6].iter().map(|v| super::tick(*v)).collect();
        assert_eq!(ticks, ["0.5", "1", "10", "1k", "25k", "1M"]);
        assert!(e.contains("name an .svg or .png file"), "{e}");
    }
}
