//! A trace file's bytes, read in memory bounded by what the records need: gzip decompressed as
//! it is read, a cap on the decompressed size in total (`--max-trace-bytes`) and per line
//! ([`MAX_LINE_BYTES`]), a probe of sources that are not regular files, and JSON content kept
//! without its long runs of blank space (a gigabyte of newlines, or of spaces inside `[ ]`, is
//! not stored). What was left out is remembered as [`Elisions`], so every error still names the
//! file's own line or byte offset.

use super::detect;
use crate::error::{Error, Location, RecordError, Result};
use std::io::Read;
use std::path::Path;

/// Longest line accepted in line-oriented content (JSONL, CSV), in bytes: a longer one means the
/// file is not a trace (`/dev/zero`, a binary), and reading on would only fill memory.
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// A file that is not a regular one (a device, a pipe) must show a recognisable first record
/// within this many bytes (`/dev/urandom` never does, and never ends).
pub const PROBE_BYTES: usize = 1 << 20;

/// Default cap on a trace's content once decompressed, in bytes (4 GiB); `--max-trace-bytes`
/// raises it.
pub const DEFAULT_MAX_TRACE_BYTES: u64 = 4 << 30;

/// In JSON content, a run of blank space (outside strings) longer than this is stored as one
/// byte; shorter runs are kept as they are.
const KEEP_RUN: usize = 4096;

/// Blank content before the first record is kept up to this length, as it is, while the format
/// is unknown; a longer run is only acceptable before JSON.
const KEEP_LEADING: usize = PROBE_BYTES;

/// The bytes a trace's parser reads, and where blank runs were left out of them.
#[derive(Debug, Clone, Default)]
pub struct Content {
    pub bytes: Vec<u8>,
    pub elisions: Elisions,
}

impl Content {
    /// Content already in memory, stored as a file's would be (`path` names it in errors).
    pub fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Content> {
        let mut store = Store::with_capacity(bytes.len());
        store.push(path, bytes)?;
        Ok(store.finish())
    }
}

/// Blank runs left out of [`Content::bytes`], in file order, to give errors the file's own
/// positions back.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Elisions(Vec<Elision>);

/// One run left out: from byte `at` and from line `line` of the stored content on, the file's
/// positions are `bytes` and `lines` further on (both counted from the start).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Elision {
    at: u64,
    line: u64,
    bytes: u64,
    lines: u64,
}

impl Elisions {
    /// Whether nothing was left out.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The file's own line number of line `n` of the stored content.
    pub fn line(&self, n: u64) -> u64 {
        let k = self.0.partition_point(|e| e.line <= n);
        n + k.checked_sub(1).map_or(0, |k| self.0[k].lines)
    }

    /// The file's own location of a location in the stored content.
    pub fn locate(&self, loc: &Location) -> Location {
        match *loc {
            Location::Line(n) => Location::Line(self.line(n)),
            Location::Offset { byte, record } => {
                let k = self.0.partition_point(|e| e.at <= byte);
                Location::Offset { byte: byte + k.checked_sub(1).map_or(0, |k| self.0[k].bytes), record }
            }
        }
    }
}

/// Reads a trace file into [`Content`], decompressing gzip when the content is gzip. More than
/// `max_bytes` of content is an error naming the file, the cap and the flag; so is a line over
/// [`MAX_LINE_BYTES`] in line-oriented content, and a source that is not a regular file and
/// does not look like a trace within its first [`PROBE_BYTES`].
pub fn read_content(path: &Path, max_bytes: u64) -> Result<Content> {
    let io = |error| Error::Io { path: path.to_path_buf(), error };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::other("is a directory, not a trace file")));
    }
    let regular = meta.is_file();
    let mut src = std::io::BufReader::with_capacity(1 << 16, file);
    let gzip = std::io::BufRead::fill_buf(&mut src).map_err(io)?.starts_with(&[0x1f, 0x8b]);
    let too_large = || Error::TraceTooLarge { path: path.to_path_buf(), cap: max_bytes };
    if gzip {
        read_stream(path, flate2::bufread::MultiGzDecoder::new(src), !regular, max_bytes, 0)
    } else if regular {
        if meta.len() > max_bytes {
            return Err(too_large());
        }
        read_stream(path, src, false, max_bytes, meta.len() as usize)
    } else {
        read_stream(path, src, true, max_bytes, 0)
    }
}

