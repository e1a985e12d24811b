//! Calibration cases (`calibration/cases/<case>.toml`): one real benchmark run each — the
//! deployment, how to rebuild its workload, its measured metrics (read from the report file by
//! [`super::report`], never retyped; or, for a published point that exists only as a table row,
//! the row's figures with its source), and what is assumed. The table that compares their
//! simulations with their measurements is [`super::validation`].

use super::report::{self, BenchReport};
use cachesim_core::error::{Error, Result};
use cachesim_core::messages::toml_error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The deployment of a case.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// GPU profile name (models/gpus.toml), or the real GPU when not expressible.
    pub gpu: String,
    /// Model profile name (models/models.toml), or the real model when not expressible.
    pub model: String,
    /// Engine family as the run states it.
    pub engine: String,
    /// `--engine-version` bundle the case runs with.
    pub engine_version: Option<String>,
    /// Instances, parallelism, router, PD, in words.
    pub topology: String,
    /// Further `cachesim run` flags (the engine's own flags of the real run).
    #[serde(default)]
    pub flags: Vec<String>,
    /// A step-time profile for this case, relative to the case file's folder, instead of the
    /// built-in one matching its GPU, engine and model (`--calibration FILE`).
    pub profile: Option<PathBuf>,
    /// A deployment file (`--deployment`, relative to the case file's folder) that states the
    /// deployment — GPU, model, engine, parallelism, instances, router, PD — instead of
    /// `gpu`, `model` and `engine_version` (which then only describe it); `flags` still apply.
    pub file: Option<PathBuf>,
}

/// How the case's workload is rebuilt.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `random` (cachesim gen random: fixed or ranged lengths), `sharegpt` (the clients'
    /// ShareGPT sampling over `trace`), or the source's own words when not expressible.
    pub dataset: String,
    pub num_prompts: Option<u32>,
    pub input_len: Option<u32>,
    pub output_len: Option<u32>,
    /// sglang --random-range-ratio semantics (1.0 = fixed lengths).
    #[serde(default = "one")]
    pub range_ratio: f64,
    /// Requests per second, or `inf`.
    pub request_rate: Option<String>,
    /// Client-side limit on requests in flight.
    pub max_concurrency: Option<u32>,
    /// Seed of the generator, the client's sampling and the arrivals.
    #[serde(default)]
    pub seed: u64,
    /// A `sharegpt` sample the case cannot rebuild — the source gives no token totals to choose
    /// a seed by ([`super::totals`]), and its data set or tokenizer differs from the case's — is
    /// simulated under `seeds` seeds from `seed` on, and each metric predicted by its median over
    /// them: one seed's sample stands for nothing the real run drew.
    pub seeds: Option<u32>,
    /// The data set file, relative to the data folder (`--data`, `$CACHESIM_DATA`).
    pub trace: Option<String>,
    /// `--dataset-filter`: whose ShareGPT sampling rules to replay (`vllm`, `sglang`).
    pub filter: Option<String>,
    /// The benchmark client that measured the run (`sglang` bench_serving or `vllm` bench
    /// serve): its arrival process and report keys. Default: the report's layout.
    pub client: Option<String>,
}

/// Where a published point comes from: the row of `serving_benchmarks.csv`, verbatim.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Published {
    pub point_id: String,
    pub engine: String,
    pub engine_version: String,
    pub gpu: String,
    pub num_gpus: String,
    pub model: String,
    pub weight_dtype: String,
    pub measurement_kind: String,
    pub throughput_scope: String,
    pub source_url: String,
    pub source_locator: String,
    #[serde(default)]
    pub notes: String,
}

fn one() -> f64 {
    1.0
}

