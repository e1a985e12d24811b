//! Parser messages in the words of the file being read: serde's, toml's and csv's messages name
//! Rust types ("expected struct Raw", "untagged enum SessionKey", "expected u32"), which a person
//! editing a trace or a TOML file cannot act on. [`plain`] rewrites them into what the file must
//! hold (an object, a table, a whole number, a list), and [`toml_error`] / [`csv_error`] give a
//! file's position as line and column counted from 1, a CSV column by its header.

/// The syntax of the file a message is about: it decides what a nested record is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syntax {
    /// JSON and JSON Lines: records are objects `{…}`, lists are arrays `[…]`.
    Json,
    /// TOML: records are tables, lists are arrays.
    Toml,
    /// CSV: a cell.
    Csv,
}

impl Syntax {
    fn record(self) -> &'static str {
        match self {
            Syntax::Json => "an object `{…}`",
            Syntax::Toml => "a table",
            Syntax::Csv => "a row",
        }
    }
}

/// Rust's number types as serde names them, and what a file must hold instead.
const NUMBERS: [(&str, &str); 14] = [
    ("u8", "a whole number from 0 to 255"),
    ("u16", "a whole number from 0 to 65535"),
    ("u32", "a whole number from 0 to 4294967295"),
    ("u64", "a whole number ≥ 0"),
    ("u128", "a whole number ≥ 0"),
    ("usize", "a whole number ≥ 0"),
    ("i8", "a whole number"),
    ("i16", "a whole number"),
    ("i32", "a whole number"),
    ("i64", "a whole number"),
    ("i128", "a whole number"),
    ("isize", "a whole number"),
    ("f32", "a number"),
    ("f64", "a number"),
];

/// `msg` with every Rust type name replaced by what a file of `syntax` must hold there.
pub fn plain(msg: &str, syntax: Syntax) -> String {
    let mut s = msg.trim().to_string();
    // "data did not match any variant of untagged enum X": the type gives no words of its own.
    if let Some(i) = s.find("data did not match any variant of untagged enum ") {
        s.replace_range(i.., "a value of none of the accepted kinds");
    }
    // serde's words for an enum value found where another kind was expected.
    for (rust, words) in [
        ("unit variant", "a name"),
        ("newtype variant", "a tagged value"),
        ("tuple variant", "a tagged value"),
        ("struct variant", "a tagged value"),
    ] {
        s = s.replace(rust, words);
    }
    for kind in ["tuple struct ", "newtype struct ", "unit struct ", "struct ", "enum "] {
        while let Some(i) = find_word(&s, kind) {
            let end = i + kind.len() + ident_len(&s[i + kind.len()..]);
            let word = if kind == "enum " { "one of the accepted names" } else { syntax.record() };
            s.replace_range(i..end, word);
        }
    }
    let map_found = format!("invalid type: {}", syntax.record());
    for (rust, words) in [
        ("unknown variant", "unknown value"),
        ("variant identifier", "a name"),
        ("field identifier", "a key name"),
        ("a sequence", "a list `[…]`"),
        ("invalid type: sequence", "invalid type: a list `[…]`"),
        ("invalid type: unit value", "invalid type: null"),
        ("a map", syntax.record()),
        ("invalid type: map", map_found.as_str()),
        ("a borrowed string", "a string"),
        ("a character", "a single character"),
    ] {
        s = s.replace(rust, words);
    }
    if let Some(i) = s.find("a tuple of size ") {
        let n_end = i + 16 + s[i + 16..].bytes().take_while(u8::is_ascii_digit).count();
        let n = s[i + 16..n_end].to_string();
        s.replace_range(i..n_end, &format!("a list `[…]` of {n} values"));
    }
    for (rust, words) in NUMBERS {
        while let Some(i) = find_word(&s, rust) {
            s.replace_range(i..i + rust.len(), words);
        }
    }
    s
}

/// Where `word` starts in `s` as a whole word (no letter, digit or `_` before it; the word's own
/// last character ends it unless it is a letter or digit followed by one).
fn find_word(s: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(rel) = s[from..].find(word) {
        let i = from + rel;
        let before_ok = !s[..i].chars().next_back().is_some_and(|c| is_ident(c) || c == '`');
        let last = word.chars().next_back().unwrap_or(' ');
        let after_ok = !is_ident(last) || !s[i + word.len()..].chars().next().is_some_and(|c| is_ident(c) || c == '`');
        if before_ok && after_ok {
            return Some(i);
        }
        from = i + word.len();
    }
    None
}

