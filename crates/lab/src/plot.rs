//! Pictures, as SVG or PNG by the file's extension: the analysis figure (hit-ratio bound
//! against block size, hit ratio against KV capacity, histogram of kept shared-prefix lengths)
//! and the serving figure (TTFT and TPOT CDFs, KV usage and queue lengths over time). Drawn
//! with plotters; text uses a font compiled into the binary (Ubuntu Light), so no system fonts
//! or C libraries are needed, and PNG files are encoded by the `png` crate.

use cachesim_core::analyze::{Bounds, Repetition, Unit};
use cachesim_core::error::{Error, Result};
use cachesim_core::metrics::RequestRecord;
use cachesim_core::sim::StepRecord;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// The series colours of every plot (matplotlib's "tab10" order), cycled by series index.
pub const PALETTE: [plotters::style::RGBColor; 6] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(140, 86, 75),
    plotters::style::RGBColor(23, 190, 207),
];

fn plot_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io { path: path.to_path_buf(), error: std::io::Error::other(e.to_string()) }
}

/// The picture formats `--plot` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

/// The format `path` names by its extension.
fn format_of(path: &Path) -> Result<Format> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(Error::invalid("--plot", format!("{}: name an .svg or .png file", path.display()))),
    }
}

/// Checks, before a long run, that `path` names a format we can draw (SVG or PNG).
pub fn check_plot_path(path: &Path) -> Result<()> {
    format_of(path).map(|_| ())
}

pub(crate) type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Registers the compiled-in font as plotters' sans-serif (once per process).
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font is well-formed (it ships inside a crate), so registration cannot fail.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT);
    });
}

/// A figure that can be drawn on any plotters backend.
pub(crate) trait Figure {
    /// Width and height in pixels.
    const SIZE: (u32, u32);
    /// The line above the panels.
    fn title(&self) -> &str;
    /// Draws the panels into `area` (white, under the title).
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static;
}

/// Fills the canvas white, writes the figure's title and draws its panels under it.
fn draw_titled<DB: DrawingBackend, F: Figure>(root: &DrawingArea<DB, Shift>, fig: &F) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    fig.draw(&root.titled(fig.title(), ("sans-serif", 20))?)
}

/// Draws `fig` into `path`, as SVG or PNG by its extension.
pub(crate) fn render<F: Figure>(path: &Path, fig: &F) -> Result<()> {
    register_font();
    let size = F::SIZE;
    match format_of(path)? {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                draw_titled(&root, fig).map_err(|e| plot_err(path, e))?;
                root.present().map_err(|e| plot_err(path, e))?;
            }
            std::fs::write(path, svg).map_err(|source| Error::Io { path: path.to_path_buf(), error: source })
        }
        Format::Png => {
            let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
            {
                let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
                draw_titled(&root, fig).map_err(|e| plot_err(path, e))?;
                root.present().map_err(|e| plot_err(path, e))?;
            }
            write_png(path, size, &rgb)
        }
    }
}

fn write_png(path: &Path, size: (u32, u32), rgb: &[u8]) -> Result<()> {
    let io = |source| Error::Io { path: path.to_path_buf(), error: source };
    let file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    let mut enc = png::Encoder::new(file, size.0, size.1);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut w = enc.write_header().map_err(|e| plot_err(path, e))?;
    w.write_image_data(rgb).map_err(|e| plot_err(path, e))?;
    w.finish().map_err(|e| plot_err(path, e))
}

struct AnalysisFigure<'a> {
    title: &'a str,
    rep: &'a Repetition,
    bounds: Option<&'a Bounds>,
}

impl Figure for AnalysisFigure<'_> {
    const SIZE: (u32, u32) = (1500, 460);
    fn title(&self) -> &str {
        self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let panels = area.split_evenly((1, 3));
        if let Some(b) = self.bounds {
            bound_panel(&panels[0], b)?;
            capacity_panel(&panels[1], b)?;
        }
        histogram_panel(&panels[2], self.rep)
    }
}

/// Draws the analysis figure (SVG or PNG by the extension of `path`).
pub fn analysis_plot(path: &Path, title: &str, rep: &Repetition, bounds: Option<&Bounds>) -> Result<()> {
    render(path, &AnalysisFigure { title, rep, bounds })
}

