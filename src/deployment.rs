//! Deployment files (`--deployment FILE.toml`): a deployment written once and run with one flag.
//! The file's keys are `cachesim run`'s own flag names (kebab-case, without `--`), so the format
//! cannot drift from the command line and every new flag works in files at once: a top-level
//! `key = value` is `--key=value` (booleans: `true` is `--key`, `false` leaves it out; arrays
//! repeat the flag, or join with its delimiter), `[prefill]` and `[decode]` keys are
//! `--prefill-KEY` and `--decode-KEY`, `[router]` keys are plain flags with `policy` for
//! `--router`, `[link]` keys are `--kv-link-KEY` with `count` for `--kv-links`. `name` and
//! `description` are the file's own metadata. Paths are relative to the file's folder.
//!
//! The binary inserts the file's arguments before the user's and parses once, so flags given on
//! the command line win ([`command_line`]); each key is checked against the flags of `run` (the
//! `clap::Command` passed in) with its file, line and key in every error.

use crate::config::DeploymentEcho;
use crate::error::{Error, Location, RecordError, Result};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// A deployment file as read: its metadata and one entry per flag key, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    /// The file, as given.
    pub path: PathBuf,
    /// `name = "…"`.
    pub name: Option<String>,
    /// `description = "…"`.
    pub description: Option<String>,
    pub entries: Vec<Entry>,
}

/// One key of the file and the flag it stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key as written, with its table: `max-num-seqs`, `prefill.max-num-seqs`.
    pub key: String,
    /// 1-based line of the key.
    pub line: usize,
    /// The flag's long name, without `--`: `prefill-max-num-seqs`.
    pub flag: String,
    pub value: Value,
}

/// A key's value, as flag words will carry it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Bool(bool),
    /// A string or number, written as the command line would write it.
    One(String),
    /// An array of strings or numbers.
    Many(Vec<String>),
}

impl Value {
    /// The value as the file gives it, for echoes.
    pub fn text(&self) -> String {
        match self {
            Value::Bool(b) => b.to_string(),
            Value::One(s) => s.clone(),
            Value::Many(v) => v.join(","),
        }
    }
}

/// An entry checked against the command: the argument it sets and its command-line words.
#[derive(Debug, Clone, PartialEq)]
pub struct Argument {
    pub entry: Entry,
    /// clap's id of the argument (`max_num_seqs`).
    pub id: String,
    /// The flag's long name (`block-size` for a key `block`).
    pub long: String,
    /// `--flag=value` words (none for `false`).
    pub words: Vec<OsString>,
}

/// The table prefixes: (table, flag of a key `k` in it).
fn flag_in_table(table: &str, key: &str) -> Option<String> {
    match (table, key) {
        ("prefill" | "decode", k) => Some(format!("{table}-{k}")),
        ("router", "policy") => Some("router".into()),
        ("router", k) => Some(k.into()),
        ("link", "count") => Some("kv-links".into()),
        ("link", k) => Some(format!("kv-link-{k}")),
        _ => None,
    }
}

/// An error at `line` of the file, about `key` (the whole file when empty), printed as the
/// project's other files print theirs: FILE: line N: field \`KEY\`: message.
fn record(path: &Path, line: usize, key: &str, message: String) -> Error {
    Error::Record {
        path: path.to_path_buf(),
        error: RecordError { location: Location::Line(line as u64), field: key.to_string(), message },
    }
}

/// Reads and parses a deployment file.
pub fn load(path: &Path) -> Result<Deployment> {
    let text = std::fs::read_to_string(path).map_err(|error| Error::Io { path: path.to_path_buf(), error })?;
    parse(path, &text)
}

