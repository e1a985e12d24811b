//! The commands, each a function that returns its [`Answer`] — the output document (the
//! report, the table, the JSON), the lines for stderr after it, and a failure found after it was
//! made — and prints nothing but progress bars and notes on stderr; only `main` writes the
//! document, exits and shows errors. [`execute`] runs a whole command line the way the binary
//! does — the deployment file expanded, list values as grid axes, clap's parse, the dispatch — so
//! the Python binding gets the command line's answers from the same code.

pub mod analyze;
pub mod cache;
pub mod calibrate;
pub mod calibrate_report;
pub mod calibrate_shared;
pub mod files;
pub mod gen;
pub mod list;
pub mod run;
pub mod sweep;

use crate::cli::{self, Cli, Command};
use anyhow::Context;
use cachesim::text::thousands;
use indicatif::{ProgressBar, ProgressStyle};
use std::ffi::OsString;
use std::io::Write;

/// What a command answers, for `main` (or the Python binding) to write out.
pub struct Answer {
    /// The output document, as the binary writes it to stdout.
    pub document: Document,
    /// Lines for stderr after the document (failed requests, cut outputs).
    pub notes: Vec<String>,
    /// A failure found once the document was made — every request failed, a gate did not hold:
    /// the binary writes the document and the notes, then this error, and exits with status 1.
    pub failed: Option<anyhow::Error>,
}

/// A command's output document.
pub enum Document {
    /// Nothing on stdout (`merge`).
    Empty,
    /// A finished document: a report, a table, JSON.
    Text(String),
    /// A document written as it is drawn, too long to hold (`gen` without `--output`): the
    /// function writes it and returns the line for stderr after it.
    Stream(Box<Writer>),
}

/// A [`Document::Stream`]'s writer: writes the document, returns the line for stderr after it.
pub type Writer = dyn FnOnce(&mut dyn Write) -> anyhow::Result<String> + Send;

impl Answer {
    /// An answer of `text` alone.
    pub fn text(text: String) -> Answer {
        Answer { document: Document::Text(text), notes: Vec::new(), failed: None }
    }

    /// Writes the document to `out` and returns what is left for stderr: the notes, and the
    /// failure.
    pub fn write(self, out: &mut dyn Write) -> anyhow::Result<(Vec<String>, Option<anyhow::Error>)> {
        let mut notes = Vec::new();
        match self.document {
            Document::Empty => {}
            Document::Text(t) => out.write_all(t.as_bytes())?,
            Document::Stream(f) => notes.push(f(out)?),
        }
        out.flush()?;
        notes.extend(self.notes);
        Ok((notes, self.failed))
    }
}

/// Runs the command line `argv` (the program's name first) as the binary does and returns its
/// answer. A `--help` or a parse error comes back as the clap error, for the caller to print (and
/// exit with its code).
pub fn execute(argv: Vec<OsString>) -> Result<Answer, Failure> {
    let cmd = <Cli as clap::CommandFactory>::command();
    let run_flags = <cli::CaseRun as clap::CommandFactory>::command();
    // A --deployment file's flags go before the user's, which override them (docs/guide/cluster.md, Deployment files).
    let argv = crate::deployment::command_line(argv, &cmd, &run_flags).map_err(|e| Failure::Usage(e.to_string()))?;
    let matches = cmd.try_get_matches_from(sweep::lists_as_axes(argv.args)).map_err(Failure::Clap)?;
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).map_err(Failure::Clap)?;
    let deployment = argv.echo.as_ref();
    let run_matches = match &cli.command {
        None => Some((&matches, &cli.run.run)),
        Some(Command::Run(args)) => matches.subcommand_matches("run").map(|m| (m, &args.run)),
        _ => None,
    };
    if let Some((m, args)) = run_matches {
        cli::refuse_foreign_flags(m, args).map_err(|e| Failure::Run(e.into()))?;
    }
    match cli.command {
        None => run::run(&cli.run, deployment),
        Some(Command::Run(args)) => run::run(&args, deployment),
        Some(Command::Cache(args)) => cache::cache(&args),
        Some(Command::Analyze(args)) => analyze::analyze(&args),
        Some(Command::Gen(g)) => gen::generate(&g),
        Some(Command::Sweep(args)) => sweep::sweep(&args, matches.subcommand_matches("sweep").expect("sweep matches")),
        Some(Command::Merge(args)) => sweep::merge(&args),
        Some(Command::List(args)) => list::list(&args),
        Some(Command::Calibrate(args)) => calibrate::calibrate(&args),
        Some(Command::Validate(args)) => calibrate::validate(&args),
        Some(Command::Plan(args)) => sweep::plan(&args, matches.subcommand_matches("plan").expect("plan matches")),
    }
    .map_err(Failure::Run)
}

