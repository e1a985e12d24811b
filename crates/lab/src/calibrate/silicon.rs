//! Silicon-sample cases (`kind = "silicon"` files among `calibration/cases/`): one case file
//! names a CSV of measured serving points under the data folder — NVIDIA AIConfigurator's
//! `silicon_sample.csv`, one benchmark of a deployment per row, never copied into the
//! repository — and the filters that pick its rows (GPU system, mode, backends). Each row
//! expands into a serving case of its own ([`LoadedCase`], named `<case>/<row id>`): the
//! deployment (the case's GPU, the catalog model its `[[model]]` tables map the row's model and
//! precision to, the engine bundle its `[[engine]]` tables map the row's backend and release
//! to, TP / PP / attention DP / EP from the row), the workload (fixed ISL/OSL random prompts
//! sent by a closed-loop client at the row's `silicon_concurrency`) and the measured TTFT and
//! TPOT under the case's `statistic`. A row that cannot be expressed is kept with its reason
//! ([`Expanded::not_expressible`]), never dropped.

use super::case::{Case, Deployment, LoadedCase, Published, WorkloadSpec};
use super::report::{BenchReport, Layout};
use cachesim_core::error::{Error, Result};
use cachesim_core::messages::{csv_error, toml_error};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The `kind` of a silicon-sample case file.
pub const KIND: &str = "silicon";

/// The page the rows come from (a published source: the validation table groups by it).
pub const SOURCE_URL: &str = "https://github.com/ai-dynamo/aiconfigurator";

/// TensorRT-LLM's default `max_num_tokens` (`llmapi/llm_args.py`, 1.0).
pub const TRTLLM_MAX_NUM_TOKENS: u32 = 8192;

/// Which of the client's statistics the row's TTFT and TPOT are taken to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Statistic {
    Mean,
    Median,
}

impl Statistic {
    /// The sglang keys of TTFT and TPOT under this statistic.
    pub fn keys(self) -> [&'static str; 2] {
        match self {
            Statistic::Mean => ["mean_ttft_ms", "mean_tpot_ms"],
            Statistic::Median => ["median_ttft_ms", "median_tpot_ms"],
        }
    }
}

/// A row's backend and release mapped to an `--engine-version` bundle.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineMap {
    /// The row's `backend` (`trtllm`, `vllm`, `sglang`).
    pub backend: String,
    /// Release prefixes of `backend_version` this entry takes (empty: any release).
    #[serde(default)]
    pub versions: Vec<String>,
    /// The `--engine-version` bundle.
    pub bundle: String,
}

/// A row's model and precision mapped to a catalog model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelMap {
    /// The row's `model_path` (a Hugging Face id).
    pub hf: String,
    /// The row's `precision` values this entry takes (`""` = not stated: the checkpoint's own).
    pub precision: Vec<String>,
    /// The catalog model (models/models.toml).
    pub name: String,
}

/// One GPU system of a silicon-sample case file (`[[system]]`): a case of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SystemEntry {
    case: String,
    system: String,
    gpu: String,
}

/// A silicon-sample case file: the settings and maps its systems share, and the systems.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SiliconFile {
    kind: String,
    data: String,
    #[serde(default = "agg")]
    mode: String,
    #[serde(default)]
    backends: Vec<String>,
    statistic: Statistic,
    prompts_per_concurrency: u32,
    max_prompts: Option<u32>,
    #[serde(default)]
    min_prompts: u32,
    #[serde(default)]
    seed: u64,
    engine: Vec<EngineMap>,
    model: Vec<ModelMap>,
    #[serde(default)]
    assumptions: Vec<String>,
    system: Vec<SystemEntry>,
}

/// One silicon-sample case: one GPU system of a case file (`[[system]]`) with the file's
/// shared settings.
#[derive(Debug, Clone)]
pub struct SiliconCase {
    /// Always `silicon`.
    pub kind: String,
    /// The case's name; each row's is `<case>/<row id>`.
    pub case: String,
    /// The CSV, relative to the data folder.
    pub data: String,
    /// The rows' `system` this case reads (every other system's rows belong to other cases).
    pub system: String,
    /// The GPU profile of that system (models/gpus.toml).
    pub gpu: String,
    /// The `mode` simulated (`agg`); rows of another mode are listed as not expressible.
    pub mode: String,
    /// The backends simulated (empty: all); rows of another are listed as not expressible.
    pub backends: Vec<String>,
    /// What the rows' TTFT and TPOT are compared as (`mean` or `median`).
    pub statistic: Statistic,
    /// Requests sent per unit of client concurrency.
    pub prompts_per_concurrency: u32,
    /// At most this many requests (none: no cap).
    pub max_prompts: Option<u32>,
    /// At least this many requests.
    pub min_prompts: u32,
    /// GPUs of one node, the GPU catalog's (`gpus_per_node`: 8 on an HGX board, 72 in an NVL72
    /// rack): an instance over more spans nodes (`--nnodes`).
    pub gpus_per_node: u32,
    /// Seed of the prompts and the client.
    pub seed: u64,
    /// Backend and release → bundle; the first entry that takes a row wins.
    pub engine: Vec<EngineMap>,
    /// Model and precision → catalog model.
    pub model: Vec<ModelMap>,
    pub assumptions: Vec<String>,
}

