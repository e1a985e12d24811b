//! Kernel-level step cases (`kind = "steps"` files among `calibration/cases/`): whole forward
//! passes of one model timed alone on a real GPU — decode steps captured in a CUDA graph over
//! B sequences at context L, eager prefill steps over one sequence of T new tokens — read from
//! the data folder's CSVs (`published/profiling/h200/decode_step.csv` …, never copied into the
//! repository) and compared with the step-time model's *device* time for the same batch
//! shape. The engines' host work (scheduling, input preparation, sampling) is excluded, since
//! these kernels ran with no engine around them; a case timing one tensor-parallel rank's
//! share (`rank = true`) is compared with the rank's compute alone, without the all-reduces.
//! An eager row takes the larger of the device time and plain PyTorch's launch time
//! ([`Roofline::eager_launch_s`]). A case may also list GEMM CSVs (`gemm = [...]`): single
//! `[M, K] × [K, N]` GEMMs of BF16 or FP8 weights, each compared with [`cost::gemm_s`], the
//! roofline's rule for one linear layer (its per-kernel floor included), and attention CSVs
//! (`attention = [...]`): single SDPA calls, causal prefill or one query per sequence, each
//! compared with [`cost::attention_kernel_s`] plus SDPA's host dispatch
//! ([`Efficiency::sdpa_dispatch_s`]). The rows enter `cachesim
//! validate` and `calibrate --fit` like a serving case's metrics, one row per shape.

use super::case::{STEP_METRICS, STEP_SOURCE};
use super::validation::{CaseInfo, Row};
use cachesim_core::calibration::profile::Residual;
use cachesim_core::catalog::Dtype;
use cachesim_core::cost::{self, BatchShape, CostModel, Deployment, Efficiency, Roofline};
use cachesim_core::error::{Error, Result};
use cachesim_core::messages::{csv_error, toml_error};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The objective of a fit on kernel rows: every metric, weight 1 each.
pub fn default_weights() -> BTreeMap<String, f64> {
    STEP_METRICS.iter().map(|m| (m.to_string(), 1.0)).collect()
}

/// One step-case file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCase {
    /// Always `steps` (what tells these files from serving cases).
    pub kind: String,
    pub case: String,
    /// GPU profile name (models/gpus.toml).
    pub gpu: String,
    /// Model profile name (models/models.toml).
    pub model: String,
    /// Tensor-parallel degree the model is sharded over.
    #[serde(default = "one")]
    pub tp: u64,
    /// The CSVs time one TP rank's compute (no all-reduce): compare with the rank's compute.
    #[serde(default)]
    pub rank: bool,
    /// Decode-step CSV (`batch,context,time_us`), relative to the data folder.
    pub decode: Option<String>,
    /// Prefill-step CSV (`tokens,time_us`), relative to the data folder.
    pub prefill: Option<String>,
    /// Whether the prefill steps ran eagerly (plain PyTorch launches, no CUDA graph).
    #[serde(default)]
    pub prefill_eager: bool,
    /// GEMM CSVs (`M,K,N,time_us`, an optional `dtype` of bf16 or fp8, the shape named by a
    /// `shape` column or `model` and `layer`), relative to the data folder.
    #[serde(default)]
    pub gemm: Vec<String>,
    /// GEMM rows whose name contains one of these are left out (each reason among the
    /// assumptions).
    #[serde(default)]
    pub skip_shapes: Vec<String>,
    /// Attention-kernel CSVs, relative to the data folder: causal prefill over one sequence
    /// (`heads,kv_heads,head_dim,seq_len,time_us`) or one query per sequence
    /// (`batch,kv_len,heads,kv_heads,head_dim,time_us`), told apart by their columns.
    #[serde(default)]
    pub attention: Vec<String>,
    /// The step-time profile that prices the case, relative to the case file's folder; the
    /// raw roofline without one.
    pub profile: Option<PathBuf>,
    #[serde(default)]
    pub assumptions: Vec<String>,
}

fn one() -> u64 {
    1
}

/// A step case with its file.
#[derive(Debug, Clone)]
pub struct LoadedSteps {
    pub file: PathBuf,
    pub case: StepCase,
}

