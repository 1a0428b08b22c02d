//! Fuzz entry points for what the server parses from clients: the bodies of stage, publish,
//! config, create and the split-id routes, and the listing's query string (see
//! `mend::fuzzing` for what every entry point asserts and who drives them). Public for the
//! drivers and hidden from the docs.

use std::collections::HashMap;

use bytes::Bytes;
use mend::fuzzing::{
    DATASET, Target, Verdict, check_config, check_listing, check_new_split,
    expect_invalid_argument, limits,
};
use mend::invariants;
use mend::model::DatasetConfig;
use mend::validate::{self, StageLimits};
use mend_contract::{ExistingRow, StagePlanInput};

use crate::body;
use crate::error::ApiError;
use crate::routes;

/// The server's entry points, by the name of their `cargo fuzz` target and corpus directory.
pub const TARGETS: &[(&str, Target)] = &[
    ("stage_request_body", stage_request_body),
    ("stage_compact_body", stage_compact_body),
    ("begin_compact_body", begin_compact_body),
    ("publish_request_body", publish_request_body),
    ("apply_config_body", apply_config_body),
    ("create_dataset_body", create_dataset_body),
    ("split_ids_body", split_ids_body),
    ("list_query", list_query),
    ("authorization_header", authorization_header),
    ("tokens_file", tokens_file),
];

/// `POST /v1/datasets/{dataset}/stage`'s body, parsed as the server parses it, then validated
/// as the engine validates it. Accepted: one validated split per requested one, each id in the
/// one alphabet, each metadata a JSON object within the limit, each time range ordered; and
/// the default policy's plan for it on an empty dataset passes the host's invariant check.
pub fn stage_request_body(data: &[u8]) -> Verdict {
    match body::parse::<routes::Stage>(&Bytes::copy_from_slice(data)) {
        Ok(parsed) => check_stage("stage_request_body", parsed),
        Err(error) => expect_bad_request("stage_request_body: parse", &error),
    }
}

/// The same stage body in the compact encoding (`application/vnd.mend.compact.v1`), parsed as
/// the server parses it: a body that does not decode whole is a 400 with words, and one that
/// does is held to everything [`stage_request_body`] holds a JSON one to.
pub fn stage_compact_body(data: &[u8]) -> Verdict {
    match body::parse_compact::<routes::Stage>(&Bytes::copy_from_slice(data)) {
        Ok(parsed) => check_stage("stage_compact_body", parsed),
        Err(error) => expect_bad_request("stage_compact_body: parse", &error),
    }
}

/// The operation protocol's begin in the compact encoding. A body that does not decode whole
/// is a 400 with words. One that decodes holds no more splits than its bytes can encode (each
/// at least 4: three lengths and a size), so no count in the body made the server allocate
/// past what was sent, and becomes a request for the dataset.
pub fn begin_compact_body(data: &[u8]) -> Verdict {
    match body::parse_compact::<routes::Begin>(&Bytes::copy_from_slice(data)) {
        Ok(parsed) => {
            let request = parsed.into_request(DATASET.to_owned());
            assert!(
                request.splits.len() * 4 <= data.len(),
                "begin_compact_body: {} splits out of {} bytes",
                request.splits.len(),
                data.len()
            );
            assert_eq!(request.dataset_id, DATASET, "begin_compact_body");
            Verdict::Accepted
        }
        Err(error) => expect_bad_request("begin_compact_body: parse", &error),
    }
}

/// A parsed stage body, validated as the engine validates it (see [`stage_request_body`]).
fn check_stage(target: &str, parsed: routes::Stage) -> Verdict {
    let request = parsed.into_request(DATASET.to_owned());
    let limits = limits();
    let stage_limits = StageLimits {
        max_batch: limits.max_stage_batch,
        max_metadata_bytes: limits.max_metadata_bytes,
    };
    let requested = match validate::stage_request(&request, stage_limits) {
        Ok(requested) => requested,
        Err(error) => return expect_invalid_argument(&format!("{target}: validate"), &error),
    };
    assert_eq!(requested.len(), request.splits.len(), "{target}");
    for (split, asked) in requested.iter().zip(&request.splits) {
        check_new_split(split, &asked.split_id, limits.max_metadata_bytes);
    }
    // The rest of the engine's path that needs no catalog: the policy plans, the host checks.
    let mut split_ids: Vec<String> = requested.iter().map(|s| s.split_id.clone()).collect();
    split_ids.sort();
    split_ids.dedup();
    let input = StagePlanInput {
        dataset_id: request.dataset_id.clone(),
        mode: request.mode,
        split_ids: requested.iter().map(|s| s.split_id.clone()).collect(),
        existing: Vec::<ExistingRow>::new(),
    };
    let planned = mend_default_policy::plan_stage(&input);
    invariants::checked_stage_plan(request.mode, &requested, &split_ids, &[], planned)
        .unwrap_or_else(|error| {
            panic!("{target}: the default plan on an empty dataset is refused: {error}")
        });
    Verdict::Accepted
}