/// One case file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The `case` column of seed_runs.csv, or the published point's id.
    pub case: String,
    /// The report file, relative to the case file's folder (or `measured` instead).
    pub report: Option<PathBuf>,
    /// Which result of a JSONL report holding several (1-based).
    pub report_record: Option<usize>,
    /// A published point's figures, by sglang key, as its source prints them (no report file).
    #[serde(default)]
    pub measured: BTreeMap<String, f64>,
    /// A published point's source row.
    pub published: Option<Published>,
    /// Whether cachesim can simulate this deployment today.
    pub expressible: bool,
    /// What is missing when not expressible.
    #[serde(default)]
    pub missing: Option<String>,
    /// Metrics the source gives but the simulation cannot reproduce (the reason is among the
    /// assumptions): listed, never compared or fitted.
    #[serde(default)]
    pub skip_metrics: Vec<String>,
    /// A phase point: one steady-state step instead of a workload ([`super::phase`]).
    pub phase: Option<PhaseSpec>,
    pub deployment: Deployment,
    pub workload: WorkloadSpec,
    #[serde(default)]
    pub assumptions: Vec<String>,
}

/// A case with its file and its parsed report.
#[derive(Debug, Clone)]
pub struct LoadedCase {
    pub file: PathBuf,
    pub case: Case,
    pub measured: BenchReport,
}

/// The metrics compared, in table order, by sglang key (those the report prints).
pub const METRICS: &[&str] = &[
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_throughput",
    "peak_output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2e_latency_ms",
    "median_e2e_latency_ms",
];

/// Metrics a published point may give beyond [`METRICS`].
pub const EXTRA: &[&str] = &["input_throughput", "p99_e2e_latency_ms"];

/// The source of a kernel step case's rows (not a published point).
pub const STEP_SOURCE: &str = "kernel profiling";

/// The metrics of kernel rows: milliseconds of one decode step, of one prefill step;
/// microseconds of one GEMM with BF16 weights, with FP8 weights; microseconds of one causal
/// prefill attention kernel, of one decode attention kernel.
pub const STEP_METRICS: &[&str] =
    &["decode_step_ms", "prefill_step_ms", "gemm_bf16_us", "gemm_fp8_us", "attn_prefill_us", "attn_decode_us"];

/// Which phase the nodes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PhaseKind {
    /// Whole prompts (input tokens/s, `input_throughput`).
    Prefill,
    /// One token per sequence per step (output tokens/s, `output_throughput`).
    Decode,
}

/// A case's `[phase]` table: one steady-state step, per device (priced by [`super::phase`]).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PhaseSpec {
    /// `prefill` or `decode`.
    pub phase: PhaseKind,
    /// Sequences on each device in one step (each attention DP group's batch).
    pub seqs_per_device: u32,
    /// New tokens of each sequence in the step: the prompt length for prefill; 1 for decode.
    pub new_tokens: u64,
    /// Tokens already cached per sequence (decode's KV length; 0 for whole prompts).
    #[serde(default)]
    pub context: u64,
}

/// The `kind` of the TOML file at `path` (`steps`, `silicon`), if it states one.
pub fn kind_of(path: &Path) -> Option<String> {
    let t = toml::from_str::<toml::Table>(&std::fs::read_to_string(path).ok()?).ok()?;
    t.get("kind").and_then(|k| k.as_str()).map(String::from)
}

/// Whether the TOML file at `path` is a step case (`kind = "steps"`).
pub fn is_step_case(path: &Path) -> bool {
    kind_of(path).as_deref() == Some("steps")
}

/// Reads every `*.toml` in `dir` but the step cases ([`super::kernels`]), the silicon-sample
/// cases ([`super::silicon`]) and step-time profiles
/// ([`cachesim_core::calibration::profile::is_profile_file`]), sorted by file name, with its report: none for a
/// folder of step cases alone; a folder with no `*.toml` at all is an error.
pub fn load_dir(dir: &Path) -> Result<Vec<LoadedCase>> {
    let io = |error| Error::Io { path: dir.to_path_buf(), error };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    if files.is_empty() {
        return Err(Error::Report { path: dir.to_path_buf(), message: "no case files (*.toml)".into() });
    }
    files.retain(|p| kind_of(p).is_none() && !cachesim_core::calibration::profile::is_profile_file(p));
    files.sort();
    files.iter().map(|f| load(f)).collect()
}

