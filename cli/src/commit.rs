//! `mend commit`: the whole operation protocol for payload files on disk, in one command.
//!
//! 1. Each file is hashed as it streams (size and sha256; never read whole into memory).
//! 2. `begin` writes the intent and stages the rows (a commit; a merge with `--replace`).
//! 3. Each file is uploaded streaming from disk, a progress line on a terminal for large
//!    ones; while uploads run longer than a third of the lease, a background task renews it.
//! 4. `publish` checks every object and publishes, with the checkpoint delta.
//!
//! The operation id names the commit: `--operation-id`, else a fresh id printed on stderr
//! before anything is written. Run again with that id, the commit resumes where it stopped:
//! begin finds its intent, an upload of an object already in place writes nothing, and
//! publish answers its recorded result. A commit that fails or is stopped after begin says
//! which operation it leaves; `mend operation abort` rolls it back, and recovery settles it
//! once its lease has run out.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Settings;
use anyhow::Context;
use mend::engine::{
    BeginOperation, ExternalKind, OperationPhase, OperationView, PlannedSplit, UploadResult,
};
use mend::model::{CheckpointDelta, PublishResult};
use mend::progress::Progress;
use mend::{Engine, MendError};
use serde::Serialize;
use tokio::sync::oneshot;

use super::operation::{open_payload, upload_with_progress};
use super::progress::TerminalProgress;
use super::{BadInput, CommitArgs, output};

/// How much of a file is hashed per read.
const HASH_CHUNK_BYTES: usize = 1 << 20;

/// What `mend commit` prints.
#[derive(Debug, Serialize)]
pub struct CommitReport {
    pub dataset_id: String,
    pub operation_id: String,
    pub kind: ExternalKind,
    /// Each split's upload; empty when the operation had published already (a re-run).
    pub uploads: Vec<UploadResult>,
    pub publish: PublishResult,
}

/// One `--split ID=FILE` with its metadata.
#[derive(Debug)]
struct SplitFile {
    split_id: String,
    path: PathBuf,
    metadata_json: String,
}

pub async fn run(
    engine: &Engine,
    settings: &Settings,
    args: CommitArgs,
    json: bool,
) -> anyhow::Result<()> {
    let files = split_files(&args.splits, &args.metadata)?;
    let checkpoint_delta = check_arguments(&args, &files)?;
    let hashing = TerminalProgress::bytes_for_stderr(json).map(Arc::new);
    let mut planned = Vec::with_capacity(files.len());
    for file in &files {
        let (size, sha256) = hash_file(&file.split_id, &file.path, hashing.clone()).await?;
        planned.push(PlannedSplit {
            split_id: file.split_id.clone(),
            metadata_json: file.metadata_json.clone(),
            size,
            sha256,
        });
    }
    let operation_id = match args.operation_id {
        Some(id) => id,
        None => {
            let id = uuid::Uuid::new_v4().to_string();
            // Output for the person running the commit (what to resume it by), not a log
            // line: written whatever the log settings say.
            eprintln!(
                "operation {id}: to resume this commit, run it again with --operation-id {id}"
            );
            id
        }
    };
    let dataset = args.dataset;
    let request = BeginOperation {
        dataset_id: dataset.clone(),
        operation_id: Some(operation_id.clone()),
        kind: if args.replaced.is_empty() {
            ExternalKind::Commit
        } else {
            ExternalKind::Merge
        },
        node: args.node,
        lease_ms: args.lease_ms,
        splits: planned,
        checkpoint_delta,
        replaced_split_ids: args.replaced,
        publish_token: args.publish_token,
    };

    // From here the operation may exist: every way out names it.
    let mut left = LeftOperation::new(&dataset, &operation_id);
    let begun = match engine.begin_operation(&request).await {
        Ok(view) => view,
        Err(error) => {
            left.disarm();
            let context = if error.certainly_not_applied() {
                format!("begin operation {operation_id} in dataset {dataset}")
            } else {
                format!(
                    "begin operation {operation_id} in dataset {dataset}, which may have begun: {}",
                    left.what_to_do()
                )
            };
            return Err(anyhow::Error::new(error).context(context));
        }
    };
    let lease = Duration::from_millis(
        args.lease_ms
            .unwrap_or_else(|| settings.engine_options().intent_lease_ms.max(0) as u64),
    );
    let finished = finish(engine, &begun, &files, lease, args.lease_ms, json).await;
    let report = match finished {
        Ok(report) => {
            left.disarm();
            report
        }
        Err(error) => {
            let context = format!(
                "commit operation {operation_id} in dataset {dataset}, left unfinished: {}",
                left.what_to_do()
            );
            left.disarm();
            return Err(error.context(context));
        }
    };
    print_report(&report, json)
}

