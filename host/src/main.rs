//! The `mend` command: parses flags and hands over to [`cli::run`].

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(cli::run(args));
    // `cli::run` has waited for everything that matters (the gates' releases included). A
    // command cancelled by a signal may leave a blocking call behind, such as a read of a
    // file that never answers; the process must not wait for it, as dropping the runtime
    // would.
    runtime.shutdown_background();
    match result {
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
