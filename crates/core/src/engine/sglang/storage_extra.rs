//! `--hicache-storage-backend-extra-config`: SGLang's JSON (or `@file.json` / `@file.toml`) of a
//! storage backend's extra settings (`HybridCacheController.parse_storage_backend_extra_config`,
//! `mem_cache/hybrid_cache/hybrid_cache_controller.py`, 0.5.23), read into the keys cachesim
//! models: the scheduling keys the controller pops (`prefetch_threshold`,
//! `prefetch_timeout_base`, `prefetch_timeout_per_ki_token`, `hicache_storage_pass_prefix_keys`)
//! and the file backend's cap (`max_size`, `LRUFileEvictor._load_config`,
//! `mem_cache/storage/file/lru_file_evictor.py`). Keys that only say where the backend lives
//! (`file_storage_path`, Mooncake's addresses and transport) change nothing simulated and are
//! read past; any other key is refused by name, as not modelled.

use serde_json::Value;

/// The extra settings given, each `None` where SGLang's default holds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StorageExtra {
    /// `prefetch_threshold`: the least lookup and hit, tokens.
    pub prefetch_threshold: Option<u64>,
    /// `prefetch_timeout_base`, seconds.
    pub prefetch_timeout_base_s: Option<f64>,
    /// `prefetch_timeout_per_ki_token`, seconds per 1,024 tokens.
    pub prefetch_timeout_per_ki_token_s: Option<f64>,
    /// The file backend's `max_size`, bytes one rank's files may take.
    pub max_size_bytes: Option<u64>,
}

/// Keys that say where a backend lives or how it connects: nothing simulated depends on them.
const WHERE_KEYS: [&str; 10] = [
    "file_storage_path",
    "master_server_address",
    "client_server_address",
    "metadata_server",
    "protocol",
    "device_name",
    "local_hostname",
    "local_buffer_size",
    "standalone_storage",
    "check_server",
];

/// The keys read into [`StorageExtra`].
const MODELLED: &str = "prefetch_threshold, prefetch_timeout_base, prefetch_timeout_per_ki_token, \
                        hicache_storage_pass_prefix_keys, max_size";

/// Reads the flag's value: JSON text, or `@path` to a `.json` or `.toml` file (SGLang also reads
/// YAML; not here).
pub fn parse(arg: &str) -> Result<StorageExtra, String> {
    let value: Value = match arg.strip_prefix('@') {
        Some(path) => {
            let ext = std::path::Path::new(path).extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
            let toml = match ext.as_deref() {
                Some("json") => false,
                Some("toml") => true,
                _ => return Err(format!("{path}: a .json or .toml file (SGLang's YAML is not read here)")),
            };
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            if toml {
                let t: toml::Table = text.parse().map_err(|e| format!("{path}: {e}"))?;
                serde_json::to_value(t).map_err(|e| format!("{path}: {e}"))?
            } else {
                serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?
            }
        }
        None => serde_json::from_str(arg).map_err(|e| format!("not JSON: {e}"))?,
    };
    let Value::Object(map) = value else { return Err("a JSON object of settings".to_string()) };
    let mut out = StorageExtra::default();
    for (k, v) in &map {
        let number = |min: f64| {
            v.as_f64()
                .filter(|x| x.is_finite() && *x >= min && *x <= 1e9)
                .ok_or_else(|| format!("{k}: {v} must be a number from {min} to 1e9"))
        };
        match k.as_str() {
            // SGLang: `must be int`.
            "prefetch_threshold" => {
                let t = v
                    .as_u64()
                    .filter(|&t| t <= 1 << 40)
                    .ok_or_else(|| format!("{k}: {v} must be a whole number of tokens"))?;
                out.prefetch_threshold = Some(t);
            }
            "prefetch_timeout_base" => out.prefetch_timeout_base_s = Some(number(0.0)?),
            "prefetch_timeout_per_ki_token" => out.prefetch_timeout_per_ki_token_s = Some(number(0.0)?),
            // Passes the prefix's page keys to backends that key on them: not the file or
            // Mooncake backends' concern.
            "hicache_storage_pass_prefix_keys" => {
                v.as_bool().ok_or_else(|| format!("{k}: {v} must be true or false"))?;
            }
            "max_size" => out.max_size_bytes = size(v).map_err(|e| format!("{k}: {e}"))?,
            k if WHERE_KEYS.contains(&k) => {}
            k => return Err(format!("`{k}` is not modelled (cachesim reads {MODELLED})")),
        }
    }
    Ok(out)
}