/// Reads a stream in chunks, checking line lengths and the cap as it goes and, with `probe`,
/// that the first [`PROBE_BYTES`] look like a trace; `hint` is the expected size.
fn read_stream(path: &Path, mut r: impl Read, probe: bool, max_bytes: u64, hint: usize) -> Result<Content> {
    let io = |error| Error::Io { path: path.to_path_buf(), error };
    let mut store = Store::with_capacity(hint);
    let mut chunk = vec![0u8; 1 << 16];
    let (mut lines, mut probed, mut read) = (LineState::default(), !probe, 0u64);
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        check_lines(path, &chunk[..n], read, &mut lines)?;
        read += n as u64;
        if read > max_bytes {
            return Err(Error::TraceTooLarge { path: path.to_path_buf(), cap: max_bytes });
        }
        store.push(path, &chunk[..n])?;
        if !probed && read >= PROBE_BYTES as u64 {
            probed = true;
            let head = &store.out[..store.out.len().min(PROBE_BYTES)];
            if let Err(why) = detect(head) {
                return Err(Error::UnknownFormat {
                    path: path.to_path_buf(),
                    why: format!(
                        "not a regular file, and its first {} MiB hold no trace record: {why}",
                        PROBE_BYTES >> 20
                    ),
                });
            }
        }
    }
    Ok(store.finish())
}

/// What [`Store`] knows of the content so far.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Nothing but blank space yet.
    Leading,
    /// JSON (the first byte was `{` or `[`): long blank runs outside strings are left out.
    Json,
    /// Anything else (CSV): kept as it is.
    Verbatim,
}

/// The content being stored: the bytes kept, the pending blank run, the string state.
#[derive(Debug)]
struct Store {
    out: Vec<u8>,
    kind: Kind,
    /// Inside a JSON string, and after its backslash.
    in_string: bool,
    escaped: bool,
    /// The pending blank run: its first bytes (while it is short enough to keep), its length
    /// and its newlines.
    run: Vec<u8>,
    run_len: u64,
    run_newlines: u64,
    /// Newlines stored so far.
    newlines: u64,
    /// Bytes and lines left out so far.
    left_bytes: u64,
    left_lines: u64,
    elisions: Vec<Elision>,
}

impl Store {
    fn with_capacity(n: usize) -> Self {
        Store {
            out: Vec::with_capacity(n),
            kind: Kind::Leading,
            in_string: false,
            escaped: false,
            run: Vec::new(),
            run_len: 0,
            run_newlines: 0,
            newlines: 0,
            left_bytes: 0,
            left_lines: 0,
            elisions: Vec::new(),
        }
    }

