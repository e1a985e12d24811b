//! The `cachesim` binary: runs the command line through [`cachesim::commands::execute`], writes
//! the answer's document to stdout and its notes to stderr, and turns what failed into a message
//! and an exit status: 2 for a command line that cannot be read (clap's own, or a deployment
//! file's), 1 for a command that failed. Nothing here panics on user input; messages are printed
//! once, with control characters escaped.

use cachesim::commands::{error_text, execute, Failure};

fn main() {
    let answer = match execute(std::env::args_os().collect()) {
        Ok(a) => a,
        Err(Failure::Clap(e)) => e.exit(),
        Err(f @ Failure::Usage(_)) => {
            eprintln!("error: {}", f.text());
            std::process::exit(2)
        }
        Err(f @ Failure::Run(_)) => {
            eprintln!("error: {}", f.text());
            std::process::exit(1)
        }
    };
    let written = answer.write(&mut std::io::stdout().lock());
    let failed = match written {
        Ok((notes, failed)) => {
            for line in notes {
                eprintln!("{line}");
            }
            failed
        }
        Err(e) => Some(e),
    };
    if let Some(e) = failed {
        eprintln!("error: {}", error_text(&e));
        std::process::exit(1);
    }
}