/// `_parse_size_to_bytes`: a number of bytes, or a text with an SI (`k`, `M`, `G`, `T`) or IEC
/// (`Ki`, `Mi`, `Gi`, `Ti`, whole numbers only) suffix (`human_readable_int`); 0 or empty: no
/// cap. SGLang disables the cap on a size it cannot read; cachesim refuses it.
fn size(v: &Value) -> Result<Option<u64>, String> {
    let bytes = match v {
        Value::Number(n) => n.as_f64().filter(|b| b.is_finite() && *b >= 0.0),
        Value::String(s) => {
            let s = s.trim();
            if s.is_empty() || s == "0" {
                return Ok(None);
            }
            let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
            let (num, suffix) = s.split_at(split);
            let mult = match suffix {
                "" => Some(1.0),
                "k" => Some(1e3),
                "M" => Some(1e6),
                "G" => Some(1e9),
                "T" => Some(1e12),
                "Ki" if !num.contains('.') => Some(1024.0),
                "Mi" if !num.contains('.') => Some(1024f64.powi(2)),
                "Gi" if !num.contains('.') => Some(1024f64.powi(3)),
                "Ti" if !num.contains('.') => Some(1024f64.powi(4)),
                _ => None,
            };
            mult.zip(num.parse::<f64>().ok()).map(|(m, n)| n * m)
        }
        _ => None,
    };
    match bytes {
        Some(b) if b < 1.0 => Ok(None),
        Some(b) if b <= 1e18 => Ok(Some(b as u64)),
        _ => Err(format!("{v} is not a size (bytes, or e.g. \"200G\", \"64Gi\")")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_keys_sglang_pops_and_the_file_cap() {
        let e = parse(
            r#"{"prefetch_threshold": 512, "prefetch_timeout_base": 2, "max_size": "64Gi", "file_storage_path": "/x"}"#,
        )
        .unwrap();
        assert_eq!(e.prefetch_threshold, Some(512));
        assert_eq!(e.prefetch_timeout_base_s, Some(2.0));
        assert_eq!(e.max_size_bytes, Some(64 << 30));
        assert_eq!(parse(r#"{"max_size": "200G"}"#).unwrap().max_size_bytes, Some(200_000_000_000));
        assert_eq!(parse(r#"{"max_size": 0}"#).unwrap().max_size_bytes, None);
        assert_eq!(parse("{}").unwrap(), StorageExtra::default());
    }

    #[test]
    fn refuses_what_it_cannot_read_or_does_not_model() {
        for (bad, why) in [
            ("[1]", "object"),
            ("{", "not JSON"),
            (r#"{"prefetch_threshold": 1.5}"#, "whole number"),
            (r#"{"prefetch_timeout_base": -1}"#, "number from"),
            (r#"{"max_size": "1.5Gi"}"#, "not a size"),
            (r#"{"max_size": "lots"}"#, "not a size"),
            (r#"{"hicache_storage_pass_prefix_keys": 1}"#, "true or false"),
            (r#"{"eviction_ratio": 0.5}"#, "not modelled"),
            ("@missing.json", "missing.json"),
            ("@settings.yaml", ".json or .toml"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn reads_a_toml_file() {
        let dir = std::env::temp_dir().join(format!("cachesim-extra-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("extra.toml");
        std::fs::write(&path, "prefetch_threshold = 1024\nmax_size = \"1T\"\n").unwrap();
        let e = parse(&format!("@{}", path.display())).unwrap();
        assert_eq!((e.prefetch_threshold, e.max_size_bytes), (Some(1024), Some(1_000_000_000_000)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