fn agg() -> String {
    "agg".into()
}

/// A silicon case with its file.
#[derive(Debug, Clone)]
pub struct LoadedSilicon {
    pub file: PathBuf,
    pub case: SiliconCase,
}

/// One row of the CSV: the columns read (the others are ignored).
#[derive(Debug, Clone, Deserialize)]
pub struct Line {
    pub id: String,
    pub silicon_data_source: String,
    pub backend: String,
    pub backend_version: String,
    pub model_path: String,
    pub system: String,
    pub precision: String,
    pub mode: String,
    pub isl: Option<u32>,
    pub osl: Option<u32>,
    pub gemm_quant_mode: String,
    pub moe_quant_mode: String,
    pub batch_size: Option<u32>,
    pub tp_size: Option<u32>,
    pub pp_size: Option<u32>,
    pub attention_dp_size: Option<u32>,
    pub moe_tp_size: Option<u32>,
    pub moe_ep_size: Option<u32>,
    pub silicon_ttft_ms: Option<f64>,
    pub silicon_tpot_ms: Option<f64>,
}

impl Line {
    /// The client's closed-loop concurrency (`silicon_concurrency=N` in `silicon_data_source`).
    pub fn concurrency(&self) -> Option<u32> {
        self.silicon_data_source
            .split(';')
            .find_map(|p| p.trim().strip_prefix("silicon_concurrency="))
            .and_then(|n| n.trim().parse().ok())
            .filter(|&n| n > 0)
    }
}

/// The rows of a case file: the expressible ones as cases, the others by reason.
#[derive(Debug, Clone, Default)]
pub struct Expanded {
    /// Rows of the case's system in the CSV.
    pub rows: usize,
    pub cases: Vec<LoadedCase>,
    /// Reason → the ids of the rows it stops, in file order.
    pub not_expressible: BTreeMap<String, Vec<String>>,
}

/// Whether the TOML file at `path` is a silicon case (`kind = "silicon"`).
pub fn is_silicon_case(path: &Path) -> bool {
    super::case::kind_of(path).as_deref() == Some(KIND)
}

/// Every silicon case of the `*.toml` files of `dir`, by file name, then in each file's
/// `[[system]]` order.
pub fn load_dir(dir: &Path) -> Result<Vec<LoadedSilicon>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| Error::Io { path: dir.to_path_buf(), error })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml") && is_silicon_case(p))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in &files {
        out.extend(load(f)?);
    }
    Ok(out)
}

/// Reads one silicon case file: a case per `[[system]]`, each with the file's shared settings
/// and maps.
pub fn load(file: &Path) -> Result<Vec<LoadedSilicon>> {
    let text = std::fs::read_to_string(file).map_err(|error| Error::Io { path: file.to_path_buf(), error })?;
    let fail = |message: String| Error::Report { path: file.to_path_buf(), message };
    let f: SiliconFile = toml::from_str(&text).map_err(|e| fail(toml_error(&text, &e)))?;
    if f.kind != KIND {
        return Err(fail(format!("kind `{}`: a silicon case has kind = \"{KIND}\"", f.kind)));
    }
    if f.prompts_per_concurrency == 0 {
        return Err(fail("prompts_per_concurrency: at least 1".into()));
    }
    if f.max_prompts.is_some_and(|m| m == 0 || m < f.min_prompts) {
        return Err(fail("max_prompts: at least 1 and at least min_prompts".into()));
    }
    if f.system.is_empty() {
        return Err(fail("system: at least one [[system]] table".into()));
    }
    let mut out: Vec<LoadedSilicon> = Vec::new();
    for s in f.system {
        let gpu = cachesim_core::catalog::gpu(&s.gpu, None).map_err(|e| fail(format!("system {}: {e}", s.case)))?;
        let gpus_per_node = u32::try_from(gpu.gpus_per_node()).unwrap_or(u32::MAX);
        if out.iter().any(|o| o.case.case == s.case) {
            return Err(fail(format!("system {}: named twice", s.case)));
        }
        let case = SiliconCase {
            kind: f.kind.clone(),
            case: s.case,
            data: f.data.clone(),
            system: s.system,
            gpu: s.gpu,
            mode: f.mode.clone(),
            backends: f.backends.clone(),
            statistic: f.statistic,
            prompts_per_concurrency: f.prompts_per_concurrency,
            max_prompts: f.max_prompts,
            min_prompts: f.min_prompts,
            gpus_per_node,
            seed: f.seed,
            engine: f.engine.clone(),
            model: f.model.clone(),
            assumptions: f.assumptions.clone(),
        };
        out.push(LoadedSilicon { file: file.to_path_buf(), case });
    }
    Ok(out)
}

