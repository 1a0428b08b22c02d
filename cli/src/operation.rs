//! `mend operation`: the steps of an operation one command each, for writers that script
//! them (begin, upload, heartbeat, publish, abort, show), and the streaming of a payload from
//! a file or stdin that `mend commit` shares.
//!
//! Each step is one engine call ([`mend::engine`]'s operations); the operation id is the
//! idempotency key of every step, so a script retries a step by running it again.

use std::io::Read;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::{Bytes, BytesMut};
use futures::Stream;
use mend::engine::{BeginOperation, UploadResult};
use mend::progress::Progress;
use mend::{Engine, MendError};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::progress::TerminalProgress;
use super::{BadInput, OperationCommand, output};

/// The most a payload stream holds in memory at once, per read.
const CHUNK_BYTES: usize = 1 << 20;

/// A payload read as it is sent, at most [`CHUNK_BYTES`] at a time.
pub type Payload = Pin<Box<dyn Stream<Item = Result<Bytes, MendError>> + Send>>;

/// How long a step's command waits, after its answer, for the clean-up an ended operation
/// left running (its objects and marked rows deleted); garbage collection deletes what is
/// left when this runs out.
const CLEANUP_WAIT: Duration = Duration::from_secs(30);

pub async fn run(engine: &Engine, command: OperationCommand, json: bool) -> anyhow::Result<()> {
    let result = run_step(engine, command, json).await;
    // An abort (or a publish that found its operation ended) answers before its clean-up is
    // done; the process exits after this, which would drop it.
    let _ = tokio::time::timeout(CLEANUP_WAIT, engine.wait_for_cleanups()).await;
    result
}

async fn run_step(engine: &Engine, command: OperationCommand, json: bool) -> anyhow::Result<()> {
    match command {
        OperationCommand::Begin { dataset, plan } => {
            let request = read_plan(&dataset, &plan)?;
            let view = engine
                .begin_operation(&request)
                .await
                .with_context(|| format!("begin an operation in dataset {dataset}"))?;
            output::operation_view(&view, json)
        }
        OperationCommand::Upload {
            dataset,
            operation,
            split,
            file,
        } => {
            let result = if file.as_os_str() == "-" {
                let payload = chunks(tokio::io::stdin(), "stdin".into(), None);
                engine
                    .upload_object(&dataset, &operation, &split, payload)
                    .await
            } else {
                let (opened, size) = open_payload(&split, &file).await?;
                upload_with_progress(engine, &dataset, &operation, &split, opened, size, json).await
            };
            let result = result.with_context(|| {
                format!("upload split {split} of operation {operation} in dataset {dataset}")
            })?;
            output::upload_result(&result, json)
        }
        OperationCommand::Heartbeat {
            dataset,
            operation,
            lease_ms,
        } => {
            let view = engine
                .heartbeat_operation(&dataset, &operation, lease_ms)
                .await
                .with_context(|| format!("renew the lease of operation {operation}"))?;
            output::operation_view(&view, json)
        }
        OperationCommand::Publish { dataset, operation } => {
            // Sent again after it landed, the publish answers its recorded result.
            let view = engine
                .publish_operation(&dataset, &operation)
                .await
                .with_context(|| format!("publish operation {operation}"))?;
            output::operation_view(&view, json)
        }
        OperationCommand::Abort { dataset, operation } => {
            let view = engine
                .abort_operation(&dataset, &operation)
                .await
                .with_context(|| format!("abort operation {operation}"))?;
            output::operation_view(&view, json)
        }
        OperationCommand::Show { dataset, operation } => {
            let view = engine
                .show_operation(&dataset, &operation)
                .await
                .with_context(|| format!("show operation {operation} of dataset {dataset}"))?;
            output::operation_view(&view, json)
        }
    }
}