/// One measured step, GEMM or attention kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRow {
    /// One of [`STEP_METRICS`].
    pub metric: &'static str,
    /// The shape in words: `B=8 L=512` (sequences, context), `T=2048` (new tokens),
    /// `llama8b.qkv fp8 M=64` (a GEMM) or `attn 32/8 decode B=64 L=1024` (an attention kernel).
    pub shape: String,
    /// What ran.
    pub work: Work,
    /// In the metric's unit (ms for steps, µs for GEMMs and attention kernels).
    pub measured: f64,
}

/// What a measured row ran, each priced by its own rule ([`StepSet::predict`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// A whole forward pass over `batch`; `eager`: plain PyTorch launched it without a CUDA
    /// graph (the host's launch time may bound it).
    Step { batch: BatchShape, eager: bool },
    /// One GEMM of `[M, K, N]` with weights of `dtype`.
    Gemm { mkn: [u64; 3], dtype: Dtype },
    /// One attention kernel.
    Attention(AttentionShape),
}

impl Work {
    /// A whole step's batch and whether it ran eagerly; `None` for a single kernel.
    pub fn step(&self) -> Option<(&BatchShape, bool)> {
        match self {
            Work::Step { batch, eager } => Some((batch, *eager)),
            _ => None,
        }
    }
    /// Whether it runs a GEMM (a step or a GEMM row).
    pub fn runs_gemms(&self) -> bool {
        !matches!(self, Work::Attention(_))
    }
    /// Whether it runs attention (a step or an attention row).
    pub fn runs_attention(&self) -> bool {
        !matches!(self, Work::Gemm { .. })
    }
}

/// One attention kernel's work ([`cost::attention_kernel_s`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    /// Query heads, key-value heads, head dimension.
    pub heads: [u64; 3],
    pub seqs: u64,
    /// Query tokens per sequence (1 for decode).
    pub new: u64,
    /// Cached tokens before them.
    pub context: u64,
}

/// The rows of a case, ready to price.
#[derive(Debug, Clone)]
pub struct StepSet {
    pub case: String,
    pub gpu: cachesim_core::catalog::Gpu,
    pub model: cachesim_core::catalog::Model,
    pub tp: u64,
    pub rank: bool,
    pub rows: Vec<StepRow>,
}

/// Every step case among the `*.toml` files of `dir`, sorted by file name.
pub fn load_dir(dir: &Path) -> Result<Vec<LoadedSteps>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| Error::Io { path: dir.to_path_buf(), error })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml") && super::case::is_step_case(p))
        .collect();
    files.sort();
    files.iter().map(|f| load(f)).collect()
}

/// Reads one step-case file.
pub fn load(file: &Path) -> Result<LoadedSteps> {
    let text = std::fs::read_to_string(file).map_err(|error| Error::Io { path: file.to_path_buf(), error })?;
    let fail = |message: String| Error::Report { path: file.to_path_buf(), message };
    let case: StepCase = toml::from_str(&text).map_err(|e| fail(toml_error(&text, &e)))?;
    if case.kind != "steps" {
        return Err(fail(format!("kind `{}`: a step case has kind = \"steps\"", case.kind)));
    }
    if case.decode.is_none() && case.prefill.is_none() && case.gemm.is_empty() && case.attention.is_empty() {
        return Err(fail(
            "a step case needs `decode`, `prefill`, `gemm` or `attention` (CSVs under the data folder)".into(),
        ));
    }
    Ok(LoadedSteps { file: file.to_path_buf(), case })
}

/// A row's time: positive and finite, else `fail` (which names the file and row).
fn time_us(t: f64, fail: &dyn Fn(String) -> Error) -> Result<f64> {
    if t.is_finite() && t > 0.0 {
        Ok(t)
    } else {
        Err(fail(format!("time_us {t}: a positive time")))
    }
}

/// Reads CSV `text` into rows, one line at a time: `row` gets each line and a `fail` that names
/// the file and the row (numbered as in the file, the header being row 1); `None` leaves the
/// line out.
fn read_rows<T: serde::de::DeserializeOwned>(
    text: &str,
    path: &Path,
    mut row: impl FnMut(T, &dyn Fn(String) -> Error) -> Result<Option<StepRow>>,
) -> Result<Vec<StepRow>> {
    let mut rd = csv::Reader::from_reader(text.as_bytes());
    let mut rows = Vec::new();
    let headers = rd.headers().ok().cloned();
    for (i, l) in rd.deserialize::<T>().enumerate() {
        let l = l.map_err(|e| Error::Report { path: path.to_path_buf(), message: csv_error(&e, headers.as_ref()) })?;
        let fail = |m: String| Error::Report { path: path.to_path_buf(), message: format!("row {}: {m}", i + 2) };
        rows.extend(row(l, &fail)?);
    }
    Ok(rows)
}