/// `POST /v1/datasets/{dataset}/publish`'s body, parsed, then validated as the engine does.
/// Accepted: every id is valid, none is both published and replaced, the request names
/// something, and every checkpoint partition moves forward.
pub fn publish_request_body(data: &[u8]) -> Verdict {
    let request = match body::parse::<routes::Publish>(&Bytes::copy_from_slice(data)) {
        Ok(parsed) => parsed.into_request(DATASET.to_owned()),
        Err(error) => return expect_bad_request("publish_request_body: parse", &error),
    };
    let limits = limits();
    if let Err(error) = validate::publish_request(&request, limits.max_stage_batch) {
        return expect_invalid_argument("publish_request_body: validate", &error);
    }
    let ids = request
        .staged_split_ids
        .iter()
        .chain(&request.replaced_split_ids);
    for id in ids {
        validate::split_id(id).expect("publish_request_body: an accepted publish's split id");
    }
    assert!(
        request
            .staged_split_ids
            .iter()
            .all(|id| !request.replaced_split_ids.contains(id)),
        "publish_request_body: a split both published and replaced"
    );
    assert!(
        !request.staged_split_ids.is_empty()
            || !request.replaced_split_ids.is_empty()
            || request.checkpoint_delta.is_some(),
        "publish_request_body: an empty publish"
    );
    for partition in request
        .checkpoint_delta
        .iter()
        .flat_map(|delta| &delta.partitions)
    {
        assert!(
            partition
                .from_position
                .is_none_or(|from| from < partition.to_position),
            "publish_request_body: a partition moving backwards"
        );
    }
    Verdict::Accepted
}

/// `POST /v1/datasets/{dataset}/config`'s body, parsed, then validated as the engine does.
/// Accepted: the grace periods are in their ranges and the node is a valid name.
pub fn apply_config_body(data: &[u8]) -> Verdict {
    let request = match body::parse::<routes::ApplyConfig>(&Bytes::copy_from_slice(data)) {
        Ok(request) => request,
        Err(error) => return expect_bad_request("apply_config_body: parse", &error),
    };
    if let Err(error) =
        validate::config(&request.config).and_then(|()| validate::node(&request.node))
    {
        return expect_invalid_argument("apply_config_body: validate", &error);
    }
    check_config("apply_config_body", &request.config);
    Verdict::Accepted
}

/// `POST /v1/datasets`'s body, parsed, merged with the default config, then validated as the
/// engine does. Accepted: the id is in the one alphabet, the config's numbers in their ranges.
pub fn create_dataset_body(data: &[u8]) -> Verdict {
    let request = match body::parse::<routes::CreateDataset>(&Bytes::copy_from_slice(data)) {
        Ok(request) => request,
        Err(error) => return expect_bad_request("create_dataset_body: parse", &error),
    };
    let config = request.config(&DatasetConfig::default());
    if let Err(error) =
        validate::dataset_id(&request.dataset_id).and_then(|()| validate::config(&config))
    {
        return expect_invalid_argument("create_dataset_body: validate", &error);
    }
    check_config("create_dataset_body", &config);
    Verdict::Accepted
}

/// The body of `mark` and `delete` (`{"split_ids": [...]}`), parsed, then validated as the
/// engine does. Accepted: a non-empty list of valid ids within the batch limit.
pub fn split_ids_body(data: &[u8]) -> Verdict {
    let request = match body::parse::<routes::SplitIds>(&Bytes::copy_from_slice(data)) {
        Ok(request) => request,
        Err(error) => return expect_bad_request("split_ids_body: parse", &error),
    };
    let max = limits().max_stage_batch;
    if let Err(error) = validate::split_id_list(DATASET, &request.split_ids, max) {
        return expect_invalid_argument("split_ids_body: validate", &error);
    }
    assert!(!request.split_ids.is_empty() && request.split_ids.len() <= max);
    for id in &request.split_ids {
        validate::split_id(id).expect("split_ids_body: an accepted id");
    }
    Verdict::Accepted
}

/// The query string of `GET /v1/datasets/{dataset}/splits` (`state=..&limit=..`), decoded as
/// the server decodes it, turned into a query, validated as the engine does, then run on a
/// small dataset. Accepted: the limit is in range, the time range ordered, the ids valid, and
/// the page holds at most `limit` splits that all match.
pub fn list_query(data: &[u8]) -> Verdict {
    // Later keys win, as they do in the server's `Query<HashMap<..>>`.
    let params: HashMap<String, String> = url::form_urlencoded::parse(data)
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    let query = match routes::list_query(&params) {
        Ok(query) => query,
        Err(error) => return expect_bad_request("list_query: parse", &error),
    };
    let max = limits().max_list_page;
    if let Err(error) = validate::list_query(&query, max) {
        return expect_invalid_argument("list_query: validate", &error);
    }
    assert!(query.limit.is_none_or(|limit| (1..=max).contains(&limit)));
    assert!(
        query
            .time_range
            .is_none_or(|range| range.start <= range.end)
    );
    check_listing(&query);
    Verdict::Accepted
}

