//! Progress of many points (sweep, plan, deploy) on stderr: first how many points and requests,
//! then an indicatif bar on a terminal, or else one line per tenth of the points done, with the
//! time so far and an estimate of the rest once the points have taken long enough for a pace to
//! mean something. stdout never sees it.

use crate::commands::plural;
use cachesim::text::thousands;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Off a terminal, a progress line says how long the rest should take only after this long:
/// before it, the pace of the first points says little (and short sweeps print the same lines
/// on every run).
const ESTIMATE_AFTER: Duration = Duration::from_secs(10);

/// Progress of `n` points; `inc` may be called from any thread.
pub(crate) struct Progress {
    bar: ProgressBar,
    lines: Option<Lines>,
}

/// The lines printed off a terminal.
struct Lines {
    what: String,
    total: u64,
    done: AtomicU64,
    /// The last tenth printed (under the lock, so lines come in order).
    printed: Mutex<u64>,
    start: Instant,
}

/// The requests one point sends: the trace's, or its `--num-prompts` of them (the most over the
/// points).
pub(crate) fn requests_per_point<'a>(
    w: &cachesim::workload::Workload,
    cfgs: impl Iterator<Item = &'a cachesim::config::RunConfig>,
) -> usize {
    let all = w.requests.len();
    cfgs.map(|c| c.arrivals.num_prompts.map_or(all, |n| n.min(all))).max().unwrap_or(all)
}

impl Progress {
    /// Prints "`what`: N points × R requests" on stderr and starts the progress display.
    pub(crate) fn start(n: usize, what: &str, requests: usize) -> Progress {
        use std::io::IsTerminal;
        eprintln!("{what}: {} × {}", plural(n as u64, "point"), plural(requests as u64, "request"));
        if !std::io::stderr().is_terminal() {
            let lines = Lines {
                what: what.to_string(),
                total: n as u64,
                done: AtomicU64::new(0),
                printed: Mutex::new(0),
                start: Instant::now(),
            };
            return Progress { bar: ProgressBar::hidden(), lines: Some(lines) };
        }
        let bar = ProgressBar::new(n as u64);
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{what} {{bar:40}} {{pos}}/{{len}} points ({{per_sec}}, eta {{eta}})"
            ))
            .expect("static template"),
        );
        Progress { bar, lines: None }
    }

    /// One more point done.
    pub(crate) fn inc(&self) {
        self.bar.inc(1);
        if let Some(l) = &self.lines {
            l.step();
        }
    }

    /// Clears the bar (the lines stay).
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl Lines {
    fn step(&self) {
        // Counted under the lock: every count is seen in order, so the lines are the same
        // whatever the threads.
        let mut printed = self.printed.lock().unwrap_or_else(|e| e.into_inner());
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let tenth = done * 10 / self.total.max(1);
        if tenth <= *printed {
            return;
        }
        *printed = tenth;
        let elapsed = self.start.elapsed();
        let pct = done * 100 / self.total.max(1);
        let mut line = format!("{}: {pct}% ({} of {} points)", self.what, thousands(done), thousands(self.total));
        if elapsed >= ESTIMATE_AFTER && done < self.total {
            let left = elapsed.as_secs_f64() * (self.total - done) as f64 / done as f64;
            line += &format!(", {:.0} s so far, about {:.0} s left", elapsed.as_secs_f64(), left);
        }
        eprintln!("{line}");
    }
}
