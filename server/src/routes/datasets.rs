//! Datasets: list, create, show, apply a config, fence.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use mend::model::DatasetConfig;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::Shared;
use crate::access::Caller;
use crate::answers::{DatasetListing, ShownDataset};
use crate::auth::Action;
use crate::body::{JsonBody, parse};
use crate::error::{ApiError, ApiResult, engine_error, json_body, ok, status_and_code};
use crate::openapi::{
    BadRequest, Conflict, DatasetPath, IdempotencyKey, InternalError, NotFound, PayloadTooLarge,
    PreconditionFailed, RequestTimeout, Unavailable, Unprocessable,
};

use super::write::{ClientKey, served, write};
use super::{AppState, server_node};

/// Every dataset.
///
/// One whose state cannot be read is listed as `{"dataset_id", "error", "reason"}` rather than
/// failing the listing.
#[utoipa::path(
    get,
    path = "/v1/datasets",
    tag = "datasets",
    responses(
        (status = 200, description = "every dataset", body = Vec<DatasetListing>),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn list_datasets(State(shared): AppState, Extension(caller): Extension<Caller>) -> ApiResult {
    let datasets: Vec<DatasetListing> = shared
        .engine
        .each_dataset()
        .await?
        .into_iter()
        .filter(|(id, _)| caller.may(Action::Read, id))
        .map(|(id, dataset)| match dataset {
            Ok(dataset) => DatasetListing::Readable(dataset),
            Err(error) => DatasetListing::Unreadable {
                dataset_id: id,
                error: status_and_code(&error).1,
                reason: error.to_string(),
            },
        })
        .collect();
    ok(&datasets)
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateDatasetRequest)]
pub(crate) struct CreateDataset {
    pub(crate) dataset_id: String,
    staged_grace_period_ms: Option<u64>,
    deletion_grace_period_ms: Option<u64>,
}

impl CreateDataset {
    /// The new dataset's config: `defaults` with the grace periods the request gives.
    pub(crate) fn config(&self, defaults: &DatasetConfig) -> DatasetConfig {
        let mut config = defaults.clone();
        if let Some(ms) = self.staged_grace_period_ms {
            config.staged_grace_period_ms = ms;
        }
        if let Some(ms) = self.deletion_grace_period_ms {
            config.deletion_grace_period_ms = ms;
        }
        config
    }
}

impl JsonBody for CreateDataset {
    const SHAPE: &'static str =
        r#"{"dataset_id": STRING, "staged_grace_period_ms"?: MS, "deletion_grace_period_ms"?: MS}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("dataset_id", "a string"),
        ("staged_grace_period_ms", "a whole number of milliseconds"),
        ("deletion_grace_period_ms", "a whole number of milliseconds"),
    ];
}

/// Creates a dataset.
///
/// Sent again under the `Idempotency-Key` that created it, answers 201 and the same dataset (the
/// same uid); otherwise an existing id is 409.
#[utoipa::path(
    post,
    path = "/v1/datasets",
    tag = "datasets",
    params(IdempotencyKey),
    request_body = CreateDataset,
    responses(
        (status = 201, description = "the new dataset", body = mend::model::Dataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn create_dataset(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> ApiResult {
    let request: CreateDataset = parse(&body)?;
    caller.require(Action::Write, &request.dataset_id)?;
    let config = request.config(&shared.options.dataset_defaults);
    let engine = shared.acting_engine();
    let dataset_id = request.dataset_id.clone();
    let created = write(&shared, &request.dataset_id, None, async move {
        engine
            .create_dataset(&dataset_id, &config)
            .idempotency_key(key.as_deref())
            .await
    })
    .await?;
    Ok((StatusCode::CREATED, json_body(&created)).into_response())
}

/// A dataset and its supervisor's health.
#[utoipa::path(
    get,
    path = "/v1/datasets/{dataset}",
    tag = "datasets",
    params(DatasetPath),
    responses(
        (status = 200, description = "the dataset", body = ShownDataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn show_dataset(State(shared): AppState, Path(dataset_id): Path<String>) -> ApiResult {
    served(&shared, &dataset_id)?;
    let dataset = shared
        .engine
        .dataset(&dataset_id)
        .await
        .map_err(|error| engine_error(&shared, &dataset_id, error))?;
    ok(&ShownDataset {
        dataset,
        health: shared.supervisors.health(&dataset_id),
    })
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = ApplyConfigRequest)]
pub(crate) struct ApplyConfig {
    pub(crate) expected_config_version: u64,
    pub(crate) config: DatasetConfig,
    #[serde(default = "server_node")]
    pub(crate) node: String,
}

impl JsonBody for ApplyConfig {
    const SHAPE: &'static str = r#"{"expected_config_version": N, "config": {"staged_grace_period_ms": MS, "deletion_grace_period_ms": MS, "policy_params"?: {KEY: STRING}}, "node"?: STRING}"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        (
            "expected_config_version",
            "a whole number: the config version the change applies to",
        ),
        (
            "config",
            r#"an object {"staged_grace_period_ms": MS, "deletion_grace_period_ms": MS, "policy_params"?: {KEY: STRING}}"#,
        ),
        ("node", "a string naming the writer"),
    ];
}

/// Applies a new config to a dataset (staged, then promoted).
///
/// 412 if the config version moved. Under an `Idempotency-Key`, a retry answers the promotion;
/// while the keyed apply it retries is unsettled, 503 `recovery_required`.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/config",
    tag = "datasets",
    params(DatasetPath, IdempotencyKey),
    request_body = ApplyConfig,
    responses(
        (status = 200, description = "the dataset with its new config", body = mend::model::Dataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 412, response = PreconditionFailed),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn apply_config(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: ApplyConfig = parse(&body)?;
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        let (version, config, node) = (
            request.expected_config_version,
            &request.config,
            &request.node,
        );
        engine
            .apply_config(&id, version, config, node)
            .idempotency_key(key.as_deref())
            .await
    })
    .await?)
}