/// Parses a deployment file's text (`path` names it in errors and anchors relative paths).
pub fn parse(path: &Path, text: &str) -> Result<Deployment> {
    let line = |span: std::ops::Range<usize>| text[..span.start.min(text.len())].matches('\n').count() + 1;
    let root: Table = toml::from_str(text).map_err(|e| {
        let at = e.span().map_or(1, &line);
        record(path, at, "", crate::messages::plain(e.message(), crate::messages::Syntax::Toml))
    })?;
    let err = |line: usize, key: &str, message: String| record(path, line, key, message);
    let mut d = Deployment { path: path.to_path_buf(), name: None, description: None, entries: Vec::new() };
    for (k, v) in root.0 {
        let (key, at) = (k.get_ref().as_str(), line(k.span()));
        match (key, v.into_inner()) {
            ("name" | "description", Node::Scalar(Value::One(s))) if !s.is_empty() => {
                *(if key == "name" { &mut d.name } else { &mut d.description }) = Some(s);
            }
            ("name" | "description", _) => return Err(err(at, key, "must be a non-empty string".into())),
            (_, Node::Table(t)) => {
                for (k2, v2) in t.0 {
                    let full = format!("{key}.{}", k2.get_ref());
                    let at2 = line(k2.span());
                    let flag = flag_in_table(key, k2.get_ref()).ok_or_else(|| {
                        err(at, key, "unknown table (tables: [prefill], [decode], [router], [link])".into())
                    })?;
                    let value = match v2.into_inner() {
                        Node::Scalar(v) => v,
                        Node::Table(_) => return Err(err(at2, &full, "a table cannot nest here".into())),
                    };
                    d.entries.push(Entry { key: full, line: at2, flag, value });
                }
            }
            (_, Node::Scalar(value)) => d.entries.push(Entry { key: key.into(), line: at, flag: key.into(), value }),
        }
    }
    Ok(d)
}

