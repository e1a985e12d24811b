//! GPU and model profiles: built-in TOML files under `models/` (embedded in the binary) or a
//! user's file with the same fields. Derived quantities the engines use: KV bytes per token,
//! weight bytes, and the KV capacity each engine computes from memory settings.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

const GPUS: &str = include_str!("../models/gpus.toml");
const MODELS: &str = include_str!("../models/models.toml");

/// A GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub memory_gb: f64,
    pub mem_bw_gbps: f64,
    pub bf16_tflops: f64,
    #[serde(default)]
    pub fp8_tflops: Option<f64>,
    /// NVLink, bidirectional GB/s; `None` = PCIe only.
    #[serde(default)]
    pub nvlink_gbps: Option<f64>,
    pub pcie_gbps: f64,
}

impl Gpu {
    /// vLLM's device class: "large" = memory ≥ 70 GiB and not an A100 (ENGINE_SPEC §2.2).
    pub fn vllm_large(&self) -> bool {
        self.memory_gb >= 70.0 && !self.description.to_lowercase().contains("a100") && !self.name.contains("a100")
    }
    /// Device memory in bytes: datasheet "GB" of HBM are binary (an "80 GB" H100 has 80 GiB).
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gb * (1u64 << 30) as f64
    }
    /// One-direction bandwidth between GPUs of one node, bytes/s.
    pub fn link_bytes_per_s(&self) -> f64 {
        self.nvlink_gbps.unwrap_or(self.pcie_gbps) / 2.0 * 1e9
    }
}

/// A model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub name: String,
    #[serde(default)]
    pub hf_id: String,
    pub hidden: u64,
    pub layers: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub intermediate: u64,
    pub vocab: u64,
    pub params_b: f64,
    /// Parameters used per token (MoE); `None` = all.
    #[serde(default)]
    pub active_params_b: Option<f64>,
    #[serde(default)]
    pub experts: Option<u64>,
    #[serde(default)]
    pub experts_per_token: Option<u64>,
    /// Layers that cache KV per token (default: all).
    #[serde(default)]
    pub kv_layers: Option<u64>,
    /// MLA: cached latent width per token per layer (kv_lora_rank + rope dims).
    #[serde(default)]
    pub mla_kv_dim: Option<u64>,
    pub max_context: u64,
}

impl Model {
    /// KV-cache bytes per token (all ranks together) at `dtype_bytes` per element.
    pub fn kv_bytes_per_token(&self, dtype_bytes: u64) -> u64 {
        let layers = self.kv_layers.unwrap_or(self.layers);
        match self.mla_kv_dim {
            Some(d) => layers * d * dtype_bytes,
            None => 2 * layers * self.kv_heads * self.head_dim * dtype_bytes,
        }
    }
    /// Weight bytes at `dtype_bytes` per parameter.
    pub fn weight_bytes(&self, dtype_bytes: u64) -> f64 {
        self.params_b * 1e9 * dtype_bytes as f64
    }
    /// Parameters touched per token (dense: all but the embedding table, which is a lookup).
    pub fn active_matmul_params(&self) -> f64 {
        self.active_params_b.unwrap_or(self.params_b) * 1e9 - (self.vocab * self.hidden) as f64
    }
}

#[derive(Deserialize)]
struct GpuFile {
    gpu: Vec<Gpu>,
}

#[derive(Deserialize)]
struct ModelFile {
    model: Vec<Model>,
}

fn parse<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| Error::invalid(what, e.to_string()))
}

/// The built-in GPUs.
pub fn builtin_gpus() -> Vec<Gpu> {
    parse::<GpuFile>(GPUS, "models/gpus.toml").expect("built-in GPU profiles parse").gpu
}

/// The built-in models.
pub fn builtin_models() -> Vec<Model> {
    parse::<ModelFile>(MODELS, "models/models.toml").expect("built-in model profiles parse").model
}

fn pick<T: Clone>(items: Vec<T>, name: &str, key: impl Fn(&T) -> &str, flag: &str) -> Result<T> {
    let names: Vec<String> = items.iter().map(|x| key(x).to_string()).collect();
    items
        .into_iter()
        .find(|x| key(x).eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::invalid(flag, format!("unknown name `{name}`; known: {}", names.join(", "))))
}

/// The first entry of a user's profile file, through `list` (which picks the table).
fn first_in_file<F: serde::de::DeserializeOwned, T>(
    p: &Path,
    flag: &str,
    table: &str,
    list: impl FnOnce(F) -> Vec<T>,
) -> Result<T> {
    let text = std::fs::read_to_string(p).map_err(|source| Error::Io { path: p.to_path_buf(), error: source })?;
    list(parse::<F>(&text, &p.display().to_string())?)
        .into_iter()
        .next()
        .ok_or_else(|| Error::invalid(flag, format!("{}: no [[{table}]] table", p.display())))
}

/// A GPU by name, or the first entry of a TOML file with `[[gpu]]` tables.
pub fn gpu(name: &str, file: Option<&Path>) -> Result<Gpu> {
    match file {
        Some(p) => first_in_file(p, "--gpu-file", "gpu", |f: GpuFile| f.gpu),
        None => pick(builtin_gpus(), name, |g| &g.name, "--gpu"),
    }
}

/// A model by name, or the first entry of a TOML file with `[[model]]` tables.
pub fn model(name: &str, file: Option<&Path>) -> Result<Model> {
    match file {
        Some(p) => first_in_file(p, "--model-file", "model", |f: ModelFile| f.model),
        None => pick(builtin_models(), name, |m| &m.name, "--model"),
    }
}