/// What a begin would refuse, refused before the files are read (which may take long); and
/// the checkpoint delta, parsed.
fn check_arguments(
    args: &CommitArgs,
    files: &[SplitFile],
) -> anyhow::Result<Option<CheckpointDelta>> {
    mend::validate::dataset_id(&args.dataset)?;
    for file in files {
        mend::validate::split_id(&file.split_id).context("--split")?;
    }
    if let Some(id) = &args.operation_id {
        mend::validate::split_id(id).map_err(|_| {
            BadInput(format!(
                "--operation-id {id:?} is invalid: use 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
            ))
        })?;
    }
    if let Some(ms) = args.lease_ms {
        mend::bounds::OPERATION_LEASE_MS
            .check(ms)
            .context("--lease-ms")?;
    }
    Ok(args
        .checkpoint_delta
        .as_deref()
        .map(|text| {
            serde_json::from_str::<CheckpointDelta>(text)
                .map_err(|error| BadInput(format!("parse --checkpoint-delta: {error}")))
        })
        .transpose()?)
}

/// Uploads what the operation still needs and publishes it.
async fn finish(
    engine: &Engine,
    begun: &OperationView,
    files: &[SplitFile],
    lease: Duration,
    lease_ms: Option<u64>,
    json: bool,
) -> anyhow::Result<CommitReport> {
    let (dataset, operation_id) = (&begun.dataset_id, &begun.operation_id);
    let report = |uploads, publish| CommitReport {
        dataset_id: dataset.clone(),
        operation_id: operation_id.clone(),
        kind: begun.kind,
        uploads,
        publish,
    };
    let uploads = match begun.phase {
        // A re-run of a commit that published: its recorded result.
        OperationPhase::Published => {
            let publish = begun
                .publish
                .clone()
                .context("a published operation without its result")?;
            return Ok(report(Vec::new(), publish));
        }
        OperationPhase::Ended => {
            anyhow::bail!("operation {operation_id} has ended without publishing")
        }
        // Confirmed by an earlier run: its objects are all in place.
        OperationPhase::EffectsConfirmed => Vec::new(),
        OperationPhase::Armed => {
            let mut keeper = KeepAlive::start(engine, dataset, operation_id, lease, lease_ms);
            let uploaded = tokio::select! {
                uploaded = upload_all(engine, dataset, operation_id, files, json) => uploaded,
                ended = keeper.ended() => Err(ended),
            };
            keeper.stop().await;
            uploaded?
        }
    };
    let published = engine
        .publish_operation(dataset, operation_id)
        .await
        .context("publish")?;
    let publish = published
        .publish
        .context("a publish that answered no result")?;
    Ok(report(uploads, publish))
}

async fn upload_all(
    engine: &Engine,
    dataset: &str,
    operation_id: &str,
    files: &[SplitFile],
    json: bool,
) -> anyhow::Result<Vec<UploadResult>> {
    let mut uploads = Vec::with_capacity(files.len());
    for file in files {
        let (opened, size) = open_payload(&file.split_id, &file.path).await?;
        let uploaded = upload_with_progress(
            engine,
            dataset,
            operation_id,
            &file.split_id,
            opened,
            size,
            json,
        )
        .await
        .with_context(|| {
            format!(
                "upload split {} from {}",
                file.split_id,
                file.path.display()
            )
        })?;
        uploads.push(uploaded);
    }
    Ok(uploads)
}

