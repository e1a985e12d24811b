//! cachesim's own JSON Lines format, written by `cachesim gen` and easy to produce from any
//! log: one request per line with `prompt` (text) or `prompt_ids` (token ids), `output_len`
//! (or the reply as `output` / `output_ids`), optional `timestamp_ms`, `session` and
//! `ignore_eos` (absent: as the client sends by default, `BuildOptions::ignore_eos`) and
//! `priority` (an integer, lower first, as the OpenAI-compatible servers take it) and `lora` (the
//! LoRA adapter the request names, one of `--lora-modules`). Records of
//! one session are turns of one conversation: each turn's prompt is appended to the history of
//! that session's earlier prompts and outputs. Unknown keys are errors (they are usually typos).

use super::json::{read_jsonl, refuse_array};
use super::{check_time, check_tokens, Skipped, RESERVED_TOKEN_BASE};
use crate::error::{Location, RecordError};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    prompt: Option<String>,
    prompt_ids: Option<Vec<u32>>,
    output_len: Option<u64>,
    output: Option<String>,
    output_ids: Option<Vec<u32>>,
    timestamp_ms: Option<f64>,
    session: Option<SessionKey>,
    ignore_eos: Option<bool>,
    priority: Option<i64>,
    lora: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged, expecting = "expected a session name: a string or a whole number ≥ 0")]
enum SessionKey {
    Text(String),
    Number(u64),
}

/// Text to tokenize, or token ids given as such.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    Ids(Vec<u32>),
}

/// One native request.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeRecord {
    pub line: u64,
    pub prompt: Content,
    /// The reply's content, when the file gives it.
    pub output: Option<Content>,
    /// Output length in tokens; `None` means "the length of `output` once tokenized".
    pub output_len: Option<u32>,
    pub timestamp_ms: Option<f64>,
    pub session: Option<String>,
    /// Whether the request is sent with `ignore_eos`; `None` (the key absent, as in every
    /// trace written before the key existed): as the client does by default.
    pub ignore_eos: Option<bool>,
    /// The request's `priority` as the OpenAI-compatible servers take it (vLLM: lower is served
    /// first under `--scheduling-policy priority`); `None`: 0.
    pub priority: Option<i32>,
    /// The LoRA adapter it names (its `model` in the OpenAI request); `None`: the base model.
    pub lora: Option<String>,
}

fn check_ids(field: &str, ids: &[u32]) -> Result<(), (String, String)> {
    match ids.iter().position(|&t| t >= RESERVED_TOKEN_BASE) {
        Some(i) => Err((
            format!("{field}[{i}]"),
            format!("token id {} is in cachesim's reserved range (≥ {RESERVED_TOKEN_BASE})", ids[i]),
        )),
        None => Ok(()),
    }
}

fn convert(line: u64, r: Raw) -> Result<NativeRecord, (String, String)> {
    let prompt = match (r.prompt, r.prompt_ids) {
        (Some(t), None) => Content::Text(t),
        (None, Some(ids)) => {
            check_ids("prompt_ids", &ids)?;
            Content::Ids(ids)
        }
        (Some(_), Some(_)) => return Err(("prompt".into(), "give `prompt` or `prompt_ids`, not both".into())),
        (None, None) => return Err(("prompt".into(), "missing: give `prompt` (text) or `prompt_ids`".into())),
    };
    let output = match (r.output, r.output_ids) {
        (Some(t), None) => Some(Content::Text(t)),
        (None, Some(ids)) => {
            check_ids("output_ids", &ids)?;
            Some(Content::Ids(ids))
        }
        (None, None) => None,
        (Some(_), Some(_)) => return Err(("output".into(), "give `output` or `output_ids`, not both".into())),
    };
    let output_len = r.output_len.map(|n| check_tokens("output_len", n)).transpose()?;
    match (&output, output_len) {
        (None, None) => return Err(("output_len".into(), "missing (or give the reply as `output`)".into())),
        (Some(Content::Ids(ids)), Some(n)) if ids.len() != n as usize => {
            return Err(("output_len".into(), format!("{n} but `output_ids` holds {} tokens", ids.len())))
        }
        _ => {}
    }
    if let Content::Ids(ids) = &prompt {
        check_tokens("prompt_ids", ids.len() as u64)?;
    }
    Ok(NativeRecord {
        line,
        prompt,
        output,
        output_len,
        timestamp_ms: r.timestamp_ms.map(|t| check_time("timestamp_ms", t)).transpose()?,
        session: r.session.map(|s| match s {
            SessionKey::Text(t) => t,
            SessionKey::Number(n) => n.to_string(),
        }),
        ignore_eos: r.ignore_eos,
        priority: r
            .priority
            .map(|p| {
                i32::try_from(p).map_err(|_| {
                    ("priority".to_string(), format!("{p} is outside the 32-bit range cachesim keeps priorities in"))
                })
            })
            .transpose()?,
        lora: r.lora,
    })
}

