//! Azure LLM inference traces (2023 and 2024 share the schema):
//! `TIMESTAMP,ContextTokens,GeneratedTokens`, with `YYYY-MM-DD HH:MM:SS.fffffff` invocation times.
//! Lengths only: prompts carry no content, so the workload gives them unique tokens.

use super::table::read_csv;
use super::{check_tokens, LengthRecord, Skipped};
use crate::error::RecordError;
use serde::Deserialize;

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "TIMESTAMP")]
    timestamp: String,
    #[serde(rename = "ContextTokens")]
    context_tokens: u64,
    #[serde(rename = "GeneratedTokens")]
    generated_tokens: u64,
}

/// An Azure time stamp (fraction of any length up to 9 digits).
pub fn parse_timestamp(s: &str) -> Option<chrono::NaiveDateTime> {
    chrono::NaiveDateTime::parse_from_str(s.trim(), "%Y-%m-%d %H:%M:%S%.f").ok()
}

/// Parses an Azure CSV; arrivals are milliseconds after the first row.
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<Vec<LengthRecord>, RecordError> {
    let mut first: Option<chrono::NaiveDateTime> = None;
    read_csv(bytes, lenient, skipped, |r: Raw| {
        let ts = parse_timestamp(&r.timestamp).ok_or_else(|| {
            ("TIMESTAMP".to_string(), format!("`{}` is not a `YYYY-MM-DD HH:MM:SS.fffffff` time", r.timestamp))
        })?;
        let t0 = *first.get_or_insert(ts);
        let since_ns = (ts - t0)
            .num_nanoseconds()
            .filter(|&ns| ns >= 0)
            .ok_or_else(|| ("TIMESTAMP".to_string(), "earlier than the first row (or years after it)".to_string()))?;
        Ok(Some(LengthRecord {
            arrival_ms: since_ns as f64 / 1e6,
            input_tokens: check_tokens("ContextTokens", r.context_tokens)?,
            output_tokens: check_tokens("GeneratedTokens", r.generated_tokens)?,
        }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;

    #[test]
    fn parses_rows_and_relative_times() {
        let doc = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.99,396,109\n";
        let mut sk = Skipped::default();
        let r = parse(doc, false, &mut sk).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].arrival_ms, 0.0);
        assert!((r[1].arrival_ms - 4309.41).abs() < 1e-3, "{}", r[1].arrival_ms);
        assert_eq!((r[1].input_tokens, r[1].output_tokens), (396, 109));
    }

    #[test]
    fn errors_name_line_and_column() {
        let mut sk = Skipped::default();
        let doc =
            b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47,abc,1\n";
        let e = parse(doc, false, &mut sk).unwrap_err();
        assert_eq!((e.location, e.field.as_str()), (Location::Line(3), "ContextTokens"));
        let doc =
            b"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n2023-11-16 18:15:47,1\n2023-11-16 18:15:47,1,1\n";
        let e = parse(doc, false, &mut sk).unwrap_err();
        assert_eq!((e.location, e.field.as_str()), (Location::Line(2), "TIMESTAMP"));
        let ok = parse(doc, true, &mut sk).unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(sk.total(), 2);
    }
}