fn bound_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, b: &Bounds) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let labels: Vec<String> = b
        .unlimited
        .iter()
        .map(|x| x.block_size.map_or_else(|| "radix = block 1".to_string(), |bs| format!("block {bs}")))
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption("Hit-ratio bound, unlimited KV", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..(labels.len() as f64 - 0.5), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_labels(labels.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("prompt tokens served from cache (%)")
        .x_desc("paged block size (tokens) / radix tree")
        .draw()?;
    chart.draw_series(b.unlimited.iter().enumerate().map(|(i, x)| {
        let color = if x.block_size.is_none() { RED } else { BLUE };
        Rectangle::new([(i as f64 - 0.3, 0.0), (i as f64 + 0.3, x.hit_ratio * 100.0)], color.mix(0.7).filled())
    }))?;
    chart.draw_series(b.unlimited.iter().enumerate().map(|(i, x)| {
        Text::new(
            format!("{:.1}%", x.hit_ratio * 100.0),
            (i as f64 - 0.3, x.hit_ratio * 100.0 + 4.0),
            ("sans-serif", 13),
        )
    }))?;
    Ok(())
}

fn capacity_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, b: &Bounds) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let gb: Vec<f64> = b.capacity.iter().map(|p| p.kv_gb).collect();
    let lo = gb.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9);
    let hi = gb.iter().copied().fold(0.0, f64::max).max(lo * 1.01);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("Hit ratio vs KV capacity ({} B/token)", b.kv_bytes_per_token), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("KV cache capacity (GB, log scale)")
        .y_desc("prompt tokens served from cache (%)")
        .x_label_formatter(&|x| format!("{x:.3}"))
        .draw()?;
    for (policy, color) in [("paged", BLUE), ("radix", RED)] {
        let pts: Vec<(f64, f64)> =
            b.capacity.iter().filter(|p| p.policy == policy).map(|p| (p.kv_gb, p.hit_ratio * 100.0)).collect();
        let label = if policy == "paged" { "paged, block 16" } else { "radix" };
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperLeft).border_style(BLACK).draw()?;
    Ok(())
}

fn histogram_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, rep: &Repetition) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let unit = match rep.unit {
        Unit::Chars => "characters",
        Unit::Tokens => "tokens",
    };
    let lengths = &rep.kept_lengths;
    let max = lengths.iter().copied().max().unwrap_or(1).max(1);
    let bins = 20usize;
    let width = max.div_ceil(bins).max(1);
    let mut counts = vec![0usize; bins + 1];
    for &l in lengths {
        counts[(l / width).min(bins)] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(0).max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Shared prefixes kept (N={}, L>{}): {}", rep.min_count, rep.min_len, rep.leaves),
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0usize..(width * (bins + 1)), 0usize..(top + top / 10 + 1))?;
    chart.configure_mesh().x_desc(format!("shared prefix length ({unit})")).y_desc("pruned leaves").draw()?;
    chart.draw_series(
        counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, &c)| Rectangle::new([(i * width, 0), ((i + 1) * width, c)], GREEN.mix(0.7).filled())),
    )?;
    Ok(())
}

struct RunFigure<'a> {
    title: &'a str,
    records: &'a [RequestRecord],
    steps: &'a [StepRecord],
    kv_capacity: u64,
}

impl Figure for RunFigure<'_> {
    const SIZE: (u32, u32) = (1200, 800);
    fn title(&self) -> &str {
        self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let panels = area.split_evenly((2, 2));
        let ttft: Vec<f64> = self.records.iter().map(|r| r.ttft_s() * 1e3).collect();
        let tpot: Vec<f64> = self.records.iter().filter_map(|r| r.tpot_s()).map(|t| t * 1e3).collect();
        cdf_panel(&panels[0], "TTFT distribution", "time to first token (ms)", ttft)?;
        cdf_panel(&panels[1], "TPOT distribution", "time per output token, excl. the first (ms)", tpot)?;
        let every = self.steps.len().div_ceil(2000).max(1);
        let sampled: Vec<&StepRecord> = self.steps.iter().step_by(every).collect();
        let cap = self.kv_capacity.max(1) as f64;
        let kv: Vec<(f64, f64)> = sampled.iter().map(|s| (s.start_s, s.kv_used_tokens as f64 * 100.0 / cap)).collect();
        series_panel(
            &panels[2],
            "KV cache usage",
            "KV slots held by requests (%)",
            &[("KV used", kv, BLUE)],
            Some(100.0),
        )?;
        let waiting: Vec<(f64, f64)> = sampled.iter().map(|s| (s.start_s, s.waiting as f64)).collect();
        let running: Vec<(f64, f64)> = sampled.iter().map(|s| (s.start_s, s.running as f64)).collect();
        series_panel(&panels[3], "Queues", "requests", &[("waiting", waiting, RED), ("running", running, GREEN)], None)
    }
}

/// Draws the serving figure (SVG or PNG by the extension of `path`): TTFT and TPOT CDFs, KV
/// usage and queues over time.
pub fn run_plot(
    path: &Path,
    title: &str,
    records: &[RequestRecord],
    steps: &[StepRecord],
    kv_capacity: u64,
) -> Result<()> {
    render(path, &RunFigure { title, records, steps, kv_capacity })
}

fn cdf_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    x_desc: &str,
    mut v: Vec<f64>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    v.sort_unstable_by(f64::total_cmp);
    let hi = v.last().copied().unwrap_or(1.0).max(1e-9) * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..hi, 0f64..100f64)?;
    chart.configure_mesh().x_desc(x_desc).y_desc("requests at or below (%)").draw()?;
    let n = v.len().max(1) as f64;
    let every = v.len().div_ceil(2000).max(1);
    let pts: Vec<(f64, f64)> =
        v.iter().enumerate().step_by(every).map(|(i, &x)| (x, (i + 1) as f64 * 100.0 / n)).collect();
    chart.draw_series(LineSeries::new(pts, BLUE.stroke_width(2)))?;
    Ok(())
}

