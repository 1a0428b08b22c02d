//! How results look: a table for people, JSON for programs.
//!
//! Tables fit the width [`TableWidth::for_stdout`] finds, wrapping long cells over several
//! lines (`--wide` shows every cell on one line, however wide), and show times as RFC 3339
//! (`2026-12-01T06:00:00.123Z`). JSON is for programs: it keeps times as milliseconds since
//! the epoch and is never wrapped.

use std::io::IsTerminal;
use std::sync::OnceLock;

use comfy_table::{ColumnConstraint, ContentArrangement, Table, presets::UTF8_BORDERS_ONLY};
use mend::clock::rfc3339;
use mend::engine::{
    ObjectStatus, OperationPhase, OperationView, Outcome, ReconcileReport, RecoveryReport,
    UploadResult, VerifyReport,
};
use mend::model::{Dataset, SplitPage, StageOutcome, StageResult};
use mend::runtime::replay::ReplayReport;
use mend_contract::RecoveryDecision;
use serde::Serialize;

pub fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// JSON with `--json`, else the line `text` makes.
pub fn json_or(
    value: &impl Serialize,
    json: bool,
    text: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if json {
        print_json(value)
    } else {
        println!("{}", text());
        Ok(())
    }
}

/// How wide a table may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableWidth {
    /// At most this many columns: long cells wrap.
    Fit(u16),
    /// As wide as its longest cells (`--wide`).
    Unlimited,
}

/// The process's table width, set once by [`set_table_width`] before anything is printed. A
/// global because it is a property of the process's stdout, like the terminal itself: every
/// table of a run has the same, and threading it through every printer would add a parameter
/// that never varies.
static TABLE_WIDTH: OnceLock<TableWidth> = OnceLock::new();

/// The width tables get when nothing says otherwise.
const DEFAULT_TABLE_WIDTH: u16 = 80;

impl TableWidth {
    /// `Unlimited` with `--wide`; else the terminal's width when stdout is one, else
    /// `$COLUMNS`, else 80.
    pub fn for_stdout(wide: bool) -> Self {
        if wide {
            return Self::Unlimited;
        }
        let terminal = std::io::stdout()
            .is_terminal()
            // comfy-table asks the terminal for its size when stdout is one.
            .then(|| Table::new().width())
            .flatten();
        let columns = || {
            std::env::var("COLUMNS")
                .ok()
                .and_then(|columns| columns.trim().parse::<u16>().ok())
        };
        Self::Fit(
            terminal
                .or_else(columns)
                .filter(|width| *width > 0)
                .unwrap_or(DEFAULT_TABLE_WIDTH),
        )
    }
}

pub fn set_table_width(width: TableWidth) {
    // Set once per process, before the first table; a second call changes nothing.
    let _ = TABLE_WIDTH.set(width);
}

pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .set_header(header.to_vec());
    match TABLE_WIDTH
        .get()
        .copied()
        .unwrap_or(TableWidth::Fit(DEFAULT_TABLE_WIDTH))
    {
        TableWidth::Fit(width) => {
            table
                .set_width(width)
                .set_content_arrangement(ContentArrangement::Dynamic);
        }
        TableWidth::Unlimited => {
            table.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    table
}

/// Marks `columns` as holding times: a narrow table wraps them between the date and the time
/// of day (the `T`), never inside either, and otherwise shows them on one line.
fn time_columns(table: &mut Table, columns: &[usize]) {
    // "06:00:00.123Z", the wider half, and the column's padding.
    const TIME_OF_DAY: u16 = 13 + 2;
    for index in columns {
        if let Some(column) = table.column_mut(*index) {
            column
                .set_delimiter('T')
                .set_constraint(ColumnConstraint::LowerBoundary(comfy_table::Width::Fixed(
                    TIME_OF_DAY,
                )));
        }
    }
}

pub fn datasets(datasets: &[Dataset], json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(&datasets);
    }
    let mut table = table(&[
        "dataset",
        "uid",
        "manifest",
        "fencing epoch",
        "config",
        "token",
        "updated",
    ]);
    time_columns(&mut table, &[6]);
    for dataset in datasets {
        table.add_row(vec![
            dataset.dataset_id.clone(),
            dataset.uid.clone(),
            dataset.manifest_version.to_string(),
            dataset.fencing_epoch.to_string(),
            dataset.config_version.to_string(),
            dataset.publish_token.clone().unwrap_or_else(|| "-".into()),
            rfc3339(dataset.updated_at_ms),
        ]);
    }
    println!("{table}");
    Ok(())
}