    fn push(&mut self, path: &Path, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            match self.kind {
                Kind::Verbatim => {
                    self.out.extend_from_slice(bytes);
                    return Ok(());
                }
                Kind::Leading => {
                    let blank = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
                    self.add_blank(&bytes[..blank], KEEP_LEADING);
                    bytes = &bytes[blank..];
                    let Some(&first) = bytes.first() else { return Ok(()) };
                    if first == b'{' || first == b'[' {
                        self.kind = Kind::Json;
                        self.flush_run();
                    } else {
                        if self.run_len > self.run.len() as u64 {
                            return Err(Error::Record {
                                path: path.to_path_buf(),
                                error: RecordError {
                                    location: Location::Line(self.run_newlines + 1),
                                    field: String::new(),
                                    message: format!(
                                        "the first record comes after more than {} MiB of blank content: not a \
                                         trace (only a JSON one may hold that much)",
                                        KEEP_LEADING >> 20
                                    ),
                                },
                            });
                        }
                        self.kind = Kind::Verbatim;
                        self.flush_run();
                    }
                }
                Kind::Json if self.in_string => {
                    let Some(i) = (if self.escaped { Some(0) } else { memchr::memchr3(b'"', b'\\', b'\n', bytes) })
                    else {
                        self.out.extend_from_slice(bytes);
                        return Ok(());
                    };
                    let b = bytes[i];
                    self.out.extend_from_slice(&bytes[..=i]);
                    bytes = &bytes[i + 1..];
                    if self.escaped {
                        self.escaped = false;
                        if b == b'\n' {
                            self.newlines += 1;
                            self.in_string = false;
                        }
                    } else if b == b'\\' {
                        self.escaped = true;
                    } else {
                        // A raw newline cannot be inside a JSON string: whatever the line held,
                        // the next one starts outside.
                        self.newlines += (b == b'\n') as u64;
                        self.in_string = false;
                    }
                }
                Kind::Json => {
                    let solid = bytes.iter().position(|&b| b.is_ascii_whitespace() || b == b'"').unwrap_or(bytes.len());
                    if solid > 0 {
                        self.flush_run();
                        self.out.extend_from_slice(&bytes[..solid]);
                        bytes = &bytes[solid..];
                        continue;
                    }
                    if bytes[0] == b'"' {
                        self.flush_run();
                        self.out.push(b'"');
                        self.in_string = true;
                        bytes = &bytes[1..];
                        continue;
                    }
                    let blank = bytes.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(bytes.len());
                    self.add_blank(&bytes[..blank], KEEP_RUN);
                    bytes = &bytes[blank..];
                }
            }
        }
        Ok(())
    }

    /// Adds blank bytes to the pending run, keeping its first `keep` bytes.
    fn add_blank(&mut self, blank: &[u8], keep: usize) {
        if blank.is_empty() {
            return;
        }
        let room = keep.saturating_sub(self.run.len()).min(blank.len());
        if self.run_len == self.run.len() as u64 {
            self.run.extend_from_slice(&blank[..room]);
        }
        self.run_len += blank.len() as u64;
        self.run_newlines += count_newlines(blank);
    }

    /// Ends the pending run: stored as it is when short (or kept whole), else as one byte (a
    /// newline when it held one) and an elision.
    fn flush_run(&mut self) {
        if self.run_len == 0 {
            return;
        }
        let limit = if self.kind == Kind::Json { KEEP_RUN } else { KEEP_LEADING };
        if self.run_len <= limit as u64 && self.run_len == self.run.len() as u64 {
            self.out.extend_from_slice(&self.run);
            self.newlines += self.run_newlines;
        } else {
            let newline = self.run_newlines > 0;
            self.out.push(if newline { b'\n' } else { b' ' });
            self.newlines += newline as u64;
            self.left_bytes += self.run_len - 1;
            self.left_lines += self.run_newlines.saturating_sub(1);
            self.elisions.push(Elision {
                at: self.out.len() as u64,
                line: self.newlines + 1,
                bytes: self.left_bytes,
                lines: self.left_lines,
            });
        }
        self.run.clear();
        self.run_len = 0;
        self.run_newlines = 0;
    }

    fn finish(mut self) -> Content {
        if self.kind == Kind::Leading && self.run_len > self.run.len() as u64 {
            // Only blank space: the format is unknown, and JSON's rule leaves the run out.
            self.kind = Kind::Json;
        }
        self.flush_run();
        Content { bytes: self.out, elisions: Elisions(self.elisions) }
    }
}

/// Newlines in `bytes` (a plain count, which the compiler vectorises).
fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Where [`check_lines`] is in the content read so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct LineState {
    /// 1-based number of the line being read.
    line: u64,
    /// Byte offset where it starts.
    start: u64,
    /// Whether the content is a JSON array (first non-blank byte `[`); `None` while all blank.
    array: Option<bool>,
}

impl Default for LineState {
    fn default() -> Self {
        Self { line: 1, start: 0, array: None }
    }
}