#[derive(Deserialize)]
struct DecodeLine {
    batch: u32,
    context: u64,
    time_us: f64,
}

#[derive(Deserialize)]
struct PrefillLine {
    tokens: u64,
    time_us: f64,
}

/// Decode rows from CSV text with `batch`, `context` and `time_us` columns (others ignored):
/// B sequences, each decoding one token after `context` cached ones.
pub fn parse_decode(text: &str, path: &Path) -> Result<Vec<StepRow>> {
    read_rows(text, path, |l: DecodeLine, fail| {
        let measured = time_us(l.time_us, fail)? / 1e3;
        if l.batch == 0 {
            return Err(fail("batch 0".into()));
        }
        let mut batch = BatchShape::default();
        for _ in 0..l.batch {
            batch.add(l.context, 1);
        }
        let shape = format!("B={} L={}", l.batch, l.context);
        Ok(Some(StepRow { metric: STEP_METRICS[0], shape, work: Work::Step { batch, eager: false }, measured }))
    })
}

/// Prefill rows from CSV text with `tokens` and `time_us` columns (others ignored): one
/// sequence of T new tokens with no earlier context.
pub fn parse_prefill(text: &str, path: &Path, eager: bool) -> Result<Vec<StepRow>> {
    read_rows(text, path, |l: PrefillLine, fail| {
        let measured = time_us(l.time_us, fail)? / 1e3;
        if l.tokens == 0 {
            return Err(fail("tokens 0".into()));
        }
        let mut batch = BatchShape::default();
        batch.add(0, l.tokens);
        let shape = format!("T={}", l.tokens);
        Ok(Some(StepRow { metric: STEP_METRICS[1], shape, work: Work::Step { batch, eager }, measured }))
    })
}

#[derive(Deserialize)]
struct GemmLine {
    shape: Option<String>,
    model: Option<String>,
    layer: Option<String>,
    dtype: Option<String>,
    #[serde(rename = "M")]
    m: u64,
    #[serde(rename = "K")]
    k: u64,
    #[serde(rename = "N")]
    n: u64,
    time_us: f64,
}

/// GEMM rows from CSV text with `M`, `K`, `N` and `time_us` columns, the weights' type in
/// `dtype` (bf16 when absent; fp8) and the GEMM's name in `shape` or `model` + `layer`; rows
/// whose name contains one of `skip` are left out.
pub fn parse_gemm(text: &str, path: &Path, skip: &[String]) -> Result<Vec<StepRow>> {
    read_rows(text, path, |l: GemmLine, fail| {
        let name = match (l.shape, l.model, l.layer) {
            (Some(s), ..) => s,
            (None, Some(m), Some(layer)) => format!("{m}.{layer}"),
            _ => return Err(fail("a GEMM row needs `shape`, or `model` and `layer`".into())),
        };
        if skip.iter().any(|s| name.contains(s.as_str())) {
            return Ok(None);
        }
        let measured = time_us(l.time_us, fail)?;
        if l.m == 0 || l.k == 0 || l.n == 0 {
            return Err(fail("M, K and N must be positive".into()));
        }
        let (dtype, metric) = match l.dtype.as_deref() {
            None | Some("bf16") => (Dtype::Bf16, STEP_METRICS[2]),
            Some("fp8") => (Dtype::Fp8, STEP_METRICS[3]),
            Some(d) => return Err(fail(format!("dtype `{d}`: bf16 or fp8"))),
        };
        let shape = format!("{name} {} M={}", if dtype == Dtype::Fp8 { "fp8" } else { "bf16" }, l.m);
        Ok(Some(StepRow { metric, shape, work: Work::Gemm { mkn: [l.m, l.k, l.n], dtype }, measured }))
    })
}

#[derive(Deserialize)]
struct AttentionLine {
    batch: Option<u64>,
    kv_len: Option<u64>,
    seq_len: Option<u64>,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    time_us: f64,
}

