//! The plan figure (`cachesim plan --plot F.svg|png`): each SLO metric against the request rate
//! for the top candidates, one panel per SLO limit, from the rates the search simulated (filled
//! markers met the whole SLO, hollow ones did not), with the limit as a dashed red line and, for
//! `--target-rate`, the target as a dashed grey vertical line. The y axis is logarithmic, since
//! latencies grow by orders of magnitude past saturation, and so is the x axis, since the
//! search doubles the rate to bracket the boundary.

use super::{Slo, Trial};
use crate::plot::PALETTE as COLORS;
use crate::plot::{render, DrawResult, Figure};
use cachesim_core::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One candidate's curve: its label and the trials simulated for it (any order).
#[derive(Debug, Clone)]
pub struct Curve {
    pub label: String,
    pub trials: Vec<Trial>,
}

struct RateFigure<'a> {
    title: String,
    slo: &'a Slo,
    curves: Vec<Curve>,
    target_rate: Option<f64>,
}

/// Draws every SLO metric against rate for `curves` into `path` (SVG or PNG by extension).
pub fn rate_plot(path: &Path, slo: &Slo, curves: &[Curve], target_rate: Option<f64>) -> Result<()> {
    let mut curves: Vec<Curve> = curves.iter().filter(|c| !c.trials.is_empty()).cloned().collect();
    if curves.is_empty() {
        return Err(Error::invalid("--plot", "no simulated rates to draw"));
    }
    for c in &mut curves {
        c.trials.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    }
    let title = format!("SLO metrics against request rate (top {} candidates)", curves.len());
    render(path, &RateFigure { title, slo, curves, target_rate })
}

impl Figure for RateFigure<'_> {
    const SIZE: (u32, u32) = (1100, 800);
    fn title(&self) -> &str {
        &self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let panels = area.split_evenly((self.slo.0.len(), 1));
        for (t, panel) in self.slo.0.iter().zip(&panels) {
            let key = t.key();
            let pts = |c: &Curve| -> Vec<(f64, f64, bool)> {
                c.trials
                    .iter()
                    .filter_map(|tr| tr.slo_values.get(&key).map(|v| (tr.rate, v.max(1e-3), tr.meets)))
                    .collect()
            };
            let all: Vec<(f64, f64, bool)> = self.curves.iter().flat_map(pts).collect();
            let (mut x0, mut x1) = all.iter().fold((f64::INFINITY, 0f64), |(a, b), p| (a.min(p.0), b.max(p.0)));
            if let Some(r) = self.target_rate {
                (x0, x1) = (x0.min(r), x1.max(r));
            }
            // A limit of 0 (failed_pct=0) on the log axis sits at its floor, as the values do.
            let limit = t.limit_ms.max(1e-3);
            let (y0, y1) = all.iter().fold((limit, limit), |(a, b), p| (a.min(p.1), b.max(p.1)));
            let x0 = if x0.is_finite() && x0 > 0.0 { x0 * 0.8 } else { 1e-3 };
            let x1 = x1.max(x0 * 2.0);
            let mut chart = ChartBuilder::on(panel)
                .caption(format!("{key} (limit {} {})", t.limit_ms, t.unit()), ("sans-serif", 16))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(65)
                .build_cartesian_2d((x0..x1 * 1.25).log_scale(), (y0 * 0.7..y1 * 1.4).log_scale())?;
            chart
                .configure_mesh()
                .light_line_style(WHITE.mix(0.0))
                .y_labels(8)
                .x_desc("request rate (req/s, log)")
                .y_desc(format!("{key} ({}, log)", t.unit()))
                .draw()?;
            chart
                .draw_series(DashedLineSeries::new([(x0, limit), (x1 * 1.25, limit)], 8, 5, RED.stroke_width(2)))?
                .label("SLO limit")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED.stroke_width(2)));
            if let Some(r) = self.target_rate {
                let grey = RGBColor(120, 120, 120);
                chart
                    .draw_series(DashedLineSeries::new([(r, y0 * 0.7), (r, y1 * 1.4)], 6, 4, grey.stroke_width(1)))?
                    .label("target rate")
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(1)));
            }
            for (i, c) in self.curves.iter().enumerate() {
                let color = COLORS[i % COLORS.len()];
                let p = pts(c);
                chart
                    .draw_series(LineSeries::new(p.iter().map(|q| (q.0, q.1)), color.stroke_width(2)))?
                    .label(c.label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
                chart.draw_series(p.iter().map(|q| {
                    let style = if q.2 { color.filled() } else { color.stroke_width(2) };
                    Circle::new((q.0, q.1), 4, style)
                }))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    }
}