/// The `--split ID=FILE` and `--metadata ID=JSON` arguments, checked: every id once, every
/// metadata for a split given, every metadata a JSON object.
fn split_files(splits: &[String], metadata: &[String]) -> Result<Vec<SplitFile>, BadInput> {
    let mut files = Vec::with_capacity(splits.len());
    let mut seen = BTreeSet::new();
    for given in splits {
        let (id, path) = given
            .split_once('=')
            .filter(|(id, path)| !id.is_empty() && !path.is_empty())
            .ok_or_else(|| BadInput(format!("--split {given:?}: expected ID=FILE")))?;
        if !seen.insert(id) {
            return Err(BadInput(format!(
                "--split {id}: split {id} is given twice; each split has one file"
            )));
        }
        files.push(SplitFile {
            split_id: id.to_string(),
            path: PathBuf::from(path),
            metadata_json: "{}".into(),
        });
    }
    let mut metadata_of = BTreeMap::new();
    for given in metadata {
        let (id, text) = given
            .split_once('=')
            .filter(|(id, _)| !id.is_empty())
            .ok_or_else(|| BadInput(format!("--metadata {given:?}: expected ID=JSON")))?;
        if !seen.contains(id) {
            return Err(BadInput(format!(
                "--metadata {id}: no --split gives split {id}"
            )));
        }
        let value: serde_json::Value = serde_json::from_str(text)
            .map_err(|error| BadInput(format!("--metadata {id}: not JSON: {error}")))?;
        if !value.is_object() {
            return Err(BadInput(format!(
                "--metadata {id}: the metadata must be a JSON object, not {value}"
            )));
        }
        if metadata_of.insert(id, value.to_string()).is_some() {
            return Err(BadInput(format!(
                "--metadata {id}: split {id}'s metadata is given twice"
            )));
        }
    }
    for file in &mut files {
        if let Some(json) = metadata_of.remove(file.split_id.as_str()) {
            file.metadata_json = json;
        }
    }
    Ok(files)
}

/// A file's size and `sha256:<hex>`, read in chunks on a blocking thread.
async fn hash_file(
    split_id: &str,
    path: &Path,
    progress: Option<Arc<TerminalProgress>>,
) -> anyhow::Result<(u64, String)> {
    use sha2::Digest;
    let (file, size) = open_payload(split_id, path).await?;
    let mut file = file.into_std().await;
    let (split, shown) = (split_id.to_string(), path.display().to_string());
    let hashed = tokio::task::spawn_blocking(move || -> Result<(u64, String), BadInput> {
        if let Some(progress) = &progress {
            progress.begin(
                &format!("hash {split}"),
                usize::try_from(size).unwrap_or(usize::MAX),
            );
        }
        let mut hasher = sha2::Sha256::new();
        let mut buffer = vec![0; HASH_CHUNK_BYTES];
        let mut done: u64 = 0;
        loop {
            let read = match file.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    return Err(BadInput(format!("split {split}: read {shown}: {error}")));
                }
            };
            hasher.update(&buffer[..read]);
            done += read as u64;
            if let Some(progress) = &progress {
                progress.advance(usize::try_from(done).unwrap_or(usize::MAX));
            }
        }
        if let Some(progress) = &progress {
            progress.end();
        }
        let hex: String = hasher
            .finalize()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        Ok((done, format!("sha256:{hex}")))
    });
    Ok(hashed.await.context("hash a payload file")??)
}

/// The operation a commit leaves behind if it goes no further: said on stderr when the commit
/// is dropped (stopped by a signal) while it is armed.
#[derive(Debug)]
struct LeftOperation {
    dataset: String,
    operation_id: String,
    armed: bool,
}

impl LeftOperation {
    fn new(dataset: &str, operation_id: &str) -> Self {
        Self {
            dataset: dataset.to_string(),
            operation_id: operation_id.to_string(),
            armed: true,
        }
    }

    fn what_to_do(&self) -> String {
        let (dataset, id) = (&self.dataset, &self.operation_id);
        format!(
            "run the commit again with --operation-id {id} to resume it, or `mend operation abort {dataset} {id}` to roll it back; recovery settles it once its lease runs out"
        )
    }

    /// Said elsewhere (an error names it) or nothing is left.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for LeftOperation {
    fn drop(&mut self) {
        if self.armed {
            // Output, like the error it goes with: what the person must do next.
            eprintln!(
                "note: operation {} of dataset {} is left unfinished: {}",
                self.operation_id,
                self.dataset,
                self.what_to_do()
            );
        }
    }
}

/// Renews an operation's lease every third of it, on a task of its own, until stopped. A
/// heartbeat under way is never cancelled: stopping waits for it.
struct KeepAlive {
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Option<MendError>>>,
}