/// Reads one case file and the report it names.
pub fn load(file: &Path) -> Result<LoadedCase> {
    let text = std::fs::read_to_string(file).map_err(|error| Error::Io { path: file.to_path_buf(), error })?;
    let case: Case = toml::from_str(&text)
        .map_err(|e| Error::Report { path: file.to_path_buf(), message: toml_error(&text, &e) })?;
    let fail = |message: &str| Error::Report { path: file.to_path_buf(), message: message.into() };
    if !case.expressible && case.missing.is_none() {
        return Err(fail("expressible = false needs `missing`"));
    }
    let measured = match (&case.report, case.measured.is_empty()) {
        (Some(r), true) => report::read_record(&file.parent().unwrap_or(Path::new(".")).join(r), case.report_record)?,
        (None, false) => {
            if let Some(k) =
                case.measured.keys().find(|k| !METRICS.contains(&k.as_str()) && !EXTRA.contains(&k.as_str()))
            {
                return Err(fail(&format!("measured: unknown metric `{k}`")));
            }
            BenchReport {
                path: file.to_path_buf(),
                layout: report::Layout::SglangJsonl,
                backend: None,
                request_rate: None,
                max_concurrency: None,
                metrics: case.measured.clone(),
                unknown_lines: Vec::new(),
            }
        }
        (Some(_), false) => return Err(fail("give either `report` or `measured`, not both")),
        (None, true) => return Err(fail("no measurements: give `report` (a file) or `measured` (figures)")),
    };
    if case.expressible && case.phase.is_none() {
        let w = &case.workload;
        if w.num_prompts.is_none() || w.request_rate.is_none() {
            return Err(fail("an expressible case needs workload.num_prompts and workload.request_rate"));
        }
    }
    let loaded = LoadedCase { file: file.to_path_buf(), case, measured };
    loaded.seeds()?;
    Ok(loaded)
}

impl LoadedCase {
    /// The client that measured the run (`--report-style`): the case's `client`, else the
    /// report's layout.
    pub fn report_style(&self) -> &str {
        if let Some(c) = &self.case.workload.client {
            return c;
        }
        match self.measured.layout {
            report::Layout::Vllm | report::Layout::VllmJson => "vllm",
            _ => "sglang",
        }
    }

    /// The seeds the case is simulated under (`workload.seeds`); empty for one run at its seed.
    /// Refused: fewer than two, a workload other than a client's ShareGPT sample, and a report
    /// whose token totals already choose the seed.
    pub fn seeds(&self) -> Result<Vec<u64>> {
        let w = &self.case.workload;
        let Some(n) = w.seeds else { return Ok(Vec::new()) };
        let fail =
            |why: &str| Error::Report { path: self.file.clone(), message: format!("workload.seeds = {n}: {why}") };
        if n < 2 {
            return Err(fail("give at least 2 seeds (one run is the case's seed alone: leave seeds out)"));
        }
        if w.dataset != "sharegpt" {
            return Err(fail("only a client's ShareGPT sample is drawn by the seed (dataset = \"sharegpt\")"));
        }
        if self.measured.metrics.contains_key("total_input_tokens") {
            return Err(fail("the report's token totals choose the case's seed (a rebuilt sample): leave seeds out"));
        }
        crate::seeds::list(w.seed, n).map_err(|e| fail(&e.to_string()))
    }

    /// The case's own profile file (`deployment.profile`), resolved against its folder.
    pub fn profile_path(&self) -> Option<PathBuf> {
        let p = self.case.deployment.profile.as_ref()?;
        Some(self.file.parent().unwrap_or(Path::new(".")).join(p))
    }