/// Attention-kernel rows from CSV text with `heads`, `kv_heads`, `head_dim` and `time_us`
/// columns, and either `seq_len` (one causal prefill of that many tokens) or `batch` and
/// `kv_len` (one query per sequence over that many keys).
pub fn parse_attention(text: &str, path: &Path) -> Result<Vec<StepRow>> {
    read_rows(text, path, |l: AttentionLine, fail| {
        let measured = time_us(l.time_us, fail)?;
        if l.heads == 0 || l.kv_heads == 0 || l.head_dim == 0 || !l.heads.is_multiple_of(l.kv_heads) {
            return Err(fail(format!(
                "heads {}, kv_heads {}, head_dim {}: positive, heads a multiple of kv_heads",
                l.heads, l.kv_heads, l.head_dim
            )));
        }
        let heads = [l.heads, l.kv_heads, l.head_dim];
        let (metric, shape, attention) = match (l.seq_len, l.batch, l.kv_len) {
            (Some(n), None, None) if n > 0 => (
                STEP_METRICS[4],
                format!("attn {}/{} prefill L={n}", l.heads, l.kv_heads),
                AttentionShape { heads, seqs: 1, new: n, context: 0 },
            ),
            (None, Some(b), Some(k)) if b > 0 && k > 0 => (
                STEP_METRICS[5],
                format!("attn {}/{} decode B={b} L={k}", l.heads, l.kv_heads),
                AttentionShape { heads, seqs: b, new: 1, context: k - 1 },
            ),
            _ => {
                return Err(fail(
                    "an attention row has a positive `seq_len`, or a positive `batch` and `kv_len`".into(),
                ))
            }
        };
        Ok(Some(StepRow { metric, shape, work: Work::Attention(attention), measured }))
    })
}

impl LoadedSteps {
    /// The CSV files the case reads, resolved under the data folder; an error saying which is
    /// absent (the case is then listed as not run).
    pub fn csv_paths(&self, data: Option<&Path>) -> Result<Vec<PathBuf>> {
        let rels: Vec<&String> = self
            .case
            .decode
            .iter()
            .chain(&self.case.prefill)
            .chain(&self.case.gemm)
            .chain(&self.case.attention)
            .collect();
        let fail = |message: String| Error::Report { path: self.file.clone(), message };
        let data = data.ok_or_else(|| {
            fail(format!("needs the data folder (--data or CACHESIM_DATA) for {}, which is not given", rels[0]))
        })?;
        rels.iter()
            .map(|r| {
                let p = data.join(r);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(fail(format!("needs {}, which is absent", p.display())))
                }
            })
            .collect()
    }

    /// The case's own profile file, resolved against its folder.
    pub fn profile_path(&self) -> Option<PathBuf> {
        let p = self.case.profile.as_ref()?;
        Some(self.file.parent().unwrap_or(Path::new(".")).join(p))
    }

    /// The measured rows (decode, then prefill) with the GPU and model, from the data folder.
    pub fn read(&self, data: Option<&Path>) -> Result<StepSet> {
        self.csv_paths(data)?;
        let data = data.unwrap_or(Path::new("."));
        let text = |rel: &str| {
            let p = data.join(rel);
            std::fs::read_to_string(&p).map_err(|error| Error::Io { path: p.clone(), error }).map(|t| (p, t))
        };
        let mut rows = Vec::new();
        if let Some(rel) = &self.case.decode {
            let (p, t) = text(rel)?;
            rows.extend(parse_decode(&t, &p)?);
        }
        if let Some(rel) = &self.case.prefill {
            let (p, t) = text(rel)?;
            rows.extend(parse_prefill(&t, &p, self.case.prefill_eager)?);
        }
        for rel in &self.case.gemm {
            let (p, t) = text(rel)?;
            rows.extend(parse_gemm(&t, &p, &self.case.skip_shapes)?);
        }
        for rel in &self.case.attention {
            let (p, t) = text(rel)?;
            rows.extend(parse_attention(&t, &p)?);
        }
        let c = &self.case;
        Ok(StepSet {
            case: c.case.clone(),
            gpu: cachesim_core::catalog::gpu(&c.gpu, None)?,
            model: cachesim_core::catalog::model(&c.model, None)?,
            tp: c.tp.max(1),
            rank: c.rank,
            rows,
        })
    }
}

impl StepSet {
    /// The step-time model of the case with factors `eff`.
    pub fn roofline(&self, eff: Efficiency) -> Roofline {
        Roofline::deployed(&self.gpu, &self.model, Deployment::tp(self.tp), eff)
    }

