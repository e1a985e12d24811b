//! Trace files → typed records. One module per format (ShareGPT, Mooncake, Azure LLM 2023,
//! BurstGPT, native JSONL); this file owns format detection, transparent `.gz` reading and the
//! strict/lenient policy: a bad record is an error naming file, location and field, or — with
//! `lenient` — skipped and counted by reason.

pub mod azure;
pub mod burstgpt;
pub mod json;
pub mod mooncake;
pub mod native;
pub mod sharegpt;
pub mod table;

use crate::error::{Error, RecordError, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest prompt or output length accepted, in tokens (anything above is surely a typo).
pub const MAX_TOKENS_PER_REQUEST: u64 = 1 << 24;

/// Trace formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// ShareGPT JSON array or JSONL of `{id, conversations:[{from, value}]}`.
    Sharegpt,
    /// Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
    Mooncake,
    /// Azure LLM inference 2023 CSV: `TIMESTAMP,ContextTokens,GeneratedTokens`.
    Azure,
    /// BurstGPT CSV: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`.
    Burstgpt,
    /// cachesim's own JSONL: `prompt` or `prompt_ids`, `output_len`, `timestamp_ms`, `session`.
    Native,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Sharegpt => "sharegpt",
            Format::Mooncake => "mooncake",
            Format::Azure => "azure",
            Format::Burstgpt => "burstgpt",
            Format::Native => "native",
        })
    }
}

/// Records skipped under `--lenient`, counted by reason, with a few examples.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Skipped {
    /// Reason (field and message) → number of records.
    pub reasons: BTreeMap<String, u64>,
    /// The first few full messages, with their locations.
    pub examples: Vec<String>,
}

impl Skipped {
    /// Counts one bad record.
    pub fn add(&mut self, err: &RecordError) {
        let reason = if err.field.is_empty() || err.field == "." {
            err.message.clone()
        } else {
            format!("field `{}`: {}", err.field, err.message)
        };
        self.add_reason(reason);
        if self.examples.len() < 5 {
            self.examples.push(err.to_string());
        }
    }

    /// Counts one record dropped for a documented reason (not a malformed record).
    pub fn add_reason(&mut self, reason: impl Into<String>) {
        *self.reasons.entry(reason.into()).or_insert(0) += 1;
    }

    /// Number of records skipped.
    pub fn total(&self) -> u64 {
        self.reasons.values().sum()
    }
}

/// Options of [`read`].
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Force a format instead of detecting it.
    pub format: Option<Format>,
    /// Skip and count bad records instead of stopping at the first.
    pub lenient: bool,
}

/// Records of one trace, by format.
#[derive(Debug)]
pub enum Records {
    Sharegpt(Vec<sharegpt::Conversation>),
    Mooncake(mooncake::MooncakeTrace),
    /// Length-only records (Azure, BurstGPT).
    Lengths(Vec<LengthRecord>),
    Native(Vec<native::NativeRecord>),
}

/// A request known only by its lengths (and arrival time).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthRecord {
    pub arrival_ms: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// A trace file read into records.
#[derive(Debug)]
pub struct TraceFile {
    pub path: PathBuf,
    pub format: Format,
    pub records: Records,
    pub skipped: Skipped,
}

impl TraceFile {
    /// Number of records read.
    pub fn records_len(&self) -> usize {
        match &self.records {
            Records::Sharegpt(r) => r.len(),
            Records::Mooncake(r) => r.records.len(),
            Records::Lengths(r) => r.len(),
            Records::Native(r) => r.len(),
        }
    }
}

/// Reads the whole file, decompressing gzip when the name ends in `.gz` or the content is gzip.
pub fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let io = |source| Error::Io { path: path.to_path_buf(), source };
    let raw = std::fs::read(path).map_err(io)?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::with_capacity(raw.len() * 4);
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).map_err(io)?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Reads a trace file of any supported format.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<TraceFile> {
    parse(path, &read_bytes(path)?, opts)
}

