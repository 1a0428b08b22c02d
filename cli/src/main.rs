//! The `mend` command: parses flags and hands over to [`mend_mend_cli::run`].

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = mend_cli::Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(mend_cli::run(args));
    // `mend_cli::run` has waited for everything that matters (the gates' releases included). A
    // command cancelled by a signal may leave a blocking call behind, such as a read of a
    // file that never answers; the process must not wait for it, as dropping the runtime
    // would.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The command's answer when it failed, not a log line: written whatever the log
        // settings say (a bad one among them), in the form scripts and tests read.
        Err(error) => {
            eprintln!("error: {}", mend_cli::one_line(&error));
            if let Some(hint) = mend_cli::hint(&error) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(mend_cli::exit_code(&error))
        }
    }
}