pub fn dataset(dataset: &Dataset, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(dataset);
    }
    let mut table = table(&["field", "value"]);
    let checkpoint = serde_json::to_string(&dataset.checkpoint)?;
    let config = serde_json::to_string(&dataset.config)?;
    for (field, value) in [
        ("dataset", dataset.dataset_id.clone()),
        ("uid", dataset.uid.clone()),
        ("manifest version", dataset.manifest_version.to_string()),
        ("fencing epoch", dataset.fencing_epoch.to_string()),
        ("config version", dataset.config_version.to_string()),
        ("config", config),
        ("checkpoint", checkpoint),
        (
            "publish token",
            dataset.publish_token.clone().unwrap_or_else(|| "-".into()),
        ),
        ("created", rfc3339(dataset.created_at_ms)),
        ("updated", rfc3339(dataset.updated_at_ms)),
    ] {
        table.add_row(vec![field.to_string(), value]);
    }
    println!("{table}");
    Ok(())
}

pub fn stage_result(result: &StageResult, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(result);
    }
    let mut table = table(&["split", "outcome"]);
    for split in &result.splits {
        let outcome = match split.outcome {
            StageOutcome::Inserted => "inserted".to_string(),
            StageOutcome::Overwritten => "overwritten".to_string(),
            StageOutcome::Skipped(state) => format!("skipped ({state})"),
        };
        table.add_row(vec![split.split_id.clone(), outcome]);
    }
    println!("{table}");
    println!(
        "{} mode: {} inserted, {} split(s) in the request",
        result.mode,
        result.inserted().count(),
        result.splits.len()
    );
    Ok(())
}

pub fn split_page(page: &SplitPage, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(page);
    }
    let mut table = table(&["split", "state", "node", "docs", "updated", "published"]);
    time_columns(&mut table, &[4, 5]);
    for split in &page.splits {
        let docs = split
            .metadata
            .get("num_docs")
            .map(|docs| docs.to_string())
            .unwrap_or_else(|| "-".into());
        table.add_row(vec![
            split.split_id.clone(),
            split.state.to_string(),
            split.node.clone(),
            docs,
            rfc3339(split.updated_at_ms),
            split.published_at_ms.map_or_else(|| "-".into(), rfc3339),
        ]);
    }
    println!("{table}");
    match &page.next_after_split_id {
        Some(after) => println!("more splits: continue with --after {after}"),
        None => println!("{} split(s)", page.splits.len()),
    }
    Ok(())
}

pub fn recovery_report(report: &RecoveryReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    let mut table = table(&["operation", "kind", "status", "decision", "outcome"]);
    for intent in &report.intents {
        table.add_row(vec![
            intent.operation_id.clone(),
            format!("{:?}", intent.kind).to_lowercase(),
            format!("{:?}", intent.status),
            decision_text(&intent.decision),
            outcome_text(&intent.outcome),
        ]);
    }
    println!("{table}");
    println!(
        "{} intent(s) in dataset {}, mode {:?}, policy {}",
        report.intents.len(),
        report.dataset_id,
        report.mode,
        report.policy_digest
    );
    Ok(())
}

fn decision_text(decision: &RecoveryDecision) -> String {
    match decision {
        RecoveryDecision::RollForward => "roll forward".to_string(),
        RecoveryDecision::RollBack => "roll back".to_string(),
        RecoveryDecision::Stale => "stale".to_string(),
        RecoveryDecision::Defer(why) => format!("defer: {why}"),
        RecoveryDecision::Abandon(why) => format!("abandon: {why}"),
        RecoveryDecision::Blocked(reason) => {
            format!("blocked: {} ({})", reason.why, reason.operator_action)
        }
    }
}

fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Reported => "reported".to_string(),
        Outcome::Executing => "executing".to_string(),
        Outcome::Executed => "executed".to_string(),
        Outcome::Refused(why) => format!("refused: {why}"),
        Outcome::Overtaken(why) => format!("overtaken: {why}"),
        Outcome::Failed(why) => format!("failed: {why}"),
    }
}

/// An operation's steps' answers (`mend operation begin|heartbeat|publish|abort|show`): a
/// line of where it stands, its splits' objects, its publish and what recovery would decide.
/// Each object's header is in `--json` (`header_json`), for writers that write it themselves.
pub fn operation_view(view: &OperationView, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(view);
    }
    let kind = format!("{:?}", view.kind).to_lowercase();
    let phase = match view.phase {
        OperationPhase::Armed => "armed: objects may be uploaded, then it publishes",
        OperationPhase::EffectsConfirmed => {
            "effects confirmed: its objects are in place and its publish is under way"
        }
        OperationPhase::Published => "published",
        OperationPhase::Ended => "ended without publishing: nothing of it is visible",
    };
    println!(
        "operation {} of dataset {} ({kind}): {phase}",
        view.operation_id, view.dataset_id
    );
    if let (Some(owner), Some(expires)) = (&view.owner, view.lease_expires_at_ms) {
        println!("owner {owner}, lease until {}", rfc3339(expires));
    }
    if !view.splits.is_empty() {
        let mut table = table(&["split", "payload bytes", "object bytes", "object", "path"]);
        for split in &view.splits {
            let object = match split.object {
                None => "-",
                Some(ObjectStatus::Missing) => "missing",
                Some(ObjectStatus::Present) => "present",
                Some(ObjectStatus::Different) => "different (not as planned)",
            };
            table.add_row(vec![
                split.split_id.clone(),
                split.size.to_string(),
                split.object_size.to_string(),
                object.to_string(),
                split.object_path.clone(),
            ]);
        }
        println!("{table}");
        println!("each object's header, to write before its payload: header_json in --json");
    }
    if let Some(publish) = &view.publish {
        println!(
            "published {} split(s), marked {} for deletion; manifest version {}",
            publish.published.len(),
            publish.marked.len(),
            publish.manifest_version
        );
    }
    if let Some(recovery) = &view.recovery {
        println!(
            "recovery now: {:?}, {}",
            recovery.status,
            decision_text(&recovery.decision)
        );
    }
    Ok(())
}

/// What `mend operation upload` did.
pub fn upload_result(result: &UploadResult, json: bool) -> anyhow::Result<()> {
    json_or(result, json, || {
        if result.written {
            format!(
                "uploaded split {}: {} bytes written, payload {}",
                result.split_id, result.object_size, result.sha256
            )
        } else {
            format!(
                "split {}: its object was already in place as planned; nothing written",
                result.split_id
            )
        }
    })
}

pub fn reconcile_report(report: &ReconcileReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    let mut table = table(&["split", "outcome"]);
    for id in &report.adopted {
        table.add_row(vec![id.clone(), "adopted (published)".into()]);
    }
    for (id, why) in &report.discarded {
        table.add_row(vec![id.clone(), format!("discarded (marked): {why}")]);
    }
    for id in &report.taken_by_others {
        table.add_row(vec![
            id.clone(),
            "left: another reconciler or writer took it".into(),
        ]);
    }
    for (id, why) in &report.refused {
        table.add_row(vec![id.clone(), format!("refused: {why}")]);
    }
    for id in &report.too_young {
        table.add_row(vec![
            id.clone(),
            "left: younger than the staged grace period".into(),
        ]);
    }
    if !table.is_empty() {
        println!("{table}");
    }
    println!(
        "{} object(s) listed in dataset {}: {} adopted, {} discarded, {} left to others, {} refused, {} too young",
        report.objects_listed,
        report.dataset_id,
        report.adopted.len(),
        report.discarded.len(),
        report.taken_by_others.len(),
        report.refused.len(),
        report.too_young.len()
    );
    Ok(())
}