/// The plan of `mend operation begin`: a [`BeginOperation`] whose `dataset_id` may be left
/// out (the command's dataset), or must be the command's.
fn read_plan(dataset: &str, plan: &Path) -> anyhow::Result<BeginOperation> {
    let text = if plan.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| BadInput(format!("read the plan from stdin: {error}")))?;
        text
    } else {
        std::fs::read_to_string(plan)
            .map_err(|error| BadInput(format!("read the plan from {}: {error}", plan.display())))?
    };
    let mut value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| BadInput(format!("parse the plan: {error}")))?;
    let fields = value
        .as_object_mut()
        .ok_or_else(|| BadInput("parse the plan: expected a JSON object".into()))?;
    match fields.get("dataset_id") {
        None => {
            fields.insert("dataset_id".into(), dataset.into());
        }
        Some(given) if given == dataset => {}
        Some(given) => {
            return Err(BadInput(format!(
                "the plan's dataset_id is {given}, the command's dataset is {dataset:?}: leave dataset_id out or make them the same"
            ))
            .into());
        }
    }
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        BadInput(format!(
            "parse the plan at {path}: {}; expected {{\"kind\": \"commit\", \"node\": ..., \"splits\": [{{\"split_id\": ..., \"metadata_json\": \"{{}}\", \"size\": N, \"sha256\": ...}}], ...}}",
            error.into_inner()
        ))
        .into()
    })
}

/// A payload file opened for reading, and its size. Unreadable files and directories are
/// refused as bad input: nothing has been sent yet.
pub async fn open_payload(split_id: &str, path: &Path) -> Result<(tokio::fs::File, u64), BadInput> {
    let unreadable = |error: std::io::Error| {
        BadInput(format!(
            "split {split_id}: read {}: {error}",
            path.display()
        ))
    };
    let file = tokio::fs::File::open(path).await.map_err(unreadable)?;
    let metadata = file.metadata().await.map_err(unreadable)?;
    if metadata.is_dir() {
        return Err(BadInput(format!(
            "split {split_id}: {} is a directory, not a payload file",
            path.display()
        )));
    }
    Ok((file, metadata.len()))
}

/// Uploads a payload file, drawing its progress on a terminal when it is large.
pub async fn upload_with_progress(
    engine: &Engine,
    dataset: &str,
    operation: &str,
    split: &str,
    file: tokio::fs::File,
    size: u64,
    json: bool,
) -> mend::Result<UploadResult> {
    let progress = TerminalProgress::bytes_for_stderr(json).map(Arc::new);
    if let Some(progress) = &progress {
        progress.begin(
            &format!("upload {split}"),
            usize::try_from(size).unwrap_or(usize::MAX),
        );
    }
    let payload = chunks(file, split.to_string(), progress.clone());
    let result = engine
        .upload_object(dataset, operation, split, payload)
        .await;
    if let Some(progress) = &progress {
        progress.end();
    }
    result
}

/// `reader` as a stream of chunks; a read error is an invalid upload (nothing is written).
/// Each chunk read advances `progress` by its bytes.
pub fn chunks<R>(reader: R, what: String, progress: Option<Arc<TerminalProgress>>) -> Payload
where
    R: AsyncRead + Send + Unpin + 'static,
{
    let state = (reader, 0usize);
    Box::pin(futures::stream::try_unfold(
        state,
        move |(mut reader, done)| {
            let what = what.clone();
            let progress = progress.clone();
            async move {
                let mut buffer = BytesMut::with_capacity(CHUNK_BYTES);
                let read = reader.read_buf(&mut buffer).await.map_err(|error| {
                    MendError::invalid(format!(
                        "read the payload of {what}: {error}; nothing was written"
                    ))
                })?;
                if read == 0 {
                    return Ok(None);
                }
                let done = done.saturating_add(read);
                if let Some(progress) = &progress {
                    progress.advance(done);
                }
                Ok(Some((buffer.freeze(), (reader, done))))
            }
        },
    ))
}