/// A layout field: empty or 0 (as some rows write an unused one) is 1.
fn one(x: Option<u32>) -> u32 {
    x.filter(|&x| x > 0).unwrap_or(1)
}

impl LoadedSilicon {
    /// The CSV under the data folder; an error saying what is absent (the case is then listed
    /// as not run).
    pub fn csv_path(&self, data: Option<&Path>) -> Result<PathBuf> {
        let rel = &self.case.data;
        let fail = |message: String| Error::Report { path: self.file.clone(), message };
        let data = data.ok_or_else(|| {
            fail(format!("needs the data folder (--data or CACHESIM_DATA) for {rel}, which is not given"))
        })?;
        let p = data.join(rel);
        if p.is_file() {
            Ok(p)
        } else {
            Err(fail(format!("needs {}, which is absent", p.display())))
        }
    }

    /// The rows of the case's system from the data folder's CSV, those whose name `keep`
    /// accepts (`<case>/<row id>`); an unreadable row is an error naming the file, line and
    /// field.
    pub fn expand(&self, data: Option<&Path>, keep: &dyn Fn(&str) -> bool) -> Result<Expanded> {
        let path = self.csv_path(data)?;
        let text = std::fs::read_to_string(&path).map_err(|error| Error::Io { path: path.clone(), error })?;
        self.expand_text(&text, &path, keep)
    }

    /// [`LoadedSilicon::expand`] over CSV `text` read from `path`.
    pub fn expand_text(&self, text: &str, path: &Path, keep: &dyn Fn(&str) -> bool) -> Result<Expanded> {
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let fail = |message: String| Error::Report { path: path.to_path_buf(), message };
        let headers = rd.headers().map_err(|e| fail(csv_error(&e, None)))?.clone();
        let mut out = Expanded::default();
        for line in rd.deserialize::<Line>() {
            let line = line.map_err(|e| fail(csv_error(&e, Some(&headers))))?;
            if line.system != self.case.system {
                continue;
            }
            let name = format!("{}/{}", self.case.case, line.id);
            if !keep(&name) {
                continue;
            }
            out.rows += 1;
            match self.row_case(&line, &name) {
                Ok(c) => out.cases.push(c),
                Err(why) => out.not_expressible.entry(why).or_default().push(line.id.clone()),
            }
        }
        Ok(out)
    }

    /// The bundle a row's backend and release run with: the first `[[engine]]` entry that
    /// takes it.
    pub fn bundle(&self, backend: &str, version: &str) -> Option<&str> {
        self.case
            .engine
            .iter()
            .find(|e| {
                e.backend == backend && (e.versions.is_empty() || e.versions.iter().any(|v| version.starts_with(v)))
            })
            .map(|e| e.bundle.as_str())
    }

    /// The catalog model of a row's model and precision.
    pub fn model_of(&self, hf: &str, precision: &str) -> Option<&str> {
        self.case
            .model
            .iter()
            .find(|m| m.hf == hf && m.precision.iter().any(|p| p == precision))
            .map(|m| m.name.as_str())
    }