/// Parses trace content already in memory; `path` names it in errors and reports.
pub fn parse(path: &Path, bytes: &[u8], opts: &ReadOptions) -> Result<TraceFile> {
    // A UTF-8 byte-order mark (common in CSV exported on Windows) is not content.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let format = match opts.format {
        Some(f) => f,
        None => detect(bytes).map_err(|why| Error::UnknownFormat { path: path.to_path_buf(), why })?,
    };
    let mut skipped = Skipped::default();
    let rec_err = |error| Error::Record { path: path.to_path_buf(), error };
    let records = match format {
        Format::Sharegpt => Records::Sharegpt(sharegpt::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Mooncake => Records::Mooncake(mooncake::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Azure => Records::Lengths(azure::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Burstgpt => Records::Lengths(burstgpt::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Native => Records::Native(native::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
    };
    Ok(TraceFile { path: path.to_path_buf(), format, records, skipped })
}

/// Guesses the format from the content: JSON keys of the first record, or the CSV header.
pub fn detect(bytes: &[u8]) -> std::result::Result<Format, String> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace()).ok_or("the file is empty")?;
    let body = &bytes[start..];
    let first_object: &[u8] = match body[0] {
        b'[' => {
            let inner = &body[1..];
            let s = inner.iter().position(|b| !b.is_ascii_whitespace()).ok_or("empty JSON array")?;
            &inner[s..]
        }
        b'{' => body,
        _ => {
            let header = body.split(|&b| b == b'\n').next().unwrap_or_default();
            let header = String::from_utf8_lossy(header);
            let cols: Vec<&str> = header.trim().split(',').map(str::trim).collect();
            return if cols.first() == Some(&"TIMESTAMP") && cols.contains(&"ContextTokens") {
                Ok(Format::Azure)
            } else if cols.first() == Some(&"Timestamp") && cols.contains(&"Request tokens") {
                Ok(Format::Burstgpt)
            } else {
                Err(format!("neither JSON nor a known CSV header (first line: `{}`)", truncate(&header, 80)))
            };
        }
    };
    // Parse just the first object as a map of raw values to look at its keys.
    let mut stream =
        serde_json::Deserializer::from_slice(first_object).into_iter::<BTreeMap<String, serde::de::IgnoredAny>>();
    let keys = match stream.next() {
        Some(Ok(m)) => m,
        Some(Err(e)) => return Err(format!("the first record is not a JSON object ({e})")),
        None => return Err("no JSON record".into()),
    };
    if keys.contains_key("conversations") || keys.contains_key("conversation") {
        Ok(Format::Sharegpt)
    } else if keys.contains_key("hash_ids") {
        Ok(Format::Mooncake)
    } else if keys.contains_key("prompt") || keys.contains_key("prompt_ids") {
        Ok(Format::Native)
    } else {
        let names: Vec<&str> = keys.keys().map(String::as_str).collect();
        Err(format!("unrecognised keys in the first record: {}", names.join(", ")))
    }
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Checks a token count read from a trace: at most [`MAX_TOKENS_PER_REQUEST`].
pub fn check_tokens(field: &str, value: u64) -> std::result::Result<u32, (String, String)> {
    if value > MAX_TOKENS_PER_REQUEST {
        Err((field.to_string(), format!("{value} tokens is absurd (limit {MAX_TOKENS_PER_REQUEST})")))
    } else {
        Ok(value as u32)
    }
}

/// Checks a time stamp: finite and not negative.
pub fn check_time(field: &str, value: f64) -> std::result::Result<f64, (String, String)> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err((field.to_string(), format!("{value} is not a time (must be finite and ≥ 0)")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_every_format() {
        assert_eq!(detect(b"[{\"id\":\"x\",\"conversations\":[]}]"), Ok(Format::Sharegpt));
        assert_eq!(detect(b"{\"conversations\":[]}\n"), Ok(Format::Sharegpt));
        assert_eq!(
            detect(b"{\"timestamp\":0,\"input_length\":3,\"output_length\":1,\"hash_ids\":[1]}"),
            Ok(Format::Mooncake)
        );
        assert_eq!(detect(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"), Ok(Format::Azure));
        assert_eq!(
            detect(b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"),
            Ok(Format::Burstgpt)
        );
        assert_eq!(detect(b" {\"prompt\":\"hi\",\"output_len\":3}"), Ok(Format::Native));
        assert!(detect(b"").is_err());
        assert!(detect(b"a,b,c\n1,2,3").unwrap_err().contains("a,b,c"));
        assert!(detect(b"{\"x\":1}").unwrap_err().contains("x"));
        assert!(detect(b"[1, 2]").unwrap_err().contains("not a JSON object"));
    }

    #[test]
    fn byte_order_mark_is_ignored() {
        let doc = b"\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n";
        let t = parse(Path::new("bom.csv"), doc, &ReadOptions::default()).unwrap();
        assert_eq!(t.format, Format::Azure);
        assert!(matches!(&t.records, Records::Lengths(r) if r.len() == 1));
    }
}