/// A record as `cachesim gen` writes it (line `line` of its JSON Lines), converted exactly as
/// reading that line converts it — the same checks, the timestamp through JSON's float text —
/// without writing and parsing the text.
pub fn generated(
    line: u64,
    prompt_ids: Vec<u32>,
    output_len: u32,
    timestamp_ms: Option<f64>,
    session: Option<u32>,
) -> Result<NativeRecord, RecordError> {
    let through_json = |t: f64| serde_json::to_string(&t).ok().and_then(|s| serde_json::from_str::<f64>(&s).ok());
    let raw = Raw {
        prompt: None,
        prompt_ids: Some(prompt_ids),
        output_len: Some(output_len as u64),
        output: None,
        output_ids: None,
        timestamp_ms: timestamp_ms.and_then(through_json),
        session: session.map(|s| SessionKey::Number(s as u64)),
        ignore_eos: None,
        priority: None,
        lora: None,
    };
    convert(line, raw).map_err(|(field, message)| RecordError { location: Location::Line(line), field, message })
}

/// Parses a native JSONL document.
pub fn parse(bytes: &[u8], lenient: bool, skipped: &mut Skipped) -> Result<Vec<NativeRecord>, RecordError> {
    refuse_array(bytes, "native")?;
    read_jsonl(bytes, lenient, skipped, convert)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_records() {
        let doc = br#"{"prompt": "hello", "output_len": 3}
{"prompt_ids": [1,2,3], "output_ids": [4,5], "timestamp_ms": 12.5, "session": 7}
{"prompt": "q", "output": "an answer", "session": "s"}"#;
        let mut sk = Skipped::default();
        let r = parse(doc, false, &mut sk).unwrap();
        assert_eq!(r[0].prompt, Content::Text("hello".into()));
        assert_eq!(r[0].output_len, Some(3));
        assert_eq!(r[1].session.as_deref(), Some("7"));
        assert_eq!(r[1].output, Some(Content::Ids(vec![4, 5])));
        assert_eq!(r[2].output_len, None);
    }

    #[test]
    fn ignore_eos_is_optional() {
        let doc = br#"{"prompt_ids": [1], "output_len": 2, "ignore_eos": false}
{"prompt_ids": [1], "output_len": 2}"#;
        let r = parse(doc, false, &mut Skipped::default()).unwrap();
        assert_eq!((r[0].ignore_eos, r[1].ignore_eos), (Some(false), None));
        assert!(
            parse(br#"{"prompt_ids": [1], "output_len": 2, "ignore_eos": 1}"#, false, &mut Skipped::default()).is_err()
        );
    }

    #[test]
    fn bad_records_name_the_field() {
        let cases: &[(&str, &str)] = &[
            (r#"{"output_len": 3}"#, "prompt"),
            (r#"{"prompt": "x"}"#, "output_len"),
            (r#"{"prompt": "x", "output_len": -1}"#, "output_len"),
            (r#"{"prompt": "x", "output_length": 4}"#, ""),
            (r#"{"prompt_ids": [1, 2000000000], "output_len": 1}"#, "prompt_ids[1]"),
            (r#"{"prompt_ids": [1], "output_ids": [1], "output_len": 2}"#, "output_len"),
            (r#"{"prompt": "x", "output_len": 1, "timestamp_ms": -4}"#, "timestamp_ms"),
        ];
        for (doc, field) in cases {
            let mut sk = Skipped::default();
            let e = parse(doc.as_bytes(), false, &mut sk).unwrap_err();
            assert!(e.field == *field || (field.is_empty() && e.message.contains("output_length")), "{doc}: {e}");
        }
    }
}
