//! Mooncake traces (JSON Lines): `timestamp` (ms), `input_length`, `output_length`, `hash_ids`
//! (prefix-chained ids of the prompt's blocks, 512 tokens each by default; the last block holds
//! the remainder). The block count must match `ceil(input_length / block)`; this is checked when
//! the workload is built, since it depends on `--trace-block-size`.

use super::json::{handle_bad, jsonl_lines, parse_one, refuse_array};
use super::{check_time, check_tokens, Skipped};
use crate::error::{Location, RecordError};
use rayon::prelude::*;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::ops::Range;

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
    /// Its `hash_ids`, as a range of [`MooncakeTrace::hash_ids`].
    pub ids: Range<usize>,
}

/// The records of a Mooncake trace, their hash ids in one list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MooncakeTrace {
    pub records: Vec<MooncakeRecord>,
    pub hash_ids: Vec<u32>,
}

impl MooncakeTrace {
    /// A record's `hash_ids`.
    pub fn ids(&self, r: &MooncakeRecord) -> &[u32] {
        &self.hash_ids[r.ids.clone()]
    }
}

/// What a parallel task parsed: its lines' records (ids relative to its own list) or errors.
type Part = (Vec<Result<MooncakeRecord, RecordError>>, Vec<u32>);

/// Lines parsed per parallel task.
const CHUNK_LINES: usize = 1024;

/// Parses a Mooncake JSONL document (in parallel); the first bad line (by line number) is the
/// error, or each is skipped and counted when lenient.
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<MooncakeTrace, RecordError> {
    refuse_array(bytes, "Mooncake")?;
    let lines = jsonl_lines(bytes);
    let parts: Vec<Part> = lines
        .par_chunks(CHUNK_LINES)
        .map(|chunk| {
            let mut ids = Vec::new();
            let recs = chunk.iter().map(|&(n, l)| parse_line(n, l, &mut ids)).collect();
            (recs, ids)
        })
        .collect();
    let ids_len = parts.iter().map(|(_, ids)| ids.len()).sum();
    let mut out = MooncakeTrace { records: Vec::with_capacity(lines.len()), hash_ids: Vec::with_capacity(ids_len) };
    for (recs, ids) in parts {
        let base = out.hash_ids.len();
        for r in recs {
            match r {
                Ok(r) => out.records.push(MooncakeRecord { ids: base + r.ids.start..base + r.ids.end, ..r }),
                Err(e) => handle_bad(e, lenient, skipped)?,
            }
        }
        out.hash_ids.extend_from_slice(&ids);
    }
    Ok(out)
}

/// Parses and checks line `n`, appending its hash ids to `ids` (nothing when it is bad).
fn parse_line(n: u64, line: &[u8], ids: &mut Vec<u32>) -> Result<MooncakeRecord, RecordError> {
    let start = ids.len();
    let (timestamp, input_length, output_length) = match parse_fast(line, ids) {
        Some(r) => r,
        None => {
            ids.truncate(start);
            // Whatever the fast path refused, the typed parser reports (with the field path)
            // or accepts (a form it does not take, such as a record written as an array).
            let r: Raw = parse_one(line, Location::Line(n))?;
            for &id in &r.hash_ids {
                let Ok(id) = u32::try_from(id) else {
                    ids.truncate(start);
                    let message = format!("hash id {id} does not fit cachesim's 32-bit token ids");
                    return Err(RecordError { location: Location::Line(n), field: "hash_ids".into(), message });
                };
                ids.push(id);
            }
            (r.timestamp, r.input_length, r.output_length)
        }
    };
    let checked = (|| {
        let timestamp_ms = check_time("timestamp", timestamp)?;
        let input_length = check_tokens("input_length", input_length)?;
        let output_length = check_tokens("output_length", output_length)?;
        if input_length == 0 {
            return Err(("input_length".to_string(), "a request needs at least one prompt token".to_string()));
        }
        if ids.len() == start {
            return Err(("hash_ids".to_string(), "empty list".to_string()));
        }
        Ok(MooncakeRecord { line: n, timestamp_ms, input_length, output_length, ids: start..ids.len() })
    })();
    checked.map_err(|(field, message)| {
        ids.truncate(start);
        RecordError { location: Location::Line(n), field, message }
    })
}

/// Parses a record as [`Raw`] would, but appends its hash ids to `ids` instead of allocating
/// a list per record; `None` on anything unexpected.
fn parse_fast(line: &[u8], ids: &mut Vec<u32>) -> Option<(f64, u64, u64)> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let r = FastRecord(ids).deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(r)
}

struct FastRecord<'a>(&'a mut Vec<u32>);