impl KeepAlive {
    fn start(
        engine: &Engine,
        dataset: &str,
        operation_id: &str,
        lease: Duration,
        lease_ms: Option<u64>,
    ) -> Self {
        let (stop, mut stopped) = oneshot::channel::<()>();
        let (engine, dataset, operation_id) = (
            engine.clone(),
            dataset.to_string(),
            operation_id.to_string(),
        );
        let every = (lease / 3).max(Duration::from_millis(100));
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = &mut stopped => return None,
                    () = tokio::time::sleep(every) => {}
                }
                match engine
                    .heartbeat_operation(&dataset, &operation_id, lease_ms)
                    .await
                {
                    Ok(_) => {}
                    // The outcome is unknown or another writer got in the way: the next
                    // beat, a third of a lease later, tries again.
                    Err(error) if error.is_retryable() => tracing::warn!(
                        %operation_id,
                        %error,
                        "renewing the operation's lease failed; trying again in {every:?}"
                    ),
                    Err(error) => return Some(error),
                }
            }
        });
        Self {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Waits until the lease can no longer be renewed (the operation ended): why.
    async fn ended(&mut self) -> anyhow::Error {
        let Some(task) = self.task.as_mut() else {
            return std::future::pending().await;
        };
        let ended = task.await;
        self.task = None;
        match ended {
            Ok(Some(error)) => anyhow::Error::new(error).context("renew the operation's lease"),
            Ok(None) => std::future::pending().await,
            Err(error) => {
                anyhow::anyhow!("the task renewing the operation's lease failed: {error}")
            }
        }
    }

    /// Stops the heartbeats, after the one under way, if any.
    async fn stop(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl std::fmt::Debug for KeepAlive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlive").finish_non_exhaustive()
    }
}

/// What `mend commit` did: each upload, then the publish.
fn print_report(report: &CommitReport, json: bool) -> anyhow::Result<()> {
    if json {
        return output::print_json(report);
    }
    if !report.uploads.is_empty() {
        let mut table = output::table(&["split", "object bytes", "sha256", "upload"]);
        for upload in &report.uploads {
            table.add_row(vec![
                upload.split_id.clone(),
                upload.object_size.to_string(),
                upload.sha256.clone(),
                if upload.written {
                    "written".into()
                } else {
                    "already in place".into()
                },
            ]);
        }
        println!("{table}");
    }
    let publish = &report.publish;
    println!(
        "operation {} published {} split(s), marked {} for deletion; manifest version {}",
        report.operation_id,
        publish.published.len(),
        publish.marked.len(),
        publish.manifest_version
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mend::engine::{BeginOperation, ExternalKind, PlannedSplit};
    use mend::{Engine, EngineOptions};

    use super::KeepAlive;

    async fn engine() -> Engine {
        let (catalog, objects) =
            mend::catalog::open_with("memory://", None, mend::catalog::PostgresOptions::default())
                .await
                .unwrap();
        let policy = mend::runtime::PolicyRuntime::default_policy().unwrap();
        let engine = Engine::new(catalog, objects, policy, EngineOptions::default()).unwrap();
        engine
            .create_dataset("d1", &mend::model::DatasetConfig::default())
            .await
            .unwrap();
        engine
    }

    fn plan(operation_id: &str) -> BeginOperation {
        BeginOperation {
            dataset_id: "d1".into(),
            operation_id: Some(operation_id.into()),
            kind: ExternalKind::Commit,
            node: "cli".into(),
            lease_ms: Some(1_000),
            splits: vec![PlannedSplit {
                split_id: format!("{operation_id}-s1"),
                metadata_json: "{}".into(),
                size: 0,
                sha256: mend::objects::format::sha256(b""),
            }],
            checkpoint_delta: None,
            replaced_split_ids: Vec::new(),
            publish_token: None,
        }
    }

    /// While the upload of a commit runs, its lease is renewed every third of it; once the
    /// operation has ended, the keeper says why instead of beating on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_lease_is_renewed_while_uploads_run_and_an_end_is_reported() {
        let engine = engine().await;
        let begun = engine.begin_operation(&plan("op1")).await.unwrap();
        let lease = Duration::from_millis(1_000);
        let keeper = KeepAlive::start(&engine, "d1", "op1", lease, Some(1_000));
        tokio::time::sleep(Duration::from_millis(900)).await;
        keeper.stop().await;
        let shown = engine.show_operation("d1", "op1").await.unwrap();
        assert!(
            shown.lease_expires_at_ms > begun.lease_expires_at_ms,
            "renewed: {:?} after {:?}",
            shown.lease_expires_at_ms,
            begun.lease_expires_at_ms
        );

        engine.begin_operation(&plan("op2")).await.unwrap();
        let mut keeper = KeepAlive::start(&engine, "d1", "op2", lease, Some(1_000));
        engine.abort_operation("d1", "op2").await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), keeper.ended())
            .await
            .expect("the keeper notices the end within a beat");
        let message = format!("{ended:#}");
        assert!(message.contains("op2"), "{message}");
        keeper.stop().await;
        println!("cli commit keep-alive: 2 checks ({message})");
    }
}