pub fn replay_report(report: &ReplayReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    let mut kinds = table(&["kind", "replayed", "changed"]);
    for (kind, counts) in &report.by_kind {
        kinds.add_row(vec![
            kind.clone(),
            counts.replayed.to_string(),
            counts.changed.to_string(),
        ]);
    }
    if !report.by_kind.is_empty() {
        println!("{kinds}");
    }
    if !report.changed.is_empty() {
        let mut changed = table(&["dataset", "operation", "kind", "recorded", "would be"]);
        for decision in &report.changed {
            changed.add_row(vec![
                decision.dataset_id.clone(),
                decision.operation_id.clone(),
                decision.kind.clone(),
                spaced_json(&decision.recorded),
                spaced_json(&decision.replayed),
            ]);
        }
        println!("{changed}");
    }
    for (dataset, why) in &report.unreadable {
        println!("dataset {dataset} left out: its audit trail is unreadable: {why}");
    }
    println!(
        "{} decision(s) replayed against {}: {} unchanged, {} changed; {} record(s) predate replay",
        report.replayed,
        report.digest,
        report.unchanged,
        report.changed.len(),
        report.not_replayable
    );
    Ok(())
}

/// `value` as one-line JSON with a space after every `:` and `,`, so that a narrow table can
/// wrap it between tokens rather than inside them.
fn spaced_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(spaced_json).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(key, value)| {
                    format!("{}: {}", Value::from(key.as_str()), spaced_json(value))
                })
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        scalar => scalar.to_string(),
    }
}

pub fn verify_report(report: &VerifyReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    if !report.violations.is_empty() {
        let mut table = table(&["invariant", "split", "problem"]);
        for violation in &report.violations {
            table.add_row(vec![
                violation.invariant.to_string(),
                violation.split_id.clone(),
                violation.message.clone(),
            ]);
        }
        println!("{table}");
    }
    println!(
        "dataset {}: {} rows and {} objects checked, {} pending intent(s), {} orphan object(s), {} violation(s)",
        report.dataset_id,
        report.rows_checked,
        report.objects_checked,
        report.pending_intents,
        report.orphan_objects.len(),
        report.violations.len()
    );
    if report.payloads_hashed > 0 {
        println!(
            "  {} payload(s) read back and hashed, {} bytes",
            report.payloads_hashed, report.bytes_hashed
        );
    }
    Ok(())
}

/// `mend audit`: one row per record, oldest first.
pub fn audit_trail(
    dataset_id: &str,
    page: &mend::engine::AuditPage,
    json: bool,
) -> anyhow::Result<()> {
    let entries = &page.entries;
    let next = page.next.map(|next| next.to_string());
    if json {
        return print_json(&serde_json::json!({ "records": entries, "next": next }));
    }
    if !entries.is_empty() {
        let mut table = table(&[
            "recorded",
            "principal",
            "mode",
            "operation",
            "decision",
            "outcome",
        ]);
        time_columns(&mut table, &[0]);
        for entry in entries {
            table.add_row(vec![
                rfc3339(entry.recorded_at_ms),
                entry.principal.clone().unwrap_or_else(|| "-".into()),
                entry.mode.clone(),
                if entry.operation_id.is_empty() {
                    "-".into()
                } else {
                    entry.operation_id.clone()
                },
                spaced_json(&entry.decision),
                spaced_json(&entry.outcome),
            ]);
        }
        println!("{table}");
    }
    match next {
        Some(next) => println!(
            "dataset {dataset_id}: {} audit record(s); older ones: --before {next}",
            entries.len()
        ),
        None => println!("dataset {dataset_id}: {} audit record(s)", entries.len()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spaced_json;

    #[test]
    fn spaced_json_breaks_between_tokens_only() {
        let value = serde_json::json!({"action": {"discard": "why, \"quoted\""}, "ids": [1, "a"]});
        let spaced = spaced_json(&value);
        assert_eq!(
            spaced,
            r#"{"action": {"discard": "why, \"quoted\""}, "ids": [1, "a"]}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&spaced).unwrap();
        assert_eq!(parsed, value);
        println!("spaced json: 2 checks");
    }
}
