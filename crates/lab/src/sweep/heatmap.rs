//! The sweep heatmap (`cachesim sweep --heatmap F.svg|png`): one metric over the first two grid
//! knobs (x = the first, y = the second), each cell the best value over the other knobs
//! (best-of, in the ranking's direction), its value written inside; failed cells stay grey.
//! Drawn through [`crate::plot`]'s renderer, so SVG and PNG both work without system fonts.

use super::Row;
use crate::plot::{render, DrawResult, Figure};
use cachesim_core::error::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

struct Heatmap {
    title: String,
    x_knob: String,
    y_knob: String,
    xs: Vec<String>,
    ys: Vec<String>,
    /// Row-major: `cells[y * xs.len() + x]`.
    cells: Vec<Option<f64>>,
    ascending: bool,
}

/// Draws `metric` over the first two knobs of `rows` into `path`.
pub fn heatmap(path: &Path, rows: &[Row], metric: &str, ascending: bool) -> Result<()> {
    let first = rows.first().ok_or_else(|| Error::invalid("--heatmap", "no grid points"))?;
    if first.knobs.is_empty() {
        return Err(Error::invalid("--heatmap", "needs at least one --grid flag"));
    }
    let distinct = |k: usize| {
        let mut v: Vec<String> = Vec::new();
        for r in rows {
            if let Some((_, val)) = r.knobs.get(k) {
                if !v.contains(val) {
                    v.push(val.clone());
                }
            }
        }
        v
    };
    let (xs, ys) = (distinct(0), if first.knobs.len() > 1 { distinct(1) } else { vec![String::new()] });
    let mut cells: Vec<Option<f64>> = vec![None; xs.len() * ys.len()];
    for r in rows {
        let Ok(s) = &r.outcome else { continue };
        let Some(v) = super::output::metric(s, metric) else { continue };
        let x = xs.iter().position(|x| *x == r.knobs[0].1).unwrap_or(0);
        let y = r.knobs.get(1).and_then(|(_, val)| ys.iter().position(|y| y == val)).unwrap_or(0);
        let c = &mut cells[y * xs.len() + x];
        let better = |old: f64| if ascending { v < old } else { v > old };
        if c.is_none_or(better) {
            *c = Some(v);
        }
    }
    let rest = if first.knobs.len() > 2 { ", best over the other knobs" } else { "" };
    let fig = Heatmap {
        title: format!("{metric}{rest}"),
        x_knob: first.knobs[0].0.clone(),
        y_knob: first.knobs.get(1).map(|k| k.0.clone()).unwrap_or_default(),
        xs,
        ys,
        cells,
        ascending,
    };
    render(path, &fig)
}

impl Figure for Heatmap {
    const SIZE: (u32, u32) = (1000, 700);
    fn title(&self) -> &str {
        &self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let (nx, ny) = (self.xs.len(), self.ys.len());
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..nx as f64, 0f64..ny as f64)?;
        let xs = self.xs.clone();
        let ys = self.ys.clone();
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(nx * 2 + 1)
            .y_labels(ny * 2 + 1)
            .x_label_formatter(&move |v| label(&xs, *v))
            .y_label_formatter(&move |v| label(&ys, *v))
            .x_desc(self.x_knob.as_str())
            .y_desc(self.y_knob.as_str())
            .draw()?;
        let known: Vec<f64> = self.cells.iter().flatten().copied().collect();
        let (lo, hi) = known.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
        for (i, c) in self.cells.iter().enumerate() {
            let (x, y) = ((i % nx) as f64, (i / nx) as f64);
            let color = match c {
                // 1 = best: green; 0 = worst: red.
                Some(v) => {
                    let t = if hi > lo { (v - lo) / (hi - lo) } else { 1.0 };
                    let t = if self.ascending { 1.0 - t } else { t };
                    RGBColor((220.0 - 170.0 * t) as u8, (80.0 + 120.0 * t) as u8, 90)
                }
                None => RGBColor(200, 200, 200),
            };
            chart.draw_series([Rectangle::new([(x, y), (x + 1.0, y + 1.0)], color.filled())])?;
            let text = c.map_or("failed".to_string(), |v| format!("{v:.1}"));
            chart.draw_series([Text::new(text, (x + 0.35, y + 0.55), ("sans-serif", 15).into_font().color(&WHITE))])?;
        }
        Ok(())
    }
}

/// The knob value at the middle of a cell, nothing at its edges.
fn label(values: &[String], v: f64) -> String {
    let i = v.floor() as usize;
    if (v - v.floor() - 0.5).abs() < 1e-6 && i < values.len() {
        values[i].clone()
    } else {
        String::new()
    }
}
