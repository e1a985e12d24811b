//! JSON plumbing shared by the JSON-based readers: JSON Lines (parsed in parallel, errors by
//! line) and JSON arrays (element by element, errors by byte offset), with typed records,
//! field paths in every error, and lenient skipping that counts what it dropped.

use super::Skipped;
use crate::error::{Location, RecordError};
use crate::messages::{plain, Syntax};
use rayon::prelude::*;
use serde::de::DeserializeOwned;

/// Turns a parsed record into the reader's output, or names the bad field and why.
/// Called in file order for arrays, in parallel for JSON Lines.
pub type Checked<R> = Result<R, (String, String)>;

fn strip_position(msg: String) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

pub fn parse_one<T: DeserializeOwned>(bytes: &[u8], location: Location) -> Result<T, RecordError> {
    let describe = |e: serde_json::Error| {
        if e.is_eof() {
            "record is cut off (unexpected end of input)".to_string()
        } else {
            plain(&strip_position(e.to_string()), Syntax::Json)
        }
    };
    // Fast path without path tracking; a bad record is parsed again to name the field.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        RecordError { location: location.clone(), field, message: describe(e.into_inner()) }
    })?;
    de.end().map_err(|e| RecordError { location, field: String::new(), message: describe(e) })?;
    Ok(value)
}

/// Either stops at the first bad record (strict) or counts it in `skipped` (lenient).
pub fn handle_bad(err: RecordError, lenient: bool, skipped: &mut Skipped) -> Result<(), RecordError> {
    if lenient {
        skipped.add(&err);
        Ok(())
    } else {
        Err(err)
    }
}

/// The non-blank lines of a JSON Lines document with their 1-based line numbers (a final
/// `\r` dropped).
pub fn jsonl_lines(bytes: &[u8]) -> Vec<(u64, &[u8])> {
    let ends = memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len()));
    let mut start = 0;
    ends.enumerate()
        .map(|(i, end)| {
            let line = &bytes[start..end];
            start = end + 1;
            (i as u64 + 1, line.strip_suffix(b"\r").unwrap_or(line))
        })
        .filter(|(_, l)| l.iter().any(|b| !b.is_ascii_whitespace()))
        .collect()
}

/// Refuses a JSON array given to a JSON Lines reader (`format`: its name), saying how to write
/// it as JSON Lines; parsed as a line, its message would be about the array's first element.
pub fn refuse_array(bytes: &[u8], format: &str) -> Result<(), RecordError> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
    if start.is_none_or(|i| bytes[i] != b'[') {
        return Ok(());
    }
    let line = bytes[..start.unwrap_or(0)].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    Err(RecordError {
        location: Location::Line(line),
        field: String::new(),
        message: format!(
            "a JSON array, but a {format} trace is JSON Lines: one record (an object `{{…}}`) per line \
             (jq -c '.[]' FILE writes the array so)"
        ),
    })
}

