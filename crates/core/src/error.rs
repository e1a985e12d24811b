//! Typed errors for everything the user controls: trace files (file, line or byte offset,
//! field, value), tokenizer choices and numeric arguments. The binary wraps these with
//! `anyhow`; the library never panics on user input.

use std::path::PathBuf;

/// Where in an input file a problem was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// 1-based line of a line-oriented file (JSONL, CSV).
    Line(u64),
    /// 0-based byte offset inside a JSON document (arrays), with the 0-based record index
    /// (printed from 1: the first record is "record 1").
    Offset { byte: u64, record: u64 },
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Line(l) => write!(f, "line {l}"),
            Location::Offset { byte, record } => write!(f, "byte offset {byte} (record {})", record + 1),
        }
    }
}

/// One bad record: where it is, which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    pub location: Location,
    /// Field path such as `conversations[2].value`; empty when the record as a whole is bad.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.field.is_empty() || self.field == "." {
            write!(f, "{}: {}", self.location, self.message)
        } else {
            write!(f, "{}: field `{}`: {}", self.location, self.field, self.message)
        }
    }
}

/// Errors of the cachesim library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OS or gzip message is part of this error's text, not a separate source, so that
    /// chained reports (`{:#}`) print it once.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {error}")]
    Record { path: PathBuf, error: RecordError },
    #[error(
        "{path}: more than {} bytes of content (decompressed), the cap on a trace's size; raise it with \
         --max-trace-bytes",
        crate::text::thousands(*cap)
    )]
    TraceTooLarge { path: PathBuf, cap: u64 },
    #[error("{path}: cannot tell the trace format ({why}); pass --format")]
    UnknownFormat { path: PathBuf, why: String },
    /// Content no trace reader reads as text (another compression, UTF-16), named with the fix.
    #[error("{path}: {what}")]
    NotText { path: PathBuf, what: String },
    #[error("{path}: the trace holds no usable request{detail}")]
    EmptyTrace { path: PathBuf, detail: String },
    #[error("unknown tokenizer `{0}`: expected cl100k, o200k, chars4 or hf:PATH")]
    UnknownTokenizer(String),
    #[error("tokenizer {name}: {message}")]
    Tokenizer { name: String, message: String },
    #[error("invalid value for {field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// The engine itself would refuse this configuration at start-up (its own message).
    #[error("{engine} would not start: {message}")]
    StartupRefused { engine: String, message: String },
    /// A benchmark report or calibration case that cannot be used as a whole.
    #[error("{path}: {message}")]
    Report { path: PathBuf, message: String },
}

impl Error {
    /// Shorthand for an invalid numeric or textual argument.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        Error::InvalidArgument { field: field.to_string(), message: message.into() }
    }
}

/// Result alias of the library.
pub type Result<T> = std::result::Result<T, Error>;