/// A labelled line: (label, points, colour).
type Series<'a> = (&'a str, Vec<(f64, f64)>, RGBColor);

fn series_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    y_desc: &str,
    series: &[Series<'_>],
    y_max: Option<f64>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let x_hi = series.iter().flat_map(|s| s.1.iter().map(|p| p.0)).fold(0.0, f64::max).max(1e-9);
    let y_hi =
        y_max.unwrap_or_else(|| series.iter().flat_map(|s| s.1.iter().map(|p| p.1)).fold(0.0, f64::max).max(1.0) * 1.1);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..x_hi, 0f64..y_hi)?;
    chart.configure_mesh().x_desc("simulated time (s)").y_desc(y_desc).draw()?;
    for (label, pts, color) in series {
        let color = *color;
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(1)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().position(SeriesLabelPosition::UpperRight).border_style(BLACK).draw()?;
    Ok(())
}

struct FleetFigure<'a> {
    title: &'a str,
    /// The middle panel: its title, its unit, and two lines (what was read, what was aimed at).
    load_title: String,
    load_unit: &'a str,
    lines: [(&'a str, Vec<(f64, f64)>); 2],
    report: &'a crate::report::autoscale::AutoscaleReport,
}

impl Figure for FleetFigure<'_> {
    const SIZE: (u32, u32) = (1200, 1000);
    fn title(&self) -> &str {
        self.title
    }
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> DrawResult
    where
        DB::ErrorType: 'static,
    {
        let panels = area.split_evenly((3, 1));
        let syncs = &self.report.syncs;
        let serving = steps(syncs.iter().map(|s| (s.time_s, s.serving as f64)));
        let provisioned = steps(syncs.iter().map(|s| (s.time_s, (s.serving + s.starting + s.draining) as f64)));
        let desired = steps(syncs.iter().map(|s| (s.time_s, s.desired as f64)));
        series_panel(
            &panels[0],
            "Instances",
            "instances",
            &[("provisioned", provisioned, BLUE), ("serving", serving, GREEN), ("desired", desired, RED)],
            None,
        )?;
        let [(a, av), (b, bv)] = &self.lines;
        series_panel(
            &panels[1],
            &self.load_title,
            self.load_unit,
            &[(a, av.clone(), BLUE), (b, bv.clone(), RED)],
            None,
        )?;
        let mid = |w: &crate::report::autoscale::Window| (w.from_s + w.to_s) / 2.0;
        let windows = &self.report.windows;
        let p50: Vec<(f64, f64)> = windows.iter().filter_map(|w| w.ttft_p50_ms.map(|v| (mid(w), v))).collect();
        let p99: Vec<(f64, f64)> = windows.iter().filter_map(|w| w.ttft_p99_ms.map(|v| (mid(w), v))).collect();
        series_panel(
            &panels[2],
            "TTFT of the requests sent in each window",
            "TTFT (ms)",
            &[("P50", p50, GREEN), ("P99", p99, RED)],
            None,
        )
    }
}

/// A count over time as a step line: a corner at each change, the first and last points kept.
fn steps(points: impl Iterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut last = None;
    for (t, v) in points {
        match out.last() {
            Some(&(_, prev)) if prev == v => {}
            Some(&(_, prev)) => out.extend([(t, prev), (t, v)]),
            None => out.push((t, v)),
        }
        last = Some((t, v));
    }
    out.extend(last.filter(|l| out.last() != Some(l)));
    out
}

/// Draws the autoscaled fleet over time (SVG or PNG by the extension of `path`): instances
/// provisioned, serving and wanted at each sync; the HPA's metric against its target, or the
/// SLA planner's observed and predicted request rates; the TTFT percentiles of each window's
/// requests.
pub fn fleet_plot(
    path: &Path,
    title: &str,
    plan: &cachesim_core::cluster::autoscale::AutoscalePlan,
    report: &crate::report::autoscale::AutoscaleReport,
) -> Result<()> {
    use cachesim_core::cluster::autoscale::Rule;
    let syncs = &report.syncs;
    let every = syncs.len().div_ceil(2000).max(1);
    let series = |f: &dyn Fn(&cachesim_core::sim::ScaleSync) -> Option<f64>| -> Vec<(f64, f64)> {
        syncs.iter().step_by(every).filter_map(|s| f(s).filter(|v| v.is_finite()).map(|v| (s.time_s, v))).collect()
    };
    let figure = match &plan.rule {
        Rule::Hpa(h) => FleetFigure {
            title,
            load_title: format!("{} per serving instance at each sync", h.metric.name()),
            load_unit: h.metric.name(),
            lines: [
                ("average", series(&|s| s.average)),
                ("target", syncs.iter().map(|s| (s.time_s, h.target)).collect()),
            ],
            report,
        },
        Rule::Sla(_) => FleetFigure {
            title,
            load_title: "requests per second: the interval just ended, and the next one as predicted".into(),
            load_unit: "req/s",
            lines: [("observed", series(&|s| s.observed_rps)), ("predicted", series(&|s| s.predicted_rps))],
            report,
        },
    };
    render(path, &figure)
}