    /// The case's deployment file (`deployment.file`), resolved against its folder.
    pub fn deployment_path(&self) -> Option<PathBuf> {
        let p = self.case.deployment.file.as_ref()?;
        Some(self.file.parent().unwrap_or(Path::new(".")).join(p))
    }

    /// Where the real run comes from: a published point's source URL's host (on GitHub with
    /// the owner: `github.com/sgl-project`), else `seed runs`.
    pub fn source(&self) -> String {
        let Some(p) = &self.case.published else { return "seed runs".into() };
        let rest = p.source_url.split("://").nth(1).unwrap_or(&p.source_url);
        let mut parts = rest.split('/');
        let host = parts.next().unwrap_or_default().trim_start_matches("www.");
        match (host, parts.next()) {
            ("github.com", Some(owner)) => format!("{host}/{owner}"),
            _ => host.to_string(),
        }
    }

    /// The data set file of a `sharegpt` case under the data folder `data`.
    pub fn trace_path(&self, data: Option<&Path>) -> Result<Option<PathBuf>> {
        let w = &self.case.workload;
        if w.dataset != "sharegpt" {
            return Ok(None);
        }
        let fail = |message: String| Error::Report { path: self.file.clone(), message };
        let rel = w.trace.as_deref().ok_or_else(|| fail("dataset sharegpt needs workload.trace".into()))?;
        let data = data.ok_or_else(|| {
            fail(format!("needs the data folder (--data or CACHESIM_DATA) for {rel}, which is not given"))
        })?;
        let p = data.join(rel);
        if !p.is_file() {
            return Err(fail(format!("needs {}, which is absent", p.display())));
        }
        Ok(Some(p))
    }

    /// The `cachesim run` arguments of this case; a `sharegpt` case's trace flags included
    /// (`data` = the data folder), a `random` case's workload comes from [`LoadedCase::workload`].
    pub fn run_args(&self, data: Option<&Path>) -> Result<Vec<String>> {
        let d = &self.case.deployment;
        let w = &self.case.workload;
        let mut a: Vec<String> = Vec::new();
        if let Some(t) = self.trace_path(data)? {
            a.extend(["--trace".into(), t.display().to_string(), "--turns".into(), "first".into()]);
            if let Some(f) = &w.filter {
                a.extend(["--dataset-filter".into(), f.clone()]);
            }
            if let Some(n) = w.num_prompts {
                a.extend(["--num-prompts".into(), n.to_string()]);
            }
        }
        match self.deployment_path() {
            Some(f) => a.extend(["--deployment".into(), f.display().to_string()]),
            None => {
                a.extend(["--gpu".into(), d.gpu.clone(), "--model".into(), d.model.clone()]);
                if let Some(v) = &d.engine_version {
                    a.extend(["--engine-version".into(), v.clone()]);
                }
            }
        }
        a.extend(d.flags.iter().cloned());
        if let Some(p) = self.profile_path() {
            a.extend(["--calibration".into(), p.display().to_string()]);
        }
        if let Some(r) = &w.request_rate {
            a.extend(["--request-rate".into(), r.clone()]);
        }
        if let Some(c) = w.max_concurrency {
            a.extend(["--max-concurrency".into(), c.to_string()]);
        }
        a.extend(["--seed".into(), w.seed.to_string(), "--report-style".into(), self.report_style().to_string()]);
        if self.chunk_itl() {
            a.extend(["--client-itl".into(), "chunk".into()]);
        }
        Ok(a)
    }

    /// Whether the report's client counted one inter-token latency per streamed chunk where
    /// `--report-style sglang` would divide a chunk's gap over its tokens: sglang bench_serving
    /// began dividing at 0.4.3.post3 (PR #3988), the release that added the "P95 ITL" row, so a
    /// printed sglang report without that row comes from an older client (docs/engines/clients.md §5).
    pub fn chunk_itl(&self) -> bool {
        self.report_style() == "sglang"
            && matches!(self.measured.layout, report::Layout::Sglang | report::Layout::SglangOld)
            && self.measured.get("p95_itl_ms").is_none()
    }