/// Why a command line did not run to its end.
#[derive(Debug)]
pub enum Failure {
    /// The deployment file could not be expanded into flags (exit status 2).
    Usage(String),
    /// clap's own answer: `--help`, `--version` or a parse error, printed and exited with by
    /// [`clap::Error::exit`].
    Clap(clap::Error),
    /// The command failed (exit status 1).
    Run(anyhow::Error),
}

impl Failure {
    /// The message as the binary prints it after `error: ` (clap's errors print themselves).
    pub fn text(&self) -> String {
        match self {
            Failure::Usage(m) => escape_controls(m),
            Failure::Clap(e) => e.to_string(),
            Failure::Run(e) => error_text(e),
        }
    }
}

/// The error and its causes joined by `: `, skipping a cause whose text the previous one already
/// ends with (libraries often print their source inside their own message), with control
/// characters escaped so that bytes from a binary file never reach the terminal raw.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if parts.last().is_some_and(|p| p.ends_with(&t)) {
            continue;
        }
        parts.push(t);
    }
    escape_controls(&parts.join(": "))
}

/// `s` with control characters other than line breaks and tabs written as escapes.
fn escape_controls(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// "1 request", "2 requests".
pub fn plural(n: u64, what: &str) -> String {
    format!("{} {what}{}", thousands(n), if n == 1 { "" } else { "s" })
}

/// A progress bar of `len` steps with `template`, drawn only when stderr is a terminal.
pub fn bar(len: u64, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(ProgressStyle::with_template(template).expect("static template"));
    pb
}

/// Reads and tokenises the trace `t` names (the bundled sample without one), with a spinner.
pub fn load(
    t: &cli::TraceArgs,
    build: &cachesim::workload::BuildOptions,
) -> anyhow::Result<cachesim::workload::Workload> {
    let sp = spinner("reading and tokenizing the trace");
    let w = cachesim::load_workload(t.trace.as_deref(), &t.read_options(), build).context("cannot load the trace")?;
    sp.finish_and_clear();
    Ok(w)
}

pub fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Writes `rows` as CSV to a temporary file that becomes `path` when `files` is committed.
pub fn write_csv<T: cachesim::table::TableRow>(
    files: &mut cachesim::output::Outputs,
    path: &std::path::Path,
    rows: &[T],
) -> anyhow::Result<()> {
    let tmp = files.stage(path)?;
    let mut file = std::fs::File::create(&tmp).with_context(|| format!("cannot create {}", path.display()))?;
    T::write_csv(rows, &mut file).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document is written first; a stream's closing line comes before the other notes; the
    /// failure is handed back, not raised.
    #[test]
    fn an_answer_writes_its_document_then_hands_back_notes_and_failure() {
        let mut out = Vec::new();
        let a = Answer {
            document: Document::Stream(Box::new(|w: &mut dyn Write| {
                w.write_all(b"{\"a\":1}\n")?;
                Ok("1 record".to_string())
            })),
            notes: vec!["a note".to_string()],
            failed: Some(anyhow::anyhow!("gate")),
        };
        let (notes, failed) = a.write(&mut out).unwrap();
        assert_eq!(out, b"{\"a\":1}\n");
        assert_eq!(notes, ["1 record", "a note"]);
        assert_eq!(failed.map(|e| e.to_string()).as_deref(), Some("gate"));
        let mut out = Vec::new();
        let (notes, failed) = Answer::text("report\n".into()).write(&mut out).unwrap();
        assert_eq!((out.as_slice(), notes.is_empty(), failed.is_none()), (&b"report\n"[..], true, true));
    }
}