    /// The predicted row in its metric's unit: a GEMM's [`cost::gemm_s`] in µs; a step's device
    /// time in ms (a rank's compute alone for a rank case), or for an eager row the larger of
    /// that and the eager launch time.
    pub fn predict(&self, r: &Roofline, row: &StepRow) -> f64 {
        let e = &r.eff;
        match &row.work {
            Work::Gemm { mkn, dtype } => cost::gemm_s(&self.gpu, e, *mkn, *dtype) * 1e6,
            Work::Attention(a) => {
                (e.sdpa_dispatch_s + cost::attention_kernel_s(&self.gpu, e, a.heads, a.seqs, a.new, a.context)) * 1e6
            }
            Work::Step { batch, eager } => {
                let device = if self.rank { r.rank_compute_s(batch) } else { r.step_parts(batch).device_s };
                let s = if *eager { device.max(r.eager_launch_s()) } else { device };
                s * 1e3
            }
        }
    }

    /// The residual rows of the weighted metrics (`case` = the case and the shape).
    pub fn residuals(&self, eff: Efficiency, weights: &BTreeMap<String, f64>) -> Vec<Residual> {
        let r = self.roofline(eff);
        self.rows
            .iter()
            .filter(|row| weights.contains_key(row.metric))
            .map(|row| {
                let predicted = self.predict(&r, row);
                Residual {
                    case: row_case(&self.case, row),
                    metric: row.metric.to_string(),
                    measured: row.measured,
                    predicted,
                    error_pct: (predicted - row.measured) / row.measured * 100.0,
                }
            })
            .collect()
    }
}

impl LoadedSteps {
    /// The case's validation rows and how it was priced: with its own profile
    /// (`profile`), else — or with `uncalibrated` — the raw roofline.
    pub fn validate(&self, data: Option<&Path>, uncalibrated: bool) -> Result<(CaseInfo, Vec<Row>)> {
        let set = self.read(data)?;
        let used = match self.profile_path() {
            Some(p) => Some((cachesim_core::calibration::profile::read(&p)?, p)),
            None => None,
        };
        let (eff, calibration) = match (&used, uncalibrated) {
            (Some((p, path)), false) => {
                (p.efficiency, format!("{} ({}, fitted on {})", p.name, path.display(), p.fit.cases_named()))
            }
            (_, true) => (Efficiency::default(), "none (raw roofline, --uncalibrated)".to_string()),
            (None, false) => (Efficiency::default(), "none (raw roofline: the case names no profile)".to_string()),
        };
        let fitted = !uncalibrated && used.as_ref().is_some_and(|(p, _)| p.fit.cases.contains(&self.case.case));
        let info = CaseInfo {
            case: self.case.case.clone(),
            calibration,
            fitted,
            no_profile: used.is_none(),
            gpu: set.gpu.name.clone(),
            engine: super::holdout::KERNELS.to_string(),
            source: STEP_SOURCE.to_string(),
            refit: None,
            refit_on: None,
            rung: None,
        };
        let rows = set
            .residuals(eff, &default_weights())
            .into_iter()
            .zip(&set.rows)
            .map(|(r, row)| Row {
                case: self.case.case.clone(),
                shape: Some(row.shape.clone()),
                metric: r.metric,
                measured: r.measured,
                predicted: r.predicted,
                error_pct: r.error_pct,
            })
            .collect();
        Ok((info, rows))
    }
}

