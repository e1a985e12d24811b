//! Trace files → typed records. One module per format (ShareGPT, Mooncake, Azure LLM 2023,
//! BurstGPT, native JSONL); this file owns format detection and the strict/lenient policy: a bad
//! record is an error naming file, location and field, or — with `lenient` — skipped and counted
//! by reason. Reading the bytes (`.gz`, the size caps, blank runs left out) is [`source`]'s.

pub mod azure;
pub mod burstgpt;
pub mod json;
pub mod mooncake;
pub mod native;
pub mod sharegpt;
pub mod sniff;
pub mod source;
pub mod table;

use crate::error::{Error, Location, RecordError, Result};
use crate::messages::{self, Syntax};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub use source::{read_content, Content, DEFAULT_MAX_TRACE_BYTES, MAX_LINE_BYTES, PROBE_BYTES};

/// Largest prompt or output length accepted, in tokens (anything above is surely a typo).
pub const MAX_TOKENS_PER_REQUEST: u64 = 1 << 24;

/// Token ids a trace may carry lie below this; at and above it the id space is cachesim's own
/// (synthetic runs and template markers, placed by [`crate::workload`]).
pub const RESERVED_TOKEN_BASE: u32 = 1 << 30;

/// Trace formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
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
    /// The errors behind `examples`, to relocate them ([`parse_content`]).
    #[serde(skip)]
    example_errors: Vec<RecordError>,
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
            self.example_errors.push(err.clone());
        }
    }

    /// Gives the examples the file's own locations (where blank runs were left out).
    fn relocate(&mut self, elisions: &source::Elisions) {
        for (text, err) in self.examples.iter_mut().zip(&mut self.example_errors) {
            err.location = elisions.locate(&err.location);
            *text = err.to_string();
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
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Force a format instead of detecting it.
    pub format: Option<Format>,
    /// Skip and count bad records instead of stopping at the first.
    pub lenient: bool,
    /// Most bytes of content a trace may hold once decompressed (`--max-trace-bytes`).
    pub max_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self { format: None, lenient: false, max_bytes: DEFAULT_MAX_TRACE_BYTES }
    }
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

/// Reads a trace file of any supported format.
pub fn read(path: &Path, opts: &ReadOptions) -> Result<TraceFile> {
    parse_content(path, &read_content(path, opts.max_bytes)?, opts)
}

/// Parses content read by [`read_content`]: errors and skipped examples name the file's own
/// lines and byte offsets.
pub fn parse_content(path: &Path, content: &Content, opts: &ReadOptions) -> Result<TraceFile> {
    let relocate = |e| match e {
        Error::Record { path, mut error } => {
            error.location = content.elisions.locate(&error.location);
            Error::Record { path, error }
        }
        e => e,
    };
    let mut t = parse(path, &content.bytes, opts).map_err(relocate)?;
    if !content.elisions.is_empty() {
        t.skipped.relocate(&content.elisions);
        match &mut t.records {
            Records::Native(r) => r.iter_mut().for_each(|r| r.line = content.elisions.line(r.line)),
            Records::Mooncake(m) => m.records.iter_mut().for_each(|r| r.line = content.elisions.line(r.line)),
            // ShareGPT records hold no position; CSV content is stored as it is.
            Records::Sharegpt(_) | Records::Lengths(_) => {}
        }
    }
    Ok(t)
}

/// Parses trace content already in memory; `path` names it in errors and reports.
pub fn parse(path: &Path, bytes: &[u8], opts: &ReadOptions) -> Result<TraceFile> {
    // A UTF-8 byte-order mark (common in CSV exported on Windows) is not content.
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if let Some(what) = sniff::not_text(bytes) {
        return Err(Error::NotText { path: path.to_path_buf(), what });
    }
    let format = match opts.format {
        Some(f) => f,
        None => detect(bytes).map_err(|why| Error::UnknownFormat { path: path.to_path_buf(), why })?,
    };
    let mut skipped = Skipped::default();
    let rec_err = |error| Error::Record { path: path.to_path_buf(), error: with_odd_byte(bytes, error) };
    let records = match format {
        Format::Sharegpt => Records::Sharegpt(sharegpt::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Mooncake => Records::Mooncake(mooncake::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Azure => Records::Lengths(azure::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Burstgpt => Records::Lengths(burstgpt::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
        Format::Native => Records::Native(native::parse(bytes, opts.lenient, &mut skipped).map_err(rec_err)?),
    };
    Ok(TraceFile { path: path.to_path_buf(), format, records, skipped })
}

/// `error` with the odd byte on its line named first (a NUL, a Ctrl-Z, a CR-only line end, a
/// byte-order mark of a joined file: [`sniff::odd_byte`]), when its line holds one.
fn with_odd_byte(bytes: &[u8], mut error: RecordError) -> RecordError {
    let Location::Line(n) = error.location else { return error };
    if let Some((at, what, fix)) = sniff::line(bytes, n).and_then(sniff::odd_byte) {
        error.message = format!("{what} at column {}: {fix} ({})", at + 1, error.message);
    }
    error
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
        Some(Err(e)) => {
            return Err(format!(
                "the first record is not a JSON object ({})",
                messages::plain(&e.to_string(), Syntax::Json)
            ))
        }
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

/// The first `n` characters of `s`, control characters escaped (a binary file's first line must
/// not reach the terminal raw).
fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] }).collect()
}

/// Checks a token count read from a trace: at most [`MAX_TOKENS_PER_REQUEST`].
pub fn check_tokens(field: &str, value: u64) -> std::result::Result<u32, (String, String)> {
    if value > MAX_TOKENS_PER_REQUEST {
        Err((field.to_string(), format!("{value} tokens is absurd (limit {MAX_TOKENS_PER_REQUEST})")))
    } else {
        Ok(value as u32)
    }
}

/// Largest time stamp accepted, in milliseconds: 1e14 ms is about 3,170 years, so Unix-epoch
/// milliseconds (about 1.8e12 today) pass and microseconds or nanoseconds by mistake do not.
pub const MAX_TIME_MS: f64 = 1e14;

/// Checks a time stamp in milliseconds: finite, not negative, at most [`MAX_TIME_MS`].
pub fn check_time(field: &str, value: f64) -> std::result::Result<f64, (String, String)> {
    if !(value.is_finite() && value >= 0.0) {
        Err((field.to_string(), format!("{value} is not a time (must be finite and ≥ 0)")))
    } else if value > MAX_TIME_MS {
        Err((field.to_string(), format!("{value:e} ms is absurd (limit {MAX_TIME_MS:e} ms, about 3,170 years)")))
    } else {
        // −0 is 0 (`-0.0 + 0.0` is `+0.0`): a zero's sign means nothing in a time stamp, and
        // two zeros of different bits would make two time origins.
        Ok(value + 0.0)
    }
}

/// Checks a time stamp in seconds, as [`check_time`] does for milliseconds.
pub fn check_time_s(field: &str, value: f64) -> std::result::Result<f64, (String, String)> {
    if value.is_finite() && value > MAX_TIME_MS / 1e3 {
        Err((field.to_string(), format!("{value:e} s is absurd (limit {:e} s, about 3,170 years)", MAX_TIME_MS / 1e3)))
    } else {
        check_time(field, value)
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

    /// Leaving long blank runs out changes nothing a parser says: the same records, the same
    /// errors at the same lines and byte offsets, strict and lenient, in every JSON layout.
    #[test]
    fn blank_runs_left_out_are_invisible() {
        let run = |n: usize| format!("{}\n{}", " ".repeat(n), "\n".repeat(n));
        let native =
            ["{\"prompt\": \"a  b\", \"output_len\": 3}", "{\"prompt\": 5, \"output_len\": 3}", "{\"prompt\": \"c\"}"];
        let conv = "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}]}";
        let bad = "{\"conversations\": [{\"from\": \"robot\", \"value\": \"x\"}]}";
        let moon = "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1]}";
        for n in [0, 10, 5000, 70_000] {
            let gap = run(n);
            let docs = [
                format!("{gap}{}\n{gap}{}\n{}{gap}", native[0], native[1], native[2]),
                format!("{gap}[{gap}{conv}{gap},{bad},{gap}{conv}{gap}]{gap}"),
                format!("[{conv},{gap}{conv}{gap}"),
                format!("{gap}{conv}\n{gap}{bad}\n"),
                format!("{gap}{moon}\n{gap}{moon}\n{{\"timestamp\": -1{gap}}}\n"),
            ];
            for doc in &docs {
                let path = Path::new("t");
                let content = Content::from_bytes(path, doc.as_bytes()).unwrap();
                assert_eq!(content.elisions.is_empty(), n < 4096, "{n}");
                for lenient in [false, true] {
                    let opts = ReadOptions { lenient, ..ReadOptions::default() };
                    let plain = parse(path, doc.as_bytes(), &opts);
                    let stored = parse_content(path, &content, &opts);
                    match (plain, stored) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
                            assert_eq!(a.skipped.examples, b.skipped.examples);
                            assert_eq!(a.skipped.reasons, b.skipped.reasons);
                        }
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                        (a, b) => panic!("{n} {lenient}: {:?} vs {:?}", a.map(|_| ()), b.map(|_| ())),
                    }
                }
            }
        }
    }

    #[test]
    fn absurd_times_are_refused() {
        assert_eq!(check_time("t", 1.8e12), Ok(1.8e12));
        assert_eq!(check_time("t", -0.0).unwrap().to_bits(), 0, "−0 is read as 0");
        assert!(check_time("t", 1e13).is_ok());
        assert!(check_time("t", 1.8e15).unwrap_err().1.contains("absurd"));
        assert!(check_time_s("t", 1.8e9).is_ok());
        assert!(check_time_s("t", 1.8e12).unwrap_err().1.contains("absurd"));
        assert!(check_time_s("t", -1.0).is_err());
    }

    /// The message of parsing `doc` (forced to `format`, or detected).
    fn message(doc: &[u8], format: Option<Format>) -> String {
        let opts = ReadOptions { format, ..ReadOptions::default() };
        parse(Path::new("t"), doc, &opts).err().map(|e| e.to_string()).unwrap_or_default()
    }

    /// Malformed records of every reader are described in the file's words: no Rust type name.
    #[test]
    fn messages_name_no_rust_type() {
        let cases: [(&[u8], Format); 12] = [
            (b"5\n", Format::Native),
            (b"{\"prompt\": \"a\", \"output_len\": \"x\"}\n", Format::Native),
            (b"{\"prompt\": \"a\", \"output_len\": 2, \"session\": [1]}\n", Format::Native),
            (b"{\"prompt\": \"a\", \"output_len\": -2}\n", Format::Native),
            (
                b"{\"timestamp\": 0, \"input_length\": \"x\", \"output_length\": 1, \"hash_ids\": [1]}\n",
                Format::Mooncake,
            ),
            (b"{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": \"x\"}\n", Format::Mooncake),
            (b"\"text\"\n", Format::Mooncake),
            (b"[{\"conversations\": 5}]", Format::Sharegpt),
            (b"{\"conversations\": [{\"from\": 1, \"value\": \"x\"}]}\n", Format::Sharegpt),
            (b"[7]", Format::Sharegpt),
            (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-3,44\n", Format::Azure),
            (
                b"Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1.5,x,y,2,3,Conversation log\n",
                Format::Burstgpt,
            ),
        ];
        for (doc, format) in cases {
            let e = message(doc, Some(format));
            assert!(e.starts_with("t: "), "{format}: {e}");
            for rust in ["struct", "enum", "variant", "Raw", "u32", "u64", "i64", "f64", "sequence", "map,"] {
                assert!(!e.contains(rust), "{format}: `{rust}` in {e}");
            }
        }
        assert!(message(b"{\"prompt\": \"a\", \"session\": [1]}\n", None).contains("a string or a whole number"));
        assert!(message(b"\"text\"\n", Some(Format::Native)).contains("expected an object"));
    }

    /// Line numbers and columns count from 1; a record of a JSON array is numbered from 1.
    #[test]
    fn positions_count_from_one() {
        let e = message(b"{\"prompt\": 1}\n", Some(Format::Native));
        assert!(e.starts_with("t: line 1: field `prompt`"), "{e}");
        let e = message(b"[{\"conversations\": 5}]", None);
        assert!(e.starts_with("t: byte offset 1 (record 1): field `conversations`"), "{e}");
    }

    /// Compressed files other than gzip and UTF-16 text are named, with the way to a trace,
    /// whether or not --format is given.
    #[test]
    fn other_encodings_are_named() {
        for format in [None, Some(Format::Native)] {
            assert!(message(b"BZh91AY&SY", format).starts_with("t: a bzip2-compressed file: decompress it first"));
            assert!(message(&[0x28, 0xB5, 0x2F, 0xFD, 1, 2], format).starts_with("t: a zstd-compressed file"));
            assert!(message(b"\xFF\xFE{\x00\"\x00", format).starts_with("t: UTF-16 LE text: convert it to UTF-8"));
        }
    }

    /// The byte that broke a line is named with its column: NUL, Ctrl-Z, CR-only line ends,
    /// a byte-order mark of a joined file; a JSON array given to a JSON Lines reader is named.
    #[test]
    fn odd_bytes_are_named() {
        let rec = b"{\"prompt\": \"a\", \"output_len\": 2}";
        let with = |tail: &[u8]| [&rec[..], b"\n", tail].concat();
        let e = message(&with(b"{\"prompt\": \"b\x00\", \"output_len\": 2}"), None);
        assert!(e.starts_with("t: line 2: field `prompt`: a NUL byte (0x00) at column 14:"), "{e}");
        let e = message(&with(b"\x1a"), None);
        assert!(
            e.starts_with("t: line 2: a Ctrl-Z byte (0x1A, an old DOS end-of-file mark) at column 1: remove it"),
            "{e}"
        );
        let e = message(&[&rec[..], b"\r", &rec[..], b"\r"].concat(), None);
        assert!(e.starts_with("t: line 1: a carriage return (CR, 0x0D) inside the line at column 33"), "{e}");
        let e = message(&with(b"\xEF\xBB\xBF{}"), None);
        assert!(e.starts_with("t: line 2: a UTF-8 byte-order mark (EF BB BF) at column 1"), "{e}");
        let e = message(b"[{\"prompt\": \"a\", \"output_len\": 2}]", None);
        assert!(e.starts_with("t: line 1: a JSON array, but a native trace is JSON Lines"), "{e}");
        // CRLF line ends are line ends, not odd bytes.
        assert!(
            parse(Path::new("t"), &[&rec[..], b"\r\n", &rec[..], b"\r\n"].concat(), &ReadOptions::default()).is_ok()
        );
    }

    #[test]
    fn byte_order_mark_is_ignored() {
        let doc = b"\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n";
        let t = parse(Path::new("bom.csv"), doc, &ReadOptions::default()).unwrap();
        assert_eq!(t.format, Format::Azure);
        assert!(matches!(&t.records, Records::Lengths(r) if r.len() == 1));
    }
}