/// Sets or removes the fence. Removing it must be said: a body that says nothing (`{}`) is
/// refused, never read as "no token".
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = FenceRequest)]
struct Fence {
    /// Absent: not given; `null`: remove the token; a string: the token every publish must
    /// present.
    #[serde(default, deserialize_with = "given")]
    #[schema(value_type = Option<String>)]
    token: Option<Option<String>>,
    #[serde(default)]
    clear: bool,
}

impl JsonBody for Fence {
    const SHAPE: &'static str =
        r#"{"token": "T"} to set the fence, or {"clear": true} to remove it"#;
    const FIELDS: &'static [(&'static str, &'static str)] = &[
        ("token", "a non-empty string, or null to remove the fence"),
        ("clear", "true to remove the fence"),
    ];
}

/// A field that is present, even as `null`: `Some(None)`; `#[serde(default)]` makes an
/// absent one `None`.
fn given<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Sets or removes the dataset's publish token (the fence).
///
/// `{"token": "T"}` sets it; `{"clear": true}` or `{"token": null}` removes it; a body that says
/// neither is 400.
#[utoipa::path(
    post,
    path = "/v1/datasets/{dataset}/fence",
    tag = "datasets",
    params(DatasetPath, IdempotencyKey),
    request_body = Fence,
    responses(
        (status = 200, description = "the dataset", body = mend::model::Dataset),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 408, response = RequestTimeout),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = InternalError),
        (status = 503, response = Unavailable),
    )
)]
async fn fence(
    State(shared): AppState,
    ClientKey(key): ClientKey,
    Path(dataset_id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: Fence = parse(&body)?;
    let token = match (request.token, request.clear) {
        (Some(Some(token)), false) => Some(token),
        (Some(None), false) | (None, true) => None,
        (None, false) => {
            return Err(ApiError::bad_request(format!(
                "say what to do with the fence: {}; nothing happened",
                Fence::SHAPE
            )));
        }
        (Some(_), true) => {
            return Err(ApiError::bad_request(
                "give either a token or \"clear\": true, not both; nothing happened",
            ));
        }
    };
    let engine = shared.acting_engine();
    let id = dataset_id.clone();
    ok(&write(&shared, &dataset_id, None, async move {
        engine
            .set_publish_token(&id, token.as_deref())
            .idempotency_key(key.as_deref())
            .await
    })
    .await?)
}

/// The largest body `POST /v1/datasets` reads: a dataset id and its config, a few hundred
/// bytes. The dataset is named in the body, so a principal that writes other datasets is
/// refused only once the body is read: this cap bounds what it can make the server read.
pub const MAX_CREATE_BODY_BYTES: usize = 64 * 1024;

/// The dataset listing and creation, read under [`MAX_CREATE_BODY_BYTES`].
pub(super) fn create_routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new().routes(routes!(list_datasets, create_dataset))
}

pub(super) fn routes() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::new()
        .routes(routes!(show_dataset))
        .routes(routes!(apply_config))
        .routes(routes!(fence))
}