/// Parses JSON Lines (blank lines ignored) into typed records and converts them, in
/// parallel; the first bad line (by line number) is the error.
pub fn read_jsonl<T: DeserializeOwned, R: Send>(
    bytes: &[u8],
    lenient: bool,
    skipped: &mut Skipped,
    convert: impl Fn(u64, T) -> Checked<R> + Sync,
) -> Result<Vec<R>, RecordError> {
    let lines = jsonl_lines(bytes);
    let parsed: Vec<Result<R, RecordError>> = lines
        .par_iter()
        .map(|&(n, l)| {
            let location = Location::Line(n);
            let record = parse_one::<T>(l, location.clone())?;
            convert(n, record).map_err(|(field, message)| RecordError { location, field, message })
        })
        .collect();
    let mut out = Vec::with_capacity(parsed.len());
    for p in parsed {
        match p {
            Ok(r) => out.push(r),
            Err(e) => handle_bad(e, lenient, skipped)?,
        }
    }
    Ok(out)
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

/// Parses a JSON array of records. A record of the wrong shape is an error at its byte offset
/// (skipped when lenient); a document cut off mid-record is an error, and when lenient every
/// complete record before the cut is kept.
pub fn read_array<T: DeserializeOwned, R>(
    bytes: &[u8],
    lenient: bool,
    skipped: &mut Skipped,
    mut convert: impl FnMut(u64, T) -> Checked<R>,
) -> Result<Vec<R>, RecordError> {
    let mut pos = skip_ws(bytes, 0);
    let bad = |byte: usize, record: u64, message: &str| RecordError {
        location: Location::Offset { byte: byte as u64, record },
        field: String::new(),
        message: message.to_string(),
    };
    if bytes.get(pos) != Some(&b'[') {
        return Err(bad(pos, 0, "expected `[` to open a JSON array"));
    }
    pos = skip_ws(bytes, pos + 1);
    let mut out = Vec::new();
    let mut index = 0u64;
    if bytes.get(pos) == Some(&b']') {
        return Ok(out);
    }
    loop {
        let start = pos;
        let mut stream = serde_json::Deserializer::from_slice(&bytes[start..]).into_iter::<serde::de::IgnoredAny>();
        match stream.next() {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let message = if e.is_eof() {
                    "the JSON array is cut off inside this record (truncated file)".to_string()
                } else {
                    format!("malformed JSON: {}", plain(&strip_position(e.to_string()), Syntax::Json))
                };
                // Nothing after a syntax error can be trusted: keep what was complete.
                handle_bad(bad(start, index, &message), lenient, skipped)?;
                return Ok(out);
            }
            None => {
                handle_bad(bad(start, index, "the JSON array is cut off (no closing `]`)"), lenient, skipped)?;
                return Ok(out);
            }
        }
        let end = start + stream.byte_offset();
        let location = Location::Offset { byte: start as u64, record: index };
        let converted = parse_one::<T>(&bytes[start..end], location.clone()).and_then(|record| {
            convert(index, record).map_err(|(field, message)| RecordError { location, field, message })
        });
        match converted {
            Ok(r) => out.push(r),
            Err(e) => handle_bad(e, lenient, skipped)?,
        }
        index += 1;
        pos = skip_ws(bytes, end);
        match bytes.get(pos) {
            Some(b',') => pos = skip_ws(bytes, pos + 1),
            Some(b']') => {
                let tail = skip_ws(bytes, pos + 1);
                if tail != bytes.len() {
                    handle_bad(bad(tail, index, "unexpected data after the closing `]`"), lenient, skipped)?;
                }
                return Ok(out);
            }
            None => {
                handle_bad(bad(pos, index, "the JSON array is cut off (no closing `]`)"), lenient, skipped)?;
                return Ok(out);
            }
            Some(_) => {
                handle_bad(bad(pos, index, "expected `,` or `]` after a record"), lenient, skipped)?;
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct R {
        a: u32,
    }

    fn keep(_: u64, r: R) -> Checked<R> {
        Ok(r)
    }

    #[test]
    fn validation_errors_come_in_line_order() {
        let mut sk = Skipped::default();
        let check = |_: u64, r: R| if r.a == 0 { Err(("a".to_string(), "zero".to_string())) } else { Ok(r) };
        let e = read_jsonl(b"{\"a\":1}\n{\"a\":0}\n{\"a\":\"x\"}", false, &mut sk, check).err().unwrap();
        assert_eq!((e.location, e.message.as_str()), (Location::Line(2), "zero"));
    }

    #[test]
    fn jsonl_errors_name_line_and_field() {
        let mut sk = Skipped::default();
        let e = read_jsonl(b"{\"a\":1}\n\n{\"a\":\"x\"}\n", false, &mut sk, keep).err().unwrap();
        assert_eq!(e.location, Location::Line(3));
        assert_eq!(e.field, "a");
        assert!(e.message.contains("invalid type"), "{}", e.message);
        let ok = read_jsonl(b"{\"a\":1}\n\n{\"a\":\"x\"}\n{\"a\":-2}\n{\"a\":3", true, &mut sk, keep).unwrap();
        assert_eq!(ok.len(), 1);
        assert_eq!(sk.total(), 3);
    }

    #[test]
    fn array_truncation_strict_and_lenient() {
        let doc = b"[ {\"a\":1}, {\"a\":2} ,{\"a\":";
        let mut sk = Skipped::default();
        let e = read_array(doc, false, &mut sk, keep).err().unwrap();
        assert_eq!(e.location, Location::Offset { byte: 20, record: 2 });
        assert!(e.message.contains("cut off"), "{}", e.message);
        let ok = read_array(doc, true, &mut sk, keep).unwrap();
        assert_eq!(ok.iter().map(|r| r.a).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(sk.total(), 1);
    }

    #[test]
    fn array_wrong_type_is_located() {
        let mut sk = Skipped::default();
        let e = read_array(b"[{\"a\":1},{\"b\":2}]", false, &mut sk, keep).err().unwrap();
        assert_eq!(e.location, Location::Offset { byte: 9, record: 1 });
        assert!(e.message.contains("missing field `a`"), "{}", e.message);
        assert!(read_array(b"[]", false, &mut sk, keep).unwrap().is_empty());
        assert!(read_array(b"[{\"a\":1}]", false, &mut sk, keep).unwrap().len() == 1);
    }
}