/// The case column of a step row: the case and the shape (`h200-llama8b-steps B=8 L=512`).
pub fn row_case(case: &str, row: &StepRow) -> String {
    format!("{case} {}", row.shape)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn csv_rows_become_batch_shapes() {
        let p = Path::new("t.csv");
        let d = parse_decode("model,batch,context,time_us,mode\nm,2,512,6967.2,cuda graph\nm,1,8,100,x\n", p).unwrap();
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].metric, d[0].shape.as_str(), d[0].measured), ("decode_step_ms", "B=2 L=512", 6.9672));
        let want = BatchShape { seqs: 2, decode_seqs: 2, decode_ctx_tokens: 1024, ..Default::default() };
        assert_eq!(d[0].work, Work::Step { batch: want, eager: false });
        let f = parse_prefill("model,tokens,time_us,note\nm,128,19330.8,\"eager, one\"\n", p, true).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].metric, f[0].shape.as_str()), ("prefill_step_ms", "T=128"));
        assert!((f[0].measured - 19.3308).abs() < 1e-12);
        // 128 new tokens, no context: 128 × (0 + 129 / 2) query-key pairs.
        let want = BatchShape { seqs: 1, prefill_tokens: 128, prefill_attn_pairs: 128.0 * 64.5, ..Default::default() };
        assert_eq!(f[0].work, Work::Step { batch: want, eager: true });
        let e = parse_decode("batch,context,time_us\n1,x,3\n", p).unwrap_err().to_string();
        assert!(e.contains("t.csv"), "{e}");
    }

    /// Rows priced as Llama-3.1-8B on one H200.
    pub(crate) fn h200_8b(rows: Vec<StepRow>) -> StepSet {
        StepSet {
            case: "t".into(),
            gpu: cachesim_core::catalog::gpu("h200", None).unwrap(),
            model: cachesim_core::catalog::model("llama-3.1-8b", None).unwrap(),
            tp: 1,
            rank: false,
            rows,
        }
    }

    /// Both GEMM layouts of the data folder: `model,layer,…` (BF16) and `shape,dtype,…`; a
    /// skipped name is left out; an unknown dtype or a nameless row is an error naming the
    /// file and row.
    #[test]
    fn gemm_rows_in_both_layouts() {
        let p = Path::new("g.csv");
        let a = parse_gemm("model,layer,M,K,N,time_us,tflops\nllama@tp1,qkv,64,4096,6144,35.4,1\n", p, &[]).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].metric, a[0].shape.as_str(), a[0].measured),
            ("gemm_bf16_us", "llama@tp1.qkv bf16 M=64", 35.4)
        );
        assert_eq!(a[0].work, Work::Gemm { mkn: [64, 4096, 6144], dtype: Dtype::Bf16 });
        let text = "shape,dtype,M,K,N,time_us\nx.q_a,fp8,16,7168,1536,31.3\nx.looped.e8,bf16,1,7168,4096,160\n";
        let b = parse_gemm(text, p, &["looped".to_string()]).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].metric, b[0].shape.as_str()), ("gemm_fp8_us", "x.q_a fp8 M=16"));
        let e = parse_gemm("shape,dtype,M,K,N,time_us\nx,int4,1,2,3,4\n", p, &[]).unwrap_err().to_string();
        assert!(e.contains("g.csv") && e.contains("row 2") && e.contains("int4"), "{e}");
        let e = parse_gemm("M,K,N,time_us\n1,2,3,4\n", p, &[]).unwrap_err().to_string();
        assert!(e.contains("row 2: a GEMM row needs `shape`"), "{e}");
        let e = parse_gemm("shape,M,K,N,time_us\nx,1,2,3,4\nx,1,2,3,0\n", p, &[]).unwrap_err().to_string();
        assert!(e.contains("g.csv") && e.contains("row 3: time_us 0: a positive time"), "{e}");
        let e = parse_gemm("shape,M,K,N,time_us\nx,0,2,3,4\n", p, &[]).unwrap_err().to_string();
        assert!(e.contains("row 2: M, K and N must be positive"), "{e}");
        let e = parse_decode("batch,context,time_us\n1,8,NaN\n", p).unwrap_err().to_string();
        assert!(e.contains("row 2: time_us NaN"), "{e}");
        let e = parse_prefill("tokens,time_us\n0,5\n", p, false).unwrap_err().to_string();
        assert!(e.contains("row 2: tokens 0"), "{e}");
        // Priced by the one-GEMM rule, in µs.
        let set = h200_8b(b);
        let eff = Efficiency { kernel_floor_s: 20e-6, ..Efficiency::default() };
        let want = cost::gemm_s(&set.gpu, &eff, [16, 7168, 1536], Dtype::Fp8) * 1e6;
        assert_eq!(set.predict(&set.roofline(eff), &set.rows[0]), want);
    }

    /// Attention rows of both layouts (the data folder's `attn_prefill.csv` and
    /// `attn_decode.csv`), priced as SDPA's host dispatch plus the one-kernel rule; rows
    /// that cannot be one are refused with the file and row.
    #[test]
    fn attention_rows_in_both_layouts() {
        let p = Path::new("a.csv");
        let pre = parse_attention("heads,kv_heads,head_dim,seq_len,time_us,tflops_causal\n32,8,128,4096,312.4,1\n", p);
        let pre = pre.unwrap();
        assert_eq!(
            (pre[0].metric, pre[0].shape.as_str(), pre[0].measured),
            ("attn_prefill_us", "attn 32/8 prefill L=4096", 312.4)
        );
        assert_eq!(
            pre[0].work,
            Work::Attention(AttentionShape { heads: [32, 8, 128], seqs: 1, new: 4096, context: 0 })
        );
        let dec = parse_attention("batch,kv_len,heads,kv_heads,head_dim,time_us,GBps_kv\n64,1024,8,1,128,53.3,1\n", p);
        let dec = dec.unwrap();
        assert_eq!((dec[0].metric, dec[0].shape.as_str()), ("attn_decode_us", "attn 8/1 decode B=64 L=1024"));
        assert_eq!(
            dec[0].work,
            Work::Attention(AttentionShape { heads: [8, 1, 128], seqs: 64, new: 1, context: 1023 })
        );
        for (text, want) in [
            ("heads,kv_heads,head_dim,seq_len,time_us\n32,6,128,64,5\n", "row 2: heads 32, kv_heads 6"),
            ("heads,kv_heads,head_dim,seq_len,time_us\n32,8,128,0,5\n", "row 2: an attention row has a positive"),
            ("batch,kv_len,heads,kv_heads,head_dim,time_us\n4,0,8,1,128,5\n", "row 2: an attention row"),
            ("heads,kv_heads,head_dim,seq_len,time_us\n8,1,128,64,-1\n", "row 2: time_us -1"),
        ] {
            let e = parse_attention(text, p).unwrap_err().to_string();
            assert!(e.contains("a.csv") && e.contains(want), "{e}");
        }
        let set = h200_8b(dec);
        let eff = Efficiency { kernel_floor_s: 20e-6, sdpa_dispatch_s: 15e-6, ..Efficiency::default() };
        let want = (15e-6 + cost::attention_kernel_s(&set.gpu, &eff, [8, 1, 128], 64, 1, 1023)) * 1e6;
        assert_eq!(set.predict(&set.roofline(eff), &set.rows[0]), want);
    }

    #[test]
    fn step_case_files_load_and_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("s.toml");
        let body = "kind = \"steps\"\ncase = \"s\"\ngpu = \"h200\"\nmodel = \"llama-3.1-8b\"\n\
                    decode = \"d.csv\"\nprefill = \"p.csv\"\nprefill_eager = true\n";
        std::fs::write(&f, body).unwrap();
        std::fs::write(dir.path().join("other.toml"), "case = \"x\"\n").unwrap();
        let all = load_dir(dir.path()).unwrap();
        assert_eq!(all.len(), 1);
        assert!(
            crate::calibrate::case::is_step_case(&f)
                && !crate::calibrate::case::is_step_case(&dir.path().join("other.toml"))
        );
        // The data folder: absent → the reason; present → rows decode then prefill.
        let e = all[0].read(None).unwrap_err().to_string();
        assert!(e.contains("needs the data folder") && e.contains("d.csv"), "{e}");
        let e = all[0].read(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("d.csv, which is absent"), "{e}");
        std::fs::write(dir.path().join("d.csv"), "batch,context,time_us\n4,100,7000\n").unwrap();
        std::fs::write(dir.path().join("p.csv"), "tokens,time_us\n512,20000\n").unwrap();
        let s = all[0].read(Some(dir.path())).unwrap();
        assert_eq!(s.rows.iter().map(|r| r.shape.as_str()).collect::<Vec<_>>(), ["B=4 L=100", "T=512"]);
        assert_eq!((s.tp, s.rank), (1, false));
        assert_eq!(s.rows[1].work.step().map(|(_, eager)| eager), Some(true));
        // The eager row is bound by 32 layers × 1 ms of launches; the decode row by the device.
        let eff = Efficiency { eager_layer_launch_s: 1e-3, ..Efficiency::default() };
        let r = s.roofline(eff);
        assert_eq!(s.predict(&r, &s.rows[1]), 32.0);
        let (batch, _) = s.rows[0].work.step().unwrap();
        assert_eq!(s.predict(&r, &s.rows[0]), r.step_parts(batch).device_s * 1e3);
        let rows = s.residuals(eff, &default_weights());
        assert_eq!(rows[1].case, "s T=512");
        assert!((rows[1].error_pct - 60.0).abs() < 1e-9, "{rows:?}");
        std::fs::write(&f, body.replace("kind = \"steps\"", "kind = \"steps\"\nfoo = 1")).unwrap();
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("unknown field `foo`"), "{e}");
    }
}