impl Deployment {
    /// The folder relative paths in the file start from.
    pub fn folder(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new(""))
    }

    fn error(&self, e: &Entry, message: impl Into<String>) -> Error {
        record(&self.path, e.line, &e.key, message.into())
    }

    /// Every entry matched with its flag in `cmd` (a command with `run`'s flags) and turned
    /// into its words: unknown keys, keys naming one flag twice and values of the wrong shape
    /// (an array for a one-value flag, a number for a switch) are errors naming the file, line
    /// and key; paths are made relative to the file's folder. [`Deployment::check`] checks the
    /// values themselves.
    pub fn arguments(&self, cmd: &clap::Command) -> Result<Vec<Argument>> {
        let mut out: Vec<Argument> = Vec::new();
        for e in &self.entries {
            let arg = find(cmd, &e.flag).filter(|a| !matches!(a.get_id().as_str(), "deployment" | "help" | "version"));
            let Some(arg) = arg else {
                let hint = if find(cmd, &e.flag.replace('_', "-")).is_some() {
                    format!("; keys are the flags' names: `{}`", e.key.replace('_', "-"))
                } else {
                    String::new()
                };
                return Err(self.error(e, format!("unknown key: `--{}` is not a flag of `cachesim run`{hint}", e.flag)));
            };
            if let Some(prior) = out.iter().find(|a| a.id == arg.get_id().as_str()) {
                return Err(self
                    .error(e, format!("sets the same flag as key `{}` (line {})", prior.entry.key, prior.entry.line)));
            }
            let long = arg.get_long().unwrap_or(&e.flag);
            let is_path = matches!(
                arg.get_value_hint(),
                clap::ValueHint::AnyPath | clap::ValueHint::FilePath | clap::ValueHint::DirPath
            );
            let value = |v: &str| -> OsString {
                if is_path && Path::new(v).is_relative() {
                    self.folder().join(v).into_os_string()
                } else {
                    v.into()
                }
            };
            let word = |v: OsString| {
                let mut w = OsString::from(format!("--{long}="));
                w.push(v);
                w
            };
            let takes_values = arg.get_action().takes_values();
            let words: Vec<OsString> = match &e.value {
                Value::Bool(b) if !takes_values => {
                    if *b {
                        vec![format!("--{long}").into()]
                    } else {
                        vec![]
                    }
                }
                Value::Bool(b) => vec![word(b.to_string().into())],
                _ if !takes_values => {
                    return Err(self.error(e, format!("`--{long}` takes no value: write true or false")))
                }
                Value::One(s) => vec![word(value(s))],
                Value::Many(v) if matches!(arg.get_action(), clap::ArgAction::Append) => {
                    v.iter().map(|s| word(value(s))).collect()
                }
                Value::Many(v) => match arg.get_value_delimiter() {
                    Some(d) => {
                        let parts: Vec<OsString> = v.iter().map(|s| value(s)).collect();
                        vec![word(parts.join(std::ffi::OsStr::new(&d.to_string())))]
                    }
                    None => return Err(self.error(e, format!("`--{long}` takes one value, not an array"))),
                },
            };
            out.push(Argument { entry: e.clone(), id: arg.get_id().to_string(), long: long.to_string(), words });
        }
        Ok(out)
    }

    /// Checks the values of `args` (from [`Deployment::arguments`]) as `cmd` parses them: each
    /// alone, so that clap's complaint names its key, then together (flags that exclude each
    /// other).
    pub fn check(&self, args: &[Argument], cmd: &clap::Command) -> Result<()> {
        // A flag that requires another (--prefill-instances, --decode-instances) may find it in
        // the file's next key or on the command line: the final parse judges what is missing.
        let parse = |words: Vec<&OsString>| match cmd.clone().no_binary_name(true).try_get_matches_from(words) {
            Err(e) if e.kind() == clap::error::ErrorKind::MissingRequiredArgument => Ok(()),
            other => other.map(|_| ()),
        };
        for a in args {
            if let Err(ce) = parse(a.words.iter().collect()) {
                return Err(self.error(&a.entry, with_keys(&first_line(&ce), std::slice::from_ref(a), &a.entry)));
            }
        }
        if let Err(ce) = parse(args.iter().flat_map(|a| &a.words).collect()) {
            let named = ce.get(clap::error::ContextKind::InvalidArg).map(|v| v.to_string()).unwrap_or_default();
            let at = args.iter().find(|a| named.split(' ').next() == Some(&format!("--{}", a.long))).or(args.last());
            if let Some(a) = at {
                return Err(self.error(&a.entry, with_keys(&first_line(&ce), args, &a.entry)));
            }
        }
        Ok(())
    }
}

/// clap's message with each quoted flag of `args` ('--max-num-seqs <MAX_NUM_SEQS>') written as
/// the file's key (key `max-num-seqs` (line 3), or `this key` for `this`).
fn with_keys(msg: &str, args: &[Argument], this: &Entry) -> String {
    let msg = msg.replace("the argument '--", "'--");
    let mut out = String::new();
    let mut rest = msg.as_str();
    while let Some(i) = rest.find("'--") {
        let Some(len) = rest[i + 1..].find('\'') else { break };
        let quoted = &rest[i + 1..i + 1 + len];
        let flag = quoted[2..].split(' ').next().unwrap_or("");
        out.push_str(&rest[..i]);
        match args.iter().find(|a| a.long == flag) {
            Some(a) if a.entry == *this => out.push_str("this key"),
            Some(a) => out.push_str(&format!("key `{}` (line {})", a.entry.key, a.entry.line)),
            None => out.push_str(&rest[i..i + len + 2]),
        }
        rest = &rest[i + len + 2..];
    }
    out.push_str(rest);
    out
}

/// The argument of `cmd` whose long name or alias is `flag`.
fn find<'a>(cmd: &'a clap::Command, flag: &str) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| a.get_long() == Some(flag) || a.get_all_aliases().is_some_and(|al| al.contains(&flag)))
}