    /// One row as a serving case, or why it cannot be one.
    pub fn row_case(&self, l: &Line, name: &str) -> std::result::Result<LoadedCase, String> {
        let c = &self.case;
        if l.mode != c.mode {
            return Err(format!("mode {}: this case simulates mode {} rows", l.mode, c.mode));
        }
        if !c.backends.is_empty() && !c.backends.contains(&l.backend) {
            return Err(format!("backend {}: this case simulates {}", l.backend, c.backends.join(", ")));
        }
        let model = match self.model_of(&l.model_path, &l.precision) {
            Some(m) => m.to_string(),
            None if ["fp4", "nvfp4", "mxfp4", "int4"].contains(&l.precision.as_str())
                || l.gemm_quant_mode.contains("fp4")
                || l.gemm_quant_mode.contains("int4") =>
            {
                return Err(format!(
                    "precision {} (gemm {}, moe {}): cachesim prices no 4-bit weights (bf16, fp16, fp8 only)",
                    l.precision, l.gemm_quant_mode, l.moe_quant_mode
                ))
            }
            None if c.model.iter().any(|m| m.hf == l.model_path) => {
                return Err(format!("{} at precision `{}`: no catalog model maps it", l.model_path, l.precision))
            }
            None => return Err(format!("model {}: not in the catalog", l.model_path)),
        };
        let bundle = self
            .bundle(&l.backend, &l.backend_version)
            .ok_or_else(|| format!("backend {} {}: no engine bundle maps it", l.backend, l.backend_version))?
            .to_string();
        let conc = l.concurrency().ok_or("silicon_data_source states no silicon_concurrency")?;
        let (Some(isl), Some(osl)) = (l.isl.filter(|&x| x > 0), l.osl.filter(|&x| x > 0)) else {
            return Err("no isl/osl".into());
        };
        let (Some(ttft), Some(tpot)) = (l.silicon_ttft_ms, l.silicon_tpot_ms) else {
            return Err("no measured TTFT or TPOT".into());
        };
        if !(ttft.is_finite() && ttft > 0.0 && tpot.is_finite() && tpot > 0.0) {
            return Err(format!("measured TTFT {ttft} / TPOT {tpot}: not positive"));
        }
        let flags = self.layout_flags(l, &bundle)?;
        let (tp, pp, adp) = (one(l.tp_size), one(l.pp_size), one(l.attention_dp_size));
        let world = tp * pp * adp;
        let prompts = (c.prompts_per_concurrency.saturating_mul(conc)).max(c.min_prompts);
        let prompts = c.max_prompts.map_or(prompts, |m| prompts.min(m));
        let [kt, kp] = c.statistic.keys();
        let measured: BTreeMap<String, f64> = [(kt.to_string(), ttft), (kp.to_string(), tpot)].into();
        let mut assumptions = c.assumptions.clone();
        let version = if l.backend_version.is_empty() { "(release not stated)" } else { &l.backend_version };
        assumptions.push(format!("{} {version}: the {bundle} bundle", l.backend));
        if prompts != c.prompts_per_concurrency * conc {
            assumptions.push(format!("{prompts} requests, not {} × {conc}", c.prompts_per_concurrency));
        }
        let topology = format!("1 instance, {world} GPUs (TP {tp}, PP {pp}, attention DP {adp})");
        let case = Case {
            case: name.to_string(),
            report: None,
            report_record: None,
            measured: measured.clone(),
            published: Some(Published {
                point_id: l.id.clone(),
                engine: l.backend.clone(),
                engine_version: l.backend_version.clone(),
                gpu: l.system.clone(),
                num_gpus: world.to_string(),
                model: l.model_path.clone(),
                weight_dtype: format!("{} (gemm {}, moe {})", l.precision, l.gemm_quant_mode, l.moe_quant_mode),
                measurement_kind: format!("closed loop, concurrency {conc}, ISL {isl} / OSL {osl}"),
                throughput_scope: String::new(),
                source_url: SOURCE_URL.into(),
                source_locator: format!("{}: row {}", c.data, l.id),
                notes: l.silicon_data_source.clone(),
            }),
            expressible: true,
            missing: None,
            skip_metrics: Vec::new(),
            phase: None,
            deployment: Deployment {
                gpu: c.gpu.clone(),
                model,
                engine: l.backend.clone(),
                engine_version: Some(bundle),
                topology,
                flags,
                profile: None,
                file: None,
            },
            workload: WorkloadSpec {
                dataset: "random".into(),
                num_prompts: Some(prompts),
                input_len: Some(isl),
                output_len: Some(osl),
                range_ratio: 1.0,
                request_rate: Some("inf".into()),
                max_concurrency: Some(conc),
                seed: c.seed,
                seeds: None,
                trace: None,
                filter: None,
                client: None,
            },
            assumptions,
        };
        let measured = BenchReport {
            path: self.file.clone(),
            layout: Layout::SglangJsonl,
            backend: Some(l.backend.clone()),
            request_rate: None,
            max_concurrency: Some(conc as u64),
            metrics: measured,
            unknown_lines: Vec::new(),
        };
        Ok(LoadedCase { file: self.file.clone(), case, measured })
    }

