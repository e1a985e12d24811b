//! The `cachesim` binary: runs the command line through [`cachesim::commands::execute`], which
//! writes the command's output to stdout, and turns what failed into a message and an exit
//! status: 2 for a command line that cannot be read (clap's own, or a deployment file's), 1 for
//! a command that failed. Nothing here panics on user input; messages are printed once, with
//! control characters escaped.

use cachesim::commands::{execute, Failure};
use std::io::Write;

fn main() {
    let mut stdout = std::io::stdout().lock();
    let result = execute(std::env::args_os().collect(), &mut stdout);
    let _ = stdout.flush();
    drop(stdout);
    match result {
        Ok(()) => {}
        Err(Failure::Clap(e)) => e.exit(),
        Err(f @ Failure::Usage(_)) => {
            eprintln!("error: {}", f.text());
            std::process::exit(2)
        }
        Err(f @ Failure::Run(_)) => {
            eprintln!("error: {}", f.text());
            std::process::exit(1);
        }
    }
}
