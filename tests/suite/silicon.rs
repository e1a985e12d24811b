//! The silicon-sample cases (`calibration/cases/aic.toml`, one case per GPU system) over the data folder's
//! AIConfigurator CSV: every row of the file belongs to exactly one case file (by its system)
//! and is either expanded into a serving case or left out with its reason, in the counts
//! below; a few hand-checked rows give the run arguments and measurements their CSV fields
//! say; and `validate --cases` runs such rows.

use crate::common;

use cachesim::calibrate::silicon::{self, Expanded, LoadedSilicon};
use common::ok;
use std::path::{Path, PathBuf};

fn cases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("calibration/cases")
}

/// Every silicon case file, with its rows expanded from the data folder.
fn expanded(data: &Path) -> Vec<(LoadedSilicon, Expanded)> {
    silicon::load_dir(&cases_dir())
        .unwrap()
        .into_iter()
        .map(|s| {
            let e = s.expand(Some(data), &|_| true).unwrap_or_else(|e| panic!("{e}"));
            (s, e)
        })
        .collect()
}

/// Rows left out for reasons starting with `prefix`.
fn left(e: &Expanded, prefix: &str) -> usize {
    e.not_expressible.iter().filter(|(k, _)| k.starts_with(prefix)).map(|(_, v)| v.len()).sum()
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn every_row_is_a_case_or_left_out_with_its_reason() {
    let Some(data) = common::data_dir() else { return };
    let all = expanded(&data);
    let names: Vec<&str> = all.iter().map(|(s, _)| s.case.case.as_str()).collect();
    assert_eq!(names, ["aic-b200", "aic-b300", "aic-gb200", "aic-gb300", "aic-h100"]);
    // (rows, expressible, disagg, 4-bit, model not in the catalog, mixed MoE TP × EP, no concurrency)
    let want = [
        (2052, 299, 358, 888, 443, 64, 0),
        (381, 10, 126, 122, 123, 0, 0),
        (627, 35, 550, 42, 0, 0, 0),
        (277, 0, 277, 0, 0, 0, 0),
        (917, 699, 107, 69, 30, 4, 8),
    ];
    let mut total = 0;
    for ((s, e), want) in all.iter().zip(want) {
        let got = (
            e.rows,
            e.cases.len(),
            left(e, "mode disagg"),
            left(e, "precision"),
            left(e, "model "),
            left(e, "MoE TP"),
            left(e, "silicon_data_source states no"),
        );
        assert_eq!(got, want, "{}: {:?}", s.case.case, e.not_expressible.keys().collect::<Vec<_>>());
        let counted = e.cases.len() + e.not_expressible.values().map(Vec::len).sum::<usize>();
        assert_eq!(counted, e.rows, "{}: every row counted once", s.case.case);
        total += e.rows;
    }
    // The README: 4,254 rows, H200's removed.
    assert_eq!(total, 4254);
}

/// The expanded case of row `id` of case file `case`.
fn row(all: &[(LoadedSilicon, Expanded)], case: &str, id: &str) -> cachesim::calibrate::case::LoadedCase {
    let (_, e) = all.iter().find(|(s, _)| s.case.case == case).unwrap();
    let name = format!("{case}/{id}");
    e.cases.iter().find(|c| c.case.case == name).unwrap_or_else(|| panic!("{name}: not expanded")).clone()
}

#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn hand_checked_rows_give_their_run_arguments() {
    let Some(data) = common::data_dir() else { return };
    let all = expanded(&data);
    let words = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let tail = |c: u32| {
        words(&[
            "--request-rate",
            "inf",
            "--max-concurrency",
            &c.to_string(),
            "--seed",
            "0",
            "--report-style",
            "sglang",
        ])
    };
    // TensorRT-LLM 1.0.0rc3, Llama-3.1-8B-Instruct (bf16) on one H100, batch 64, 4096/128 at
    // concurrency 64: 8192 tokens a step cover a prompt and the batch.
    let c = row(&all, "aic-h100", "meta_llama_llama_3_1_8b_instruct_meta_llama_llama_3_1_8b_instruct_h100_sxm_trtllm_agg_4096x128_c64_tp1_epnone_34");
    let mut want = words(&["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--engine-version", "trtllm@1.0"]);
    want.extend(words(&["--tp", "1", "--max-num-seqs", "64", "--max-num-batched-tokens", "8192"]));
    want.extend(tail(64));
    assert_eq!(c.run_args(Some(&data)).unwrap(), want);
    let w = &c.case.workload;
    assert_eq!(
        (w.num_prompts, w.input_len, w.output_len, w.dataset.as_str()),
        (Some(1280), Some(4096), Some(128), "random")
    );
    assert_eq!(c.measured.get("median_ttft_ms"), Some(618.3905906820313));
    assert_eq!(c.measured.get("median_tpot_ms"), Some(64.32067165));
    assert_eq!(c.source(), "github.com/ai-dynamo");
    // TensorRT-LLM 1.2.0rc6.post3, DeepSeek-R1 FP8 on 8 B200s: attention DP 8 (TP 1 each), EP 8,
    // batch 32 per rank.
    let c = row(&all, "aic-b200", "2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_agg_1024x8192_c256_tp8_0_ep8_0_1022");
    let mut want = words(&["--gpu", "b200", "--model", "deepseek-r1", "--engine-version", "trtllm@1.0", "--tp", "8"]);
    want.extend(words(&["--enable-dp-attention", "--dp-size", "8", "--enable-expert-parallel"]));
    want.extend(words(&["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]));
    want.extend(tail(256));
    assert_eq!(c.run_args(Some(&data)).unwrap(), want);
    assert_eq!(c.case.workload.num_prompts, Some(5120));
    // SGLang 0.5.1.post1, Qwen3-32B (bf16) over 8 H100s: the 0.5.1 bundle, SGLang's cap flag.
    let c = row(&all, "aic-h100", "qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_4096x128_c64_tp8_epnone_60");
    let mut want = words(&["--gpu", "h100-sxm", "--model", "qwen3-32b", "--engine-version", "sglang@0.5.1"]);
    want.extend(words(&["--tp", "8", "--max-running-requests", "64"]));
    want.extend(tail(64));
    assert_eq!(c.run_args(Some(&data)).unwrap(), want);
}

/// `validate --cases` over one row: the row's two metrics, its source, and the case files'
/// other rows not run.
#[test]
#[cfg_attr(cachesim_no_data, ignore = "needs the real data beside the repository (../shared)")]
fn validate_runs_named_rows() {
    let Some(data) = common::data_dir() else { return };
    let id = "aic-h100/qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_sglang_agg_4096x128_c64_tp8_epnone_60";
    let cases = cases_dir();
    let out = ok(&[
        "validate",
        "--cases-dir",
        cases.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--cases",
        id,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = v["rows"].as_array().unwrap();
    let metrics: Vec<&str> = rows.iter().map(|r| r["metric"].as_str().unwrap()).collect();
    assert_eq!(metrics, ["median_ttft_ms", "median_tpot_ms"]);
    assert!(rows.iter().all(|r| r["case"] == id && r["predicted"].as_f64().unwrap() > 0.0), "{rows:?}");
    assert_eq!(v["cases"][0]["source"], "github.com/ai-dynamo");
    assert_eq!(v["cases"][0]["gpu"], "h100-sxm");
    assert!(v["not_expressible"].as_array().unwrap().is_empty());
}