impl<'de> DeserializeSeed<'de> for FastRecord<'_> {
    type Value = (f64, u64, u64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for FastRecord<'_> {
    type Value = (f64, u64, u64);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Mooncake record")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        let (mut ts, mut input, mut output, mut has_ids) = (None, None, None, false);
        // Keys as raw bytes: matching them needs no UTF-8 check (a key with escapes is refused
        // here and read by the typed parser).
        while let Some(k) = m.next_key::<&[u8]>()? {
            match k {
                b"timestamp" if ts.is_none() => ts = Some(m.next_value()?),
                b"input_length" if input.is_none() => input = Some(m.next_value()?),
                b"output_length" if output.is_none() => output = Some(m.next_value()?),
                b"hash_ids" if !has_ids => {
                    m.next_value_seed(AppendIds(&mut *self.0))?;
                    has_ids = true;
                }
                b"timestamp" | b"input_length" | b"output_length" | b"hash_ids" => {
                    return Err(de::Error::duplicate_field("a Mooncake field"))
                }
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        match (ts, input, output, has_ids) {
            (Some(t), Some(i), Some(o), true) => Ok((t, i, o)),
            _ => Err(de::Error::missing_field("a Mooncake field")),
        }
    }
}

struct AppendIds<'a>(&'a mut Vec<u32>);

impl<'de> DeserializeSeed<'de> for AppendIds<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for AppendIds<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of block ids")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<(), A::Error> {
        while let Some(id) = s.next_element::<u32>()? {
            self.0.push(id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let mut sk = Skipped::default();
        let doc = b"{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47]}\n";
        let r = parse(doc, false, &mut sk).unwrap();
        assert_eq!(r.records[0].input_length, 6955);
        assert_eq!(r.ids(&r.records[0]), [46, 47]);
        let bad = b"{\"timestamp\": 0, \"input_length\": -5, \"output_length\": 52, \"hash_ids\": [1]}";
        let e = parse(bad, false, &mut sk).unwrap_err();
        assert_eq!((e.location, e.field.as_str()), (Location::Line(1), "input_length"));
        let bad = b"{\"timestamp\": -1, \"input_length\": 5, \"output_length\": 52, \"hash_ids\": [1]}";
        assert_eq!(parse(bad, false, &mut sk).unwrap_err().field, "timestamp");
        let bad = b"{\"timestamp\": 1, \"input_length\": 99999999999, \"output_length\": 52, \"hash_ids\": [1]}";
        assert!(parse(bad, false, &mut sk).unwrap_err().message.contains("absurd"));
    }

    fn line(ts: u64, input: u64, ids: &str) -> String {
        format!("{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": 2, \"hash_ids\": [{ids}]}}")
    }

    #[test]
    fn ids_stay_with_their_records_across_parse_chunks_and_skipped_lines() {
        let n = 2 * CHUNK_LINES + 7;
        let mut doc = String::new();
        for i in 0..n {
            match i % 500 {
                // Bad lines are skipped with nothing of theirs kept.
                499 => doc.push_str(&line(i as u64, 0, "9, 9")),
                // The typed parser's forms: an array record, an escaped key.
                7 => doc.push_str(&format!("[{i}, {}, 2, [{i}, {}]]", i + 1, i + 1)),
                8 => doc.push_str(
                    &line(i as u64, i as u64 + 1, &format!("{i}, {}", i + 1)).replace("input_", "input\\u005f"),
                ),
                _ => doc.push_str(&line(i as u64, i as u64 + 1, &format!("{i}, {}", i + 1))),
            }
            doc.push('\n');
        }
        let mut sk = Skipped::default();
        let t = parse(doc.as_bytes(), true, &mut sk).unwrap();
        assert_eq!(sk.total(), (n / 500) as u64);
        assert_eq!(t.records.len() + sk.total() as usize, n);
        for r in &t.records {
            let i = r.line as u32 - 1;
            assert_eq!((r.timestamp_ms, r.input_length), (i as f64, i + 1));
            assert_eq!(t.ids(r), [i, i + 1], "line {}", r.line);
        }
        assert_eq!(t.hash_ids.len(), 2 * t.records.len());
    }

    #[test]
    fn malformed_records_are_named_by_line_and_field() {
        let err = |doc: String| parse(doc.as_bytes(), false, &mut Skipped::default()).unwrap_err();
        let e = err(format!("{}\n{}\n", line(0, 5, "1"), line(1, 5, "4294967296")));
        assert_eq!((e.location, e.field.as_str()), (Location::Line(2), "hash_ids"));
        assert!(e.message.contains("32-bit"), "{}", e.message);
        let e = err(line(0, 5, "1").replace("\"input_length\": 5", "\"input_length\": 5, \"input_length\": 6"));
        assert!(e.message.contains("duplicate field `input_length`"), "{}", e.message);
        let e = err(line(0, 5, "1").replace(", \"hash_ids\": [1]", ""));
        assert!(e.message.contains("missing field `hash_ids`"), "{}", e.message);
        let e = err(line(0, 5, "1, \"x\""));
        assert_eq!(e.field, "hash_ids[1]");
        let e = err(line(0, 5, ""));
        assert_eq!((e.field.as_str(), e.message.as_str()), ("hash_ids", "empty list"));
        let e = err(format!("{} 7", line(0, 5, "1")));
        assert!(e.message.contains("trailing"), "{}", e.message);
    }
}