    /// The layout and batch flags of a row: `--tp` over every GPU of the instance (the row's
    /// TP × attention DP), `--pp`, `--enable-dp-attention --dp-size` for attention DP,
    /// `--enable-expert-parallel` when the experts are spread over every GPU, `--nnodes` past
    /// one node, the row's batch size per attention-DP rank × attention DP (at least the
    /// concurrency) as the engine's cap on running requests, and for TensorRT-LLM a token budget of at least a whole prompt and the batch.
    pub fn layout_flags(&self, l: &Line, bundle: &str) -> std::result::Result<Vec<String>, String> {
        let (tp, pp, adp) = (one(l.tp_size), one(l.pp_size), one(l.attention_dp_size));
        let (moe_tp, moe_ep) = (one(l.moe_tp_size), one(l.moe_ep_size));
        let width = tp * adp;
        let mut f: Vec<String> = vec!["--tp".into(), width.to_string()];
        if pp > 1 {
            f.extend(["--pp".into(), pp.to_string()]);
        }
        if adp > 1 {
            f.extend(["--enable-dp-attention".into(), "--dp-size".into(), adp.to_string()]);
        }
        if moe_ep > 1 {
            if moe_ep != width || moe_tp != 1 {
                return Err(format!(
                    "MoE TP {moe_tp} × EP {moe_ep} over {width} GPUs: cachesim shards every expert over the TP \
                     ranks or spreads whole experts over all of them"
                ));
            }
            f.push("--enable-expert-parallel".into());
        }
        let world = width * pp;
        let n = self.case.gpus_per_node;
        if world > n {
            if world % n != 0 {
                return Err(format!("{world} GPUs do not fill nodes of {n}"));
            }
            f.extend(["--nnodes".into(), (world / n).to_string()]);
        }
        // Never below the client's concurrency: some rows' batch size is below the concurrency
        // they were measured at without queueing (GB200 Qwen3-32B: batch 2, concurrency 8,
        // TTFT 0.49 s).
        let batch = l.batch_size.filter(|&b| b > 0).map(|b| (b * adp).max(l.concurrency().unwrap_or(0)));
        if let Some(b) = batch {
            let cap = if bundle.starts_with("sglang") { "--max-running-requests" } else { "--max-num-seqs" };
            f.extend([cap.into(), b.to_string()]);
        }
        // TensorRT-LLM does not chunk prompts by default: its token budget must take a whole
        // prompt beside every running decode, or prompts wait for the batch to drain.
        if bundle.starts_with("trtllm") {
            let need = l.isl.unwrap_or(0) + batch.unwrap_or(0);
            f.extend(["--max-num-batched-tokens".into(), need.max(TRTLLM_MAX_NUM_TOKENS).to_string()]);
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,\
                        gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,\
                        moe_ep_size,prefill_tp_size,silicon_ttft_ms,silicon_tpot_ms\n";

    fn case_file(dir: &Path) -> PathBuf {
        let f = dir.join("aic-x.toml");
        std::fs::write(
            &f,
            "kind = \"silicon\"\ndata = \"s.csv\"\n\
             statistic = \"median\"\nprompts_per_concurrency = 20\nmax_prompts = 1000\n\
             [[system]]\ncase = \"aic-x\"\nsystem = \"h100_sxm\"\ngpu = \"h100-sxm\"\n\
             [[engine]]\nbackend = \"sglang\"\nversions = [\"0.5.1\"]\nbundle = \"sglang@0.5.1\"\n\
             [[engine]]\nbackend = \"sglang\"\nbundle = \"sglang@0.5\"\n\
             [[model]]\nhf = \"Qwen/Qwen3-32B\"\nprecision = [\"\", \"bf16\"]\nname = \"qwen3-32b\"\n\
             [[model]]\nhf = \"deepseek-ai/DeepSeek-R1\"\nprecision = [\"fp8\"]\nname = \"deepseek-r1\"\n",
        )
        .unwrap();
        f
    }

    /// Rows become cases with their flags, or are kept with their reason; another system's
    /// rows are not this case's.
    #[test]
    fn rows_expand_into_cases_or_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let s = load(&case_file(dir.path())).unwrap().remove(0);
        let src = "db; silicon_concurrency=64; measured=x";
        let text = format!(
            "{HEAD}a,{src},sglang,0.5.1.post1,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,64,2,1,,0,0,,50.5,9.25\n\
             b,{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1,h100_sxm,fp8,agg,1024,128,fp8,fp8,8,2,1,8,1,16,,1,2\n\
             c,{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1,h100_sxm,fp4,agg,1024,128,nvfp4,nvfp4,8,1,1,8,1,8,,1,2\n\
             d,{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1,h100_sxm,fp8,disagg,1024,128,fp8,fp8,,,,,,,8,1,2\n\
             e,{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1,h100_sxm,fp8,agg,1024,128,fp8,fp8,8,4,1,1,2,2,,1,2\n\
             f,{src},sglang,0.5.9,deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,128,fp8,fp8,8,4,1,1,2,2,,1,2\n\
             g,db,sglang,0.5.9,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,1,1,1,1,1,,1,2\n"
        );
        let e = s.expand_text(&text, Path::new("s.csv"), &|_| true).unwrap();
        assert_eq!((e.rows, e.cases.len()), (6, 2));
        let a = &e.cases[0];
        assert_eq!(a.case.case, "aic-x/a");
        assert_eq!(a.case.deployment.engine_version.as_deref(), Some("sglang@0.5.1"));
        assert_eq!(a.case.deployment.flags, ["--tp", "2", "--max-running-requests", "64"]);
        assert_eq!(a.measured.metrics, [("median_ttft_ms".into(), 50.5), ("median_tpot_ms".into(), 9.25)].into());
        let w = &a.case.workload;
        assert_eq!(
            (w.num_prompts, w.max_concurrency, w.input_len, w.output_len),
            (Some(1000), Some(64), Some(1024), Some(128))
        );
        assert_eq!(a.source(), "github.com/ai-dynamo");
        let b = &e.cases[1];
        assert_eq!(b.case.deployment.engine_version.as_deref(), Some("sglang@0.5"));
        let want =
            ["--tp", "16", "--enable-dp-attention", "--dp-size", "8", "--enable-expert-parallel", "--nnodes", "2"];
        assert_eq!(&b.case.deployment.flags[..8], want);
        assert_eq!(&b.case.deployment.flags[8..], ["--max-running-requests", "64"]);
        let reasons: Vec<(&str, &[String])> = e.not_expressible.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons.iter().any(|(r, ids)| r.starts_with("MoE TP 2 × EP 2") && ids == &["e"]), "{reasons:?}");
        assert!(reasons.iter().any(|(r, ids)| r.contains("no 4-bit") && ids == &["c"]), "{reasons:?}");
        assert!(reasons.iter().any(|(r, ids)| r.starts_with("mode disagg") && ids == &["d"]), "{reasons:?}");
        assert!(reasons.iter().any(|(r, ids)| r.contains("silicon_concurrency") && ids == &["g"]), "{reasons:?}");
        // The keep filter selects rows by name.
        let one = s.expand_text(&text, Path::new("s.csv"), &|n| n == "aic-x/b").unwrap();
        assert_eq!((one.rows, one.cases.len()), (1, 1));
        // A bad number names the file, line and field.
        let bad = format!("{HEAD}a,{src},sglang,0.5.9,Qwen/Qwen3-32B,h100_sxm,,agg,x,128,,,64,2,1,,0,0,,50.5,9.25\n");
        let err = s.expand_text(&bad, Path::new("s.csv"), &|_| true).unwrap_err().to_string();
        assert!(err.contains("s.csv: line 2, field `isl`"), "{err}");
    }

    #[test]
    fn case_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let f = case_file(dir.path());
        assert!(is_silicon_case(&f));
        let body = std::fs::read_to_string(&f).unwrap();
        std::fs::write(&f, body.replace("prompts_per_concurrency = 20", "prompts_per_concurrency = 0")).unwrap();
        assert!(load(&f).unwrap_err().to_string().contains("prompts_per_concurrency"));
        std::fs::write(&f, body.replace("statistic = \"median\"", "statistic = \"p99\"")).unwrap();
        assert!(load(&f).unwrap_err().to_string().contains("aic-x.toml"));
        std::fs::write(&f, body.replace("gpu = \"h100-sxm\"", "gpu = \"h1000\"")).unwrap();
        assert!(load(&f)
            .unwrap_err()
            .to_string()
            .contains("system aic-x: invalid value for --gpu: unknown name `h1000`"));
        std::fs::write(&f, &body).unwrap();
        let e = load(&f).unwrap()[0].csv_path(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("s.csv, which is absent"), "{e}");
    }
}