/// The secrets of [`authorization_header`]'s principals: `reader`'s, `root`'s, and the admin
/// token. The corpus holds headers made of them.
pub const FUZZ_SECRETS: [&str; 3] = [
    "mend_1111111111111111111111111111111111111111111111111111111111111111",
    "mend_2222222222222222222222222222222222222222222222222222222222222222",
    "mend_admin_token_of_the_fuzz_target",
];

/// The `Authorization` header, authenticated as the server does against a tokens file of two
/// principals and an admin token (no anonymous access). Accepted: exactly `Bearer SECRET` of a
/// known secret (surrounding blanks of the secret aside), naming that secret's principal.
/// Refused: everything else, with 401 `unauthorized` and its challenge.
pub fn authorization_header(data: &[u8]) -> Verdict {
    use std::sync::{Arc, LazyLock};
    static CREDENTIALS: LazyLock<crate::access::Credentials> = LazyLock::new(|| {
        let grants = |grant: &str| vec![crate::auth::Grant::parse(grant).unwrap()];
        let text = format!(
            "{}\n{}\n",
            crate::auth::tokens_file_line("reader", FUZZ_SECRETS[0], &grants("read:*")),
            crate::auth::tokens_file_line("root", FUZZ_SECRETS[1], &grants("admin")),
        );
        let dir = std::env::temp_dir().join(format!("mend-fuzz-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        std::fs::write(&path, text).unwrap();
        crate::access::Credentials {
            tokens_file: Some(Arc::new(crate::auth::TokensFile::open(&path).unwrap())),
            admin_token: Some(FUZZ_SECRETS[2].to_owned()),
        }
    });
    let mut headers = axum::http::HeaderMap::new();
    // A value no client could send (a control byte, a newline) never reaches the server.
    let Ok(value) = axum::http::HeaderValue::from_bytes(data) else {
        return Verdict::Refused;
    };
    // Visible ASCII only, as HTTP header values are read as text.
    let expected = value
        .to_str()
        .ok()
        .and_then(|text| text.strip_prefix("Bearer "))
        .map(str::trim)
        .and_then(|secret| FUZZ_SECRETS.iter().position(|known| *known == secret));
    headers.insert(axum::http::header::AUTHORIZATION, value);
    match CREDENTIALS.authenticate(&headers, None) {
        Ok(caller) => {
            let name = ["reader", "root", crate::access::ADMIN_TOKEN_PRINCIPAL];
            assert_eq!(
                expected.map(|index| name[index]),
                Some(caller.name()),
                "authorization_header: {data:?} authenticated"
            );
            Verdict::Accepted
        }
        Err(error) => {
            assert_eq!(
                expected, None,
                "authorization_header: a known secret refused"
            );
            assert_eq!(
                error.status(),
                (axum::http::StatusCode::UNAUTHORIZED, "unauthorized"),
                "authorization_header: {}",
                error.message()
            );
            for secret in FUZZ_SECRETS {
                assert!(!error.message().contains(secret), "a secret in a refusal");
            }
            Verdict::Refused
        }
    }
}

/// A tokens file's text, read as the server reads it. Accepted: at most
/// [`crate::auth::MAX_PRINCIPALS`] principals, each with a valid name no other has, that is
/// not one of the server's own, 1 to [`crate::auth::MAX_GRANTS`] grants that read back as
/// written. Refused: with the line at fault, never past the file's last line.
pub fn tokens_file(data: &[u8]) -> Verdict {
    use crate::auth::{Grant, MAX_GRANTS, MAX_PRINCIPALS, RESERVED_PRINCIPALS, Tokens};
    let Ok(text) = std::str::from_utf8(data) else {
        return Verdict::Refused;
    };
    let tokens = match Tokens::parse(text) {
        Ok(tokens) => tokens,
        Err(error) => {
            assert!(
                error.line <= text.lines().count(),
                "tokens_file: line {} of a {}-line file",
                error.line,
                text.lines().count()
            );
            assert!(
                !error.message.is_empty(),
                "tokens_file: a refusal without words"
            );
            return Verdict::Refused;
        }
    };
    assert!(tokens.len() <= MAX_PRINCIPALS);
    let mut names = std::collections::BTreeSet::new();
    for principal in tokens.principals() {
        crate::auth::check_principal_name(&principal.name).expect("tokens_file: a valid name");
        assert!(!RESERVED_PRINCIPALS.contains(&principal.name.as_str()));
        assert!(
            names.insert(principal.name.clone()),
            "tokens_file: a name twice"
        );
        assert!((1..=MAX_GRANTS).contains(&principal.grants.len()));
        for grant in &principal.grants {
            let again = Grant::parse(&grant.to_string()).expect("tokens_file: a grant reads back");
            assert_eq!(&again, grant, "tokens_file: a grant reads back as itself");
        }
    }
    Verdict::Accepted
}

fn expect_bad_request(target: &str, error: &ApiError) -> Verdict {
    assert_eq!(
        error.status(),
        (axum::http::StatusCode::BAD_REQUEST, "invalid_argument"),
        "{target}: {}",
        error.message()
    );
    assert!(
        !error.message().is_empty(),
        "{target}: a refusal without words"
    );
    Verdict::Refused
}
