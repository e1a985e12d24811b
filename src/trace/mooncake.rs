//! Mooncake traces (JSON Lines): `timestamp` (ms), `input_length`, `output_length`, `hash_ids`
//! (prefix-chained ids of the prompt's blocks, 512 tokens each by default; the last block holds
//! the remainder). The block count must match `ceil(input_length / block)`; this is checked when
//! the workload is built, since it depends on `--trace-block-size`.

use super::json::read_jsonl;
use super::{check_time, check_tokens, Skipped};
use crate::error::RecordError;
use serde::Deserialize;

#[derive(Deserialize)]
struct Raw {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// One Mooncake request.
#[derive(Debug, Clone, PartialEq)]
pub struct MooncakeRecord {
    /// 1-based line in the file (for later errors).
    pub line: u64,
    pub timestamp_ms: f64,
    pub input_length: u32,
    pub output_length: u32,
    pub hash_ids: Vec<u64>,
}

/// Parses a Mooncake JSONL document.
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<Vec<MooncakeRecord>, RecordError> {
    read_jsonl(bytes, lenient, skipped, |line, r: Raw| {
        let timestamp_ms = check_time("timestamp", r.timestamp)?;
        let input_length = check_tokens("input_length", r.input_length)?;
        let output_length = check_tokens("output_length", r.output_length)?;
        if input_length == 0 {
            return Err(("input_length".to_string(), "a request needs at least one prompt token".to_string()));
        }
        if r.hash_ids.is_empty() {
            return Err(("hash_ids".to_string(), "empty list".to_string()));
        }
        Ok(MooncakeRecord { line, timestamp_ms, input_length, output_length, hash_ids: r.hash_ids })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;

    #[test]
    fn parses_and_validates() {
        let mut sk = Skipped::default();
        let doc = b"{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47]}\n";
        let r = parse(doc, false, &mut sk).unwrap();
        assert_eq!(r[0].input_length, 6955);
        assert_eq!(r[0].hash_ids, vec![46, 47]);
        let bad = b"{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 52, \"hash_ids\": [1]}";
        let e = parse(bad, false, &mut sk).unwrap_err();
        assert_eq!((e.location, e.field.as_str()), (Location::Line(1), "input_length"));
        let bad = b"{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 52, \"hash_ids\": [1]}";
        assert_eq!(parse(bad, false, &mut sk).unwrap_err().field, "timestamp");
        let bad = b"{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 52, \"hash_ids\": [1]}";
        assert!(parse(bad, false, &mut sk).unwrap_err().message.contains("absurd"));
    }
}
