//! The tests that drive the real `mend` binary and `mend serve`, as one test binary: one
//! module per file, so that the build links one executable rather than one per file (each
//! links wasmtime, sqlx and the server; a binary per file took gigabytes of disk).

mod common;

mod attacks;
mod attacks_tls;
mod cli;
mod cli_boundary;
mod cli_commands;
mod cli_operations;
mod cli_output;
mod demo;
mod external_writers;
mod fleet;
mod hints;
mod logs;
mod ops;
mod policy_new;
mod postgres_notices;
mod request;
mod security;
mod server;
mod server_boundary;
mod server_idempotency;
mod server_json_body;
mod server_limits;
mod server_races;
mod tokens;