    /// The case's workload when it is generated (`random`); `None` for a data set file, which
    /// the run arguments name.
    pub fn workload(&self) -> Result<Option<cachesim_core::workload::Workload>> {
        let w = &self.case.workload;
        let need = |x: Option<u32>, f: &str| {
            x.ok_or_else(|| Error::Report { path: self.file.clone(), message: format!("dataset random needs {f}") })
        };
        match w.dataset.as_str() {
            "random" => {}
            "sharegpt" => return Ok(None),
            other => {
                return Err(Error::Report {
                    path: self.file.clone(),
                    message: format!("dataset `{other}` cannot be rebuilt yet (only `random` and `sharegpt`)"),
                })
            }
        }
        let spec = cachesim_core::workload::gen::RandomSpec {
            num_prompts: need(w.num_prompts, "num_prompts")?,
            input_len: need(w.input_len, "input_len")?,
            output_len: need(w.output_len, "output_len")?,
            range_ratio: w.range_ratio,
            vocab: cachesim_core::workload::gen::DEFAULT_VOCAB,
            seed: w.seed,
        };
        cachesim_core::workload::gen::workload(
            &format!("{} (gen random)", self.case.case),
            &cachesim_core::workload::gen::random(&spec)?,
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x.toml");
        let body = "case = \"x\"\nreport = \"r.txt\"\nexpressible = false\n\n[deployment]\ngpu = \"a\"\nmodel = \"b\"\n\
                    engine = \"vllm\"\ntopology = \"1\"\n\n[workload]\ndataset = \"random\"\nnum_prompts = 1\nrequest_rate = \"inf\"\n";
        std::fs::write(&f, body).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.ends_with("x.toml: expressible = false needs `missing`"), "{e}");
        std::fs::write(&f, body.replace("expressible = false", "expressible = true")).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("r.txt"), "{e}");
        std::fs::write(&f, body.replace("num_prompts", "prompts")).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("x.toml") && e.contains("unknown field `prompts`"), "{e}");
        // A value of the wrong kind: its line and column from 1, in the file's words.
        std::fs::write(&f, body.replace("num_prompts = 1", "num_prompts = \"one\"")).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("x.toml: line 13, column 15: invalid type: string \"one\", expected a whole number"), "{e}");
        std::fs::write(&f, body.replace("[deployment]", "deployment = 5\n[x]")).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("expected a table") && !e.contains("struct"), "{e}");
    }

    #[test]
    fn seeds_are_refused_where_the_seed_draws_no_sample() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        let body =
            "case = \"s\"\nexpressible = true\n\n[measured]\nmedian_ttft_ms = 1.0\n\n[deployment]\ngpu = \"a\"\n\
                    model = \"b\"\nengine = \"vllm\"\ntopology = \"1\"\n\n[workload]\ndataset = \"sharegpt\"\n\
                    num_prompts = 10\nrequest_rate = \"4\"\nseed = 3\nseeds = 4\n";
        std::fs::write(&f, body).unwrap();
        assert_eq!(load(&f).unwrap().seeds().unwrap(), vec![3, 4, 5, 6]);
        let refused = |text: String, why: &str| {
            std::fs::write(&f, text).unwrap();
            let e = load(&f).unwrap_err().to_string();
            assert!(e.contains("s.toml") && e.contains(why), "{e}");
        };
        refused(body.replace("seeds = 4", "seeds = 1"), "workload.seeds = 1: give at least 2 seeds");
        refused(body.replace("\"sharegpt\"", "\"random\""), "only a client's ShareGPT sample");
        refused(body.replace("median_ttft_ms", "total_input_tokens"), "the report's token totals choose");
        std::fs::write(&f, body.replace("seeds = 4\n", "")).unwrap();
        assert!(load(&f).unwrap().seeds().unwrap().is_empty());
    }
}
