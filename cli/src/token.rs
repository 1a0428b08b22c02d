//! `mend token new`: a principal's secret, printed once, and the line of a tokens file
//! ([`mend_server::auth`]) that names the principal by the secret's hash. Nothing is written
//! anywhere: the operator adds the line, and hands the secret to the principal.

use anyhow::Context;
use mend_server::auth::{self, Grant};
use serde::Serialize;

use super::BadInput;
use super::output;

/// What `mend token new` prints.
#[derive(Debug, Serialize)]
struct NewToken<'a> {
    principal: &'a str,
    grants: Vec<String>,
    /// The secret, shown this once.
    secret: String,
    /// The line to add to the tokens file: the secret's hash, never the secret.
    tokens_file_line: String,
}

/// Makes `principal`'s secret with `grants` (each `admin`, `read:P`, `write:P` or
/// `operate:P`) and prints it with its tokens file line.
pub fn new(principal: &str, grants: &[String], json: bool) -> anyhow::Result<()> {
    // The library's messages never repeat the text they refuse (a tokens file's refused
    // line may hold a pasted secret); here the text is the caller's own argument.
    auth::check_principal_name(principal)
        .map_err(|error| BadInput(format!("principal {principal:?}: {error}")))?;
    let grants: Vec<Grant> = grants
        .iter()
        .map(|grant| Grant::parse(grant).map_err(|error| format!("--grant {grant:?}: {error}")))
        .collect::<Result<_, _>>()
        .map_err(BadInput)?;
    if grants.len() > auth::MAX_GRANTS {
        return Err(BadInput(format!(
            "{} grants; a principal holds at most {}",
            grants.len(),
            auth::MAX_GRANTS
        ))
        .into());
    }
    let secret = auth::new_secret().context("draw a secret from the operating system")?;
    let made = NewToken {
        principal,
        grants: grants.iter().map(ToString::to_string).collect(),
        tokens_file_line: auth::tokens_file_line(principal, &secret, &grants),
        secret,
    };
    output::json_or(&made, json, || {
        format!(
            "secret of {principal} (shown this once: give it to {principal} only):\n  {}\nits tokens file line, which holds only its hash:\n  {}",
            made.secret, made.tokens_file_line
        )
    })
}