/// clap's message on one line (its first paragraph, with the possible values), without its
/// `error: ` prefix and usage lines.
fn first_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let para: Vec<&str> = text.lines().take_while(|l| !l.trim().is_empty()).map(str::trim).collect();
    para.join(" ").trim_start_matches("error: ").to_string()
}

/// A command line with its deployment file expanded, and what the run echoes about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Expanded {
    pub args: Vec<OsString>,
    pub echo: Option<DeploymentEcho>,
}

/// `args` (the program's, binary name first) with the `--deployment` file's arguments inserted
/// before the user's, less those the user's flags override or exclude. `top` is the program's
/// command, `run` a command with `run`'s flags alone (keys are checked against it). A command
/// line without `--deployment` (or whose subcommand has no such flag) comes back unchanged.
pub fn command_line(args: Vec<OsString>, top: &clap::Command, run: &clap::Command) -> Result<Expanded> {
    let unchanged = |args| Ok(Expanded { args, echo: None });
    let sub = args.get(1).and_then(|a| a.to_str()).filter(|a| !a.starts_with('-')).and_then(|a| top.find_subcommand(a));
    let (cmd, at) = match sub {
        Some(s) => (s, 2),
        None => (top, 1),
    };
    if find(cmd, "deployment").is_none() || args.len() < at {
        return unchanged(args);
    }
    let user = &args[at..];
    let mut files = Vec::new();
    let mut words = user.iter().take_while(|w| w.as_os_str() != "--");
    while let Some(w) = words.next() {
        let w = w.to_string_lossy();
        if w == "--deployment" {
            files.extend(words.next().map(|f| PathBuf::from(f.clone())));
        } else if let Some(f) = w.strip_prefix("--deployment=") {
            files.push(PathBuf::from(f));
        }
    }
    let file = match files.as_slice() {
        [] => return unchanged(args),
        [f] => f.clone(),
        _ => {
            return Err(Error::invalid("--deployment", "one deployment file at a time (write the what-if as flags)"));
        }
    };
    let d = load(&file)?;
    let expanded = d.arguments(run)?;
    // The flags the user set: those the file's value gives way to.
    // Errors are left to the final parse: a flag the user's own flags require may be in the file.
    let parsed =
        cmd.clone().no_binary_name(true).args_override_self(true).ignore_errors(true).try_get_matches_from(user);
    let set: BTreeSet<String> = match &parsed {
        Ok(m) => cmd
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .filter(|id| m.value_source(id) == Some(clap::parser::ValueSource::CommandLine))
            .map(String::from)
            .collect(),
        // --help, --version: printed by the final parse.
        Err(_) => BTreeSet::new(),
    };
    let excludes = |a: &str, b: &str| {
        let conflicts = |x: &str, y: &str| {
            run.get_arguments()
                .find(|arg| arg.get_id().as_str() == x)
                .is_some_and(|arg| run.get_arg_conflicts_with(arg).iter().any(|c| c.get_id().as_str() == y))
        };
        conflicts(a, b) || conflicts(b, a)
    };
    let mut echo = DeploymentEcho {
        path: file.display().to_string(),
        name: d.name.clone(),
        overridden: Vec::new(),
        file_values: Vec::new(),
    };
    // The command line's flags replace the file's (and any they exclude), whose values are then
    // not checked: a what-if may replace a value this build does not know.
    let (overridden, kept): (Vec<Argument>, Vec<Argument>) =
        expanded.into_iter().partition(|a| set.iter().any(|s| *s == a.id || excludes(s, &a.id)));
    d.check(&kept, run)?;
    for a in &overridden {
        echo.overridden.push(a.entry.key.clone());
        echo.file_values.push(a.entry.value.text());
    }
    let mut out: Vec<OsString> = args[..at].to_vec();
    out.extend(kept.into_iter().flat_map(|a| a.words));
    out.extend(user.iter().cloned());
    Ok(Expanded { args: out, echo: Some(echo) })
}

/// A TOML table with its keys in file order, each key and value with its span.
struct Table(Vec<(Spanned<String>, Spanned<Node>)>);