/// KV capacity in tokens as vLLM computes it: `gpu_memory_utilization × memory − weights/TP −
/// activation reserve`, over KV bytes per token per rank (ENGINE_SPEC §1.1).
pub fn vllm_kv_tokens(
    gpu: &Gpu,
    model: &Model,
    tp: u64,
    gpu_memory_utilization: f64,
    activation_reserve_gb: f64,
) -> u64 {
    let budget =
        gpu.memory_bytes() * gpu_memory_utilization - model.weight_bytes(2) / tp as f64 - activation_reserve_gb * 1e9;
    let per_token = model.kv_bytes_per_token(2) as f64 / tp as f64;
    (budget / per_token).max(0.0) as u64
}

/// SGLang's defaults that depend on GPU memory (ENGINE_SPEC §3.1): chunked_prefill_size and
/// cuda_graph_max_bs.
pub fn sglang_memory_defaults(gpu: &Gpu, tp: u64) -> (u32, u32) {
    let gb = gpu.memory_gb;
    let big_tp = tp >= 4;
    match gb {
        g if g < 20.0 => (2048, 8),
        g if g < 35.0 => (2048, if big_tp { 80 } else { 24 }),
        g if g < 60.0 => (4096, if big_tp { 160 } else { 32 }),
        g if g < 160.0 => (8192, if big_tp { 512 } else { 256 }),
        _ => (16384, 512),
    }
}

/// SGLang's default `mem_fraction_static` (ENGINE_SPEC §3.1): the GPU memory minus a reserve
/// for activations, CUDA graphs and communication, rounded to 3 decimals.
pub fn sglang_mem_fraction_static(gpu: &Gpu, tp: u64, chunked_prefill_size: u32, cuda_graph_max_bs: u32) -> f64 {
    let gpu_mb = gpu.memory_bytes() / (1u64 << 20) as f64;
    let mut reserved = 512.0
        + (chunked_prefill_size.max(2048) as f64) * 1.5
        + cuda_graph_max_bs as f64 * 2.0
        + tp as f64 / 8.0 * 1024.0;
    if gpu.memory_gb > 60.0 {
        reserved = reserved.max(10240.0);
    }
    (((gpu_mb - reserved) / gpu_mb) * 1000.0).round() / 1000.0
}

/// KV capacity in tokens as SGLang computes it: `mem_fraction_static × memory − weights/TP`,
/// over KV bytes per token per rank.
pub fn sglang_kv_tokens(gpu: &Gpu, model: &Model, tp: u64, mem_fraction_static: f64) -> u64 {
    let budget = gpu.memory_bytes() * mem_fraction_static - model.weight_bytes(2) / tp as f64;
    (budget / (model.kv_bytes_per_token(2) as f64 / tp as f64)).max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_profiles_load_and_derive() {
        let m = model("llama-3.1-8b", None).unwrap();
        assert_eq!(m.kv_bytes_per_token(2), 131_072);
        assert_eq!(model("llama-3.2-11b", None).unwrap().kv_bytes_per_token(2), 131_072);
        assert_eq!(model("qwen2.5-7b", None).unwrap().kv_bytes_per_token(2), 57_344);
        let h100 = gpu("h100-sxm", None).unwrap();
        assert!(h100.vllm_large());
        assert!(!gpu("a100-80gb", None).unwrap().vllm_large());
        assert!(!gpu("l40s", None).unwrap().vllm_large());
        // 80 GiB × 0.9 − 16.06 GB weights − 1 GB activations = 60.25 GB / 131072 B ≈ 459.7k tokens.
        let kv = vllm_kv_tokens(&h100, &m, 1, 0.9, 1.0);
        assert!((459_000..460_500).contains(&kv), "{kv}");
    }

    #[test]
    fn sglang_defaults_follow_the_spec_example() {
        // H100-80GB, TP1: reserved = max(512 + 8192 × 1.5 + 256 × 2 + 128, 10240) = 13440 MB
        // of 81920 MB → 0.836 (the spec's 0.835 uses torch's 81559 MB).
        let h100 = gpu("h100-sxm", None).unwrap();
        let (chunk, graphs) = sglang_memory_defaults(&h100, 1);
        assert_eq!((chunk, graphs), (8192, 256));
        assert_eq!(sglang_mem_fraction_static(&h100, 1, chunk, graphs), 0.836);
        assert_eq!(sglang_memory_defaults(&gpu("a100-40gb", None).unwrap(), 1), (4096, 32));
    }

    #[test]
    fn profile_files_are_read_and_checked() {
        let dir = std::env::temp_dir().join(format!("cachesim-profile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("gpu.toml");
        std::fs::write(
            &good,
            "[[gpu]]\nname = \"mine\"\nmemory_gb = 48\nmem_bw_gbps = 1000\nbf16_tflops = 200\npcie_gbps = 64\n",
        )
        .unwrap();
        assert_eq!(gpu("ignored", Some(&good)).unwrap().name, "mine");
        let empty = dir.join("empty.toml");
        std::fs::write(&empty, "gpu = []\n").unwrap();
        assert!(gpu("x", Some(&empty)).unwrap_err().to_string().contains("no [[gpu]] table"));
        let typo = dir.join("typo.toml");
        std::fs::write(&typo, "[[model]]\nname = \"m\"\nhiden = 1\n").unwrap();
        assert!(model("x", Some(&typo)).unwrap_err().to_string().contains("hiden"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let e = gpu("b300", None).unwrap_err().to_string();
        assert!(e.contains("--gpu") && e.contains("h100-sxm") && e.contains("v100"), "{e}");
        let e = model("gpt-5", None).unwrap_err().to_string();
        assert!(e.contains("llama-3.1-8b"), "{e}");
    }
}
