//! The `mend` command: parses flags and hands over to [`cli::run`].

mod cli;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", cli::one_line(&error));
            if let Some(hint) = cli::hint(&error) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(cli::exit_code(&error))
        }
    }
}