/// A TOML value: a table or a flag value.
enum Node {
    Table(Table),
    Scalar(Value),
}

impl<'de> Deserialize<'de> for Table {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        match Node::deserialize(d)? {
            Node::Table(t) => Ok(t),
            Node::Scalar(_) => Err(de::Error::custom("expected a table")),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

/// A number or string as a flag value; arrays hold these only.
fn scalar<E: de::Error>(n: Node) -> std::result::Result<String, E> {
    match n {
        Node::Scalar(Value::One(s)) => Ok(s),
        Node::Scalar(Value::Bool(b)) => Ok(b.to_string()),
        _ => Err(E::custom("arrays hold strings or numbers only")),
    }
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string, number, boolean, array or table")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Node, E> {
        Ok(Node::Scalar(Value::Bool(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Node, E> {
        Ok(Node::Scalar(Value::One(v.to_string())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Node, E> {
        Ok(Node::Scalar(Value::One(v.to_string())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Node, E> {
        // Rust prints 64.0 as `64`, 1e-3 as `0.001` and infinity as `inf`, as the flags read them.
        Ok(Node::Scalar(Value::One(v.to_string())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Node, E> {
        Ok(Node::Scalar(Value::One(v.to_string())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(n) = seq.next_element::<Node>()? {
            out.push(scalar(n)?);
        }
        Ok(Node::Scalar(Value::Many(out)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Node, A::Error> {
        let mut out = Vec::new();
        while let Some(k) = map.next_key::<Spanned<String>>()? {
            if k.get_ref().starts_with("$__toml_private") {
                return Err(de::Error::custom("a date or time is not a flag value"));
            }
            out.push((k, map.next_value::<Spanned<Node>>()?));
        }
        Ok(Node::Table(Table(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Deployment {
        parse(Path::new("dir/d.toml"), text).expect("parses")
    }

    #[test]
    fn tables_map_to_flags_with_lines() {
        let d = parsed(
            "name = \"x\"\nmax-num-seqs = 64\n[prefill]\nmax-num-seqs = 8\n[router]\npolicy = \"random\"\n\
             cache-threshold = 0.5\n[link]\ngbps = 100\ncount = 2\n",
        );
        assert_eq!(d.name.as_deref(), Some("x"));
        let got: Vec<(&str, usize, &str, String)> =
            d.entries.iter().map(|e| (e.key.as_str(), e.line, e.flag.as_str(), e.value.text())).collect();
        assert_eq!(
            got,
            vec![
                ("max-num-seqs", 2, "max-num-seqs", "64".to_string()),
                ("prefill.max-num-seqs", 4, "prefill-max-num-seqs", "8".to_string()),
                ("router.policy", 6, "router", "random".to_string()),
                ("router.cache-threshold", 7, "cache-threshold", "0.5".to_string()),
                ("link.gbps", 9, "kv-link-gbps", "100".to_string()),
                ("link.count", 10, "kv-links", "2".to_string()),
            ]
        );
    }

    #[test]
    fn refusals_name_line_and_key() {
        let e = parse(Path::new("d.toml"), "a = 1\n[engine]\nx = 1\n").unwrap_err().to_string();
        assert!(e.contains("d.toml: line 2: field `engine`: unknown table"), "{e}");
        let e = parse(Path::new("d.toml"), "\n\nname = true\n").unwrap_err().to_string();
        assert!(e.contains("d.toml: line 3: field `name`"), "{e}");
        let e = parse(Path::new("d.toml"), "[prefill]\n[prefill.x]\ny = 1\n").unwrap_err().to_string();
        assert!(e.contains("line 2: field `prefill.x`: a table cannot nest here"), "{e}");
        assert!(parse(Path::new("d.toml"), "when = 1979-05-27\n").is_err());
        assert!(parse(Path::new("d.toml"), "a = [[1]]\n").is_err());
    }
}
