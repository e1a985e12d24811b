//! BurstGPT traces: `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`,
//! time stamps in seconds from the start of the first day. Rows with `Response tokens == 0`
//! are failed requests: skipped and counted (as vLLM's loader drops them). Lengths only.

use super::table::read_csv;
use super::{check_time_s, check_tokens, LengthRecord, Skipped};
use crate::error::RecordError;
use serde::Deserialize;

#[derive(Deserialize)]
struct Raw {
    #[serde(rename = "Timestamp")]
    timestamp: f64,
    #[serde(rename = "Model")]
    _model: String,
    #[serde(rename = "Request tokens")]
    request_tokens: u64,
    #[serde(rename = "Response tokens")]
    response_tokens: u64,
}

/// Parses a BurstGPT CSV; arrivals are milliseconds after the first row.
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<Vec<LengthRecord>, RecordError> {
    let mut first: Option<f64> = None;
    let mut failed = 0u64;
    let out = read_csv(bytes, lenient, skipped, |r: Raw| {
        if r.response_tokens == 0 {
            failed += 1;
            return Ok(None);
        }
        let ts = check_time_s("Timestamp", r.timestamp)?;
        let t0 = *first.get_or_insert(ts);
        Ok(Some(LengthRecord {
            arrival_ms: (ts - t0).max(0.0) * 1000.0,
            input_tokens: check_tokens("Request tokens", r.request_tokens)?,
            output_tokens: check_tokens("Response tokens", r.response_tokens)?,
        }))
    })?;
    if failed > 0 {
        *skipped.reasons.entry("failed request (Response tokens = 0)".to_string()).or_insert(0) += failed;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Location;

    #[test]
    fn parses_and_drops_failures() {
        let doc = b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n6.5,GPT-4,1000,0,1000,API log\n7,GPT-4,10,20,30,API log\n";
        let mut sk = Skipped::default();
        let r = parse(doc, false, &mut sk).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].arrival_ms, 2000.0);
        assert_eq!(sk.reasons["failed request (Response tokens = 0)"], 1);
        let bad = b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,-3,18,490,Conversation log\n";
        let e = parse(bad, false, &mut sk).unwrap_err();
        assert_eq!((e.location, e.field.as_str()), (Location::Line(2), "Request tokens"));
    }
}
