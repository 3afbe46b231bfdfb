//! The `weir` binary: parse arguments, set up logging, run, map the result
//! to an exit code (0 ok, 1 runtime failure, 2 bad usage or invalid input).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = weir::cli::Cli::parse();
    weir::cli::init_logging(&cli);
    match weir::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            weir::cli::exit_code_for(&err)
        }
    }
}