/// Counts the lines of `chunk`, the content from byte offset `base` on; a line over
/// [`MAX_LINE_BYTES`] is an error. Content that is a JSON array is exempt: it may be one long
/// line.
pub(super) fn check_lines(path: &Path, chunk: &[u8], base: u64, st: &mut LineState) -> Result<()> {
    if st.array.is_none() {
        st.array = chunk.iter().find(|b| !b.is_ascii_whitespace()).map(|&b| b == b'[');
    }
    if st.array == Some(true) {
        return Ok(());
    }
    let max = MAX_LINE_BYTES as u64;
    match memchr::memchr(b'\n', chunk) {
        // Only the first line ending here can be too long when the others lie inside the chunk.
        Some(first) if chunk.len() as u64 <= max && base + first as u64 - st.start <= max => {
            st.line += count_newlines(chunk);
            st.start = base + memchr::memrchr(b'\n', chunk).expect("a newline") as u64 + 1;
        }
        Some(_) => {
            for pos in memchr::memchr_iter(b'\n', chunk) {
                if base + pos as u64 - st.start > max {
                    break;
                }
                st.line += 1;
                st.start = base + pos as u64 + 1;
            }
        }
        None => {}
    }
    if base + chunk.len() as u64 - st.start > max {
        return Err(Error::Record {
            path: path.to_path_buf(),
            error: RecordError {
                location: Location::Line(st.line),
                field: String::new(),
                message: format!(
                    "longer than {} MiB (starting at byte offset {}): not a trace in a line format",
                    MAX_LINE_BYTES >> 20,
                    st.start
                ),
            },
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Content stored chunk by chunk, as a file's is read.
    fn store(chunks: &[&[u8]]) -> Content {
        let mut s = Store::with_capacity(0);
        for c in chunks {
            s.push(Path::new("t"), c).unwrap();
        }
        s.finish()
    }

    #[test]
    fn a_line_over_the_bound_is_named_and_arrays_are_exempt() {
        let mut st = LineState::default();
        let mut doc = b"{}\n{}\n".to_vec();
        doc.resize(6 + MAX_LINE_BYTES + 1, b'x');
        let e = check_lines(Path::new("t.jsonl"), &doc, 0, &mut st).unwrap_err().to_string();
        assert!(e.starts_with("t.jsonl: line 3: longer than 64 MiB (starting at byte offset 6)"), "{e}");
        doc[0] = b'[';
        assert!(check_lines(Path::new("t.json"), &doc, 0, &mut LineState::default()).is_ok());
        // Blank content decides nothing; the first chunk with a byte does.
        let mut st = LineState::default();
        assert!(check_lines(Path::new("t"), b"  \n ", 0, &mut st).is_ok());
        assert_eq!((st.array, st.line, st.start), (None, 2, 3));
        // Chunks continue each other's lines.
        assert!(check_lines(Path::new("t"), b"{}\n", 4, &mut st).is_ok());
        assert_eq!((st.line, st.start), (3, 7));
    }

    #[test]
    fn short_runs_and_other_content_are_kept_as_they_are() {
        for doc in [
            &b"{\"a\": \"x   y\"}\n\n  \n{\"a\":1}\r\n"[..],
            b"  TIMESTAMP,ContextTokens\n\n\n1,2\n",
            b"[ {\"a\" : [1, 2]},\n\t{\"b\":\"\\\"  \"} ]",
        ] {
            let whole = store(&[doc]);
            assert_eq!((whole.bytes.as_slice(), whole.elisions.is_empty()), (doc, true));
            let bytewise: Vec<&[u8]> = doc.chunks(1).collect();
            assert_eq!(store(&bytewise).bytes, doc);
        }
        // Spaces inside a string stay, however many.
        let long = format!("{{\"a\":\"{}\"}}\n", " ".repeat(3 * KEEP_RUN));
        assert_eq!(store(&[long.as_bytes()]).bytes, long.as_bytes());
    }

    #[test]
    fn long_blank_runs_are_left_out_and_positions_given_back() {
        let blank = "\n".repeat(KEEP_RUN + 10);
        let doc = format!("{{\"a\":1}}\n{blank}{{\"a\":2}}\n");
        let c = store(&[doc.as_bytes()]);
        // The run (the first line's end, then the blank lines) is one newline.
        assert_eq!(c.bytes, b"{\"a\":1}\n{\"a\":2}\n");
        assert_eq!(c.elisions.locate(&Location::Line(2)), Location::Line(KEEP_RUN as u64 + 12));
        assert_eq!(c.elisions.locate(&Location::Line(1)), Location::Line(1));
        let spaces = " ".repeat(3 * KEEP_RUN);
        let doc = format!("[{spaces}{{\"a\":1}},{spaces}{{\"a\":2}}]");
        let c = store(&doc.as_bytes().chunks(1000).collect::<Vec<_>>());
        assert_eq!(c.bytes, b"[ {\"a\":1}, {\"a\":2}]");
        let second = doc.rfind('{').unwrap() as u64;
        assert_eq!(
            c.elisions.locate(&Location::Offset { byte: 11, record: 1 }),
            Location::Offset { byte: second, record: 1 }
        );
        assert_eq!(
            c.elisions.locate(&Location::Offset { byte: 0, record: 0 }),
            Location::Offset { byte: 0, record: 0 }
        );
        // Nothing but blank space is stored as one byte.
        let c = store(&[" \n".repeat(KEEP_LEADING).as_bytes()]);
        assert_eq!(c.bytes, b"\n");
    }

    #[test]
    fn a_long_blank_start_before_csv_is_refused() {
        let mut s = Store::with_capacity(0);
        s.push(Path::new("t.csv"), "\n".repeat(KEEP_LEADING + 1).as_bytes()).unwrap();
        let e = s.push(Path::new("t.csv"), b"TIMESTAMP,ContextTokens\n").unwrap_err().to_string();
        assert!(e.starts_with("t.csv: line 1048578: the first record comes after more than 1 MiB"), "{e}");
    }
}