/// Length of the Rust path at the start of `s` (`Raw`, `a::B<C>`).
fn ident_len(s: &str) -> usize {
    s.find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '<' | '>'))).unwrap_or(s.len())
}

/// Line and column (both from 1, the column in characters) of byte `at` of `text`.
pub fn line_column(text: &str, at: usize) -> (usize, usize) {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    (text[..at].matches('\n').count() + 1, text[start..at].chars().count() + 1)
}

/// A TOML error as "line L, column C: what is wrong", in the file's words.
pub fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let what = plain(e.message(), Syntax::Toml);
    match e.span() {
        Some(span) => {
            let (line, column) = line_column(text, span.start);
            format!("line {line}, column {column}: {what}")
        }
        None => what,
    }
}

/// A CSV error as "line L, field `HEADER`: what is wrong" (the header of the column when the
/// error names one; else its column from 1), in the file's words.
pub fn csv_error(e: &csv::Error, headers: Option<&csv::StringRecord>) -> String {
    let line = e.position().map(|p| p.line());
    let at = |rest: String| match line {
        Some(l) => format!("line {l}, {rest}"),
        None => rest,
    };
    match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => {
            let what = plain(&err.kind().to_string(), Syntax::Csv);
            match err.field() {
                Some(i) => {
                    let name = headers.and_then(|h| h.get(i as usize));
                    at(match name {
                        Some(n) => format!("field `{n}`: {what}"),
                        None => format!("column {}: {what}", i + 1),
                    })
                }
                None => at(what),
            }
        }
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            at(format!("{len} columns where the header has {expected_len}"))
        }
        csv::ErrorKind::Utf8 { err, .. } => at(format!("column {}: not UTF-8 text", err.field() + 1)),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_type_names_become_what_the_file_holds() {
        let cases = [
            ("invalid type: string \"x\", expected u64", "invalid type: string \"x\", expected a whole number ≥ 0"),
            ("invalid type: integer `5`, expected struct Raw", "invalid type: integer `5`, expected an object `{…}`"),
            ("data did not match any variant of untagged enum SessionKey", "a value of none of the accepted kinds"),
            ("invalid type: map, expected a sequence", "invalid type: an object `{…}`, expected a list `[…]`"),
            ("invalid type: sequence, expected a string", "invalid type: a list `[…]`, expected a string"),
            ("unknown variant `x`, expected one of `a`, `b`", "unknown value `x`, expected one of `a`, `b`"),
            (
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a whole number from 0 to 4294967295",
            ),
            ("invalid type: string \"x\", expected f64", "invalid type: string \"x\", expected a number"),
            ("invalid length 3, expected a tuple of size 2", "invalid length 3, expected a list `[…]` of 2 values"),
        ];
        for (rust, words) in cases {
            assert_eq!(plain(rust, Syntax::Json), words);
        }
        assert_eq!(
            plain("invalid type: integer `1`, expected struct Gpu", Syntax::Toml),
            "invalid type: integer `1`, expected a table"
        );
        // Names in backticks are the file's own, not Rust's.
        assert_eq!(plain("unknown field `u32`, expected `a`", Syntax::Json), "unknown field `u32`, expected `a`");
        for s in ["struct", "enum", "variant", "u32", "f64"] {
            assert!(
                find_word(
                    &plain("invalid type: unit variant, expected struct A or enum B::C, u32 f64", Syntax::Json),
                    s
                )
                .is_none(),
                "{s}"
            );
        }
    }

    #[test]
    fn positions_count_from_one() {
        assert_eq!(line_column("ab\ncd", 0), (1, 1));
        assert_eq!(line_column("ab\ncd", 4), (2, 2));
        assert_eq!(line_column("é\nx", 1), (1, 1));
        let text = "a = 1\nb = \"x\"\n";
        let e = toml::from_str::<std::collections::BTreeMap<String, u32>>(text).unwrap_err();
        assert_eq!(
            toml_error(text, &e),
            "line 2, column 5: invalid type: string \"x\", expected a whole number from 0 to 4294967295"
        );
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Row {
            a: u32,
        }
        let mut rd = csv::Reader::from_reader("a\n1\nx\n".as_bytes());
        let h = rd.headers().unwrap().clone();
        let e = rd.deserialize::<Row>().nth(1).unwrap().unwrap_err();
        assert_eq!(csv_error(&e, Some(&h)), "line 3, field `a`: invalid digit found in string");
    }
}
