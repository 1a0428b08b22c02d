//! Policy swaps and rollbacks, held to the registry: `policy-registry`, `policy-answers`,
//! `policy-runs` and `policy-liveness`.

use std::collections::BTreeMap;

use mend::runtime::registry::ActiveRecord;

use super::{Check, Found, History, PolicyOutcome};

/// Holds the policy changes' answers and the replicas' runs against the registry's
/// `records` (oldest first), and, at the end, each replica's policy (`running`, by replica)
/// against the newest record:
///
/// - the records are a chain: record `n` is version `n`, names the digest of `n - 1` as the
///   one it replaced, and a rollback's record restores the digest `n - 1` replaced;
/// - a key is in at most one record (a retry never changes the policy twice);
/// - a change answered made at version `n` is record `n`, under its key, with the digest it
///   asked for; one refused is in no record; and one answered after another was sent is
///   recorded after it;
/// - each replica's runs only move to newer records, each running its record's digest;
/// - once the faults stopped and every replica followed, every one runs the newest record's
///   policy (the default, with no record).
pub(super) fn changes(
    history: &History,
    records: &[ActiveRecord],
    running: &[String],
    default_digest: &str,
    found: &mut Found,
) {
    registry_chain(records, found);
    let by_key = record_keys(records, found);
    change_answers(history, records, &by_key, found);
    policy_runs(history, records, found);
    let newest = records
        .last()
        .map_or(default_digest, |record| &record.digest);
    for (replica, digest) in running.iter().enumerate() {
        if digest != newest {
            found.push(
                Check::PolicyLiveness,
                format!(
                    "liveness: replica {replica} runs {digest} after the faults stopped, but the \
                 registry's active policy is {newest}"
                ),
            );
        }
    }
}

/// The registry's records are a chain: record `n` is version `n`, names the digest of `n - 1`
/// as the one it replaced, and a rollback's record restores the digest `n - 1` replaced.
fn registry_chain(records: &[ActiveRecord], found: &mut Found) {
    for (index, record) in records.iter().enumerate() {
        if record.version != index as u64 {
            found.push(
                Check::PolicyRegistry,
                format!(
                    "policy registry: record {index} says it is version {}",
                    record.version
                ),
            );
        }
        if index > 0 {
            let before = &records[index - 1];
            if record.previous.as_deref() != Some(before.digest.as_str()) {
                found.push(Check::PolicyRegistry, format!(
                    "policy registry: record {index} says it replaced {:?}, but record {} was {}",
                    record.previous,
                    index - 1,
                    before.digest
                ));
            }
            if record.change == "rollback" && before.previous.as_deref() != Some(&record.digest) {
                found.push(
                    Check::PolicyRegistry,
                    format!(
                        "policy registry: rollback record {index} restored {}, but record {} had \
                     replaced {:?}",
                        record.digest,
                        index - 1,
                        before.previous
                    ),
                );
            }
        }
    }
}

/// A key is in at most one record (a retry never changes the policy twice). Answers the
/// version each key made.
fn record_keys<'a>(records: &'a [ActiveRecord], found: &mut Found) -> BTreeMap<&'a str, u64> {
    let mut by_key: BTreeMap<&str, u64> = BTreeMap::new();
    for record in records {
        if let Some(recorded) = &record.recorded
            && let Some(other) = by_key.insert(&recorded.key, record.version)
        {
            found.push(
                Check::PolicyRegistry,
                format!(
                    "policy registry: key {} made records {other} and {}: a retry changed the \
                 policy again",
                    recorded.key, record.version
                ),
            );
        }
    }
    by_key
}

/// A change answered made at version `n` is record `n`, under its key, with the digest it
/// asked for; one refused is in no record; one answered after another was sent is recorded
/// after it.
fn change_answers(
    history: &History,
    records: &[ActiveRecord],
    by_key: &BTreeMap<&str, u64>,
    found: &mut Found,
) {
    let mut answered: Vec<(&str, u64, u64, u64)> = Vec::new();
    let mut made: BTreeMap<&str, u64> = BTreeMap::new();
    for change in &history.policy_changes {
        found.policy_changes_checked += 1;
        let key = change.key.as_str();
        match &change.outcome {
            PolicyOutcome::Changed { version, digest } => {
                let record = records.get(*version as usize);
                let holds = record.is_some_and(|record| {
                    record.digest == *digest
                        && record.recorded.as_ref().is_some_and(|r| r.key == key)
                }) && change.swap_to.as_ref().is_none_or(|asked| asked == digest);
                if !holds {
                    found.push(
                        Check::PolicyAnswers,
                        format!(
                            "false answer: policy change {key} (swap to {:?}) was answered made at \
                         registry version {version} with {digest}, but that record is {record:?}",
                            change.swap_to
                        ),
                    );
                }
                answered.push((key, change.invoked_ms, change.answered_ms, *version));
                if let Some(other) = made.insert(key, *version)
                    && other != *version
                {
                    found.push(
                        Check::PolicyAnswers,
                        format!(
                            "false answer: policy change {key} was answered made at registry \
                         version {other}, and sent again, at version {version}"
                        ),
                    );
                }
            }
            PolicyOutcome::Refused { error } => {
                if let Some(version) = by_key.get(key) {
                    found.push(
                        Check::PolicyAnswers,
                        format!(
                            "false answer: policy change {key} was refused ({error}), yet made \
                         registry record {version}"
                        ),
                    );
                }
            }
            PolicyOutcome::Unknown => {}
        }
    }
    // A copy of a change sent again answers the record of its first: it is the same change.
    for (key, invoked, _, version) in &answered {
        for (earlier_key, _, earlier_answered, earlier) in &answered {
            if earlier_key != key && earlier_answered < invoked && earlier >= version {
                found.push(
                    Check::PolicyAnswers,
                    format!(
                        "policy registry: a change answered at {earlier_answered} ms made version \
                     {earlier}, and one sent after it, at {invoked} ms, made version {version}"
                    ),
                );
            }
        }
    }
}

/// Each replica's runs only move to newer records, each running its record's digest.
fn policy_runs(history: &History, records: &[ActiveRecord], found: &mut Found) {
    let mut last: BTreeMap<(usize, u32), u64> = BTreeMap::new();
    for run in &history.policy_runs {
        found.policy_runs_checked += 1;
        let process = (run.replica, run.incarnation);
        let Some(version) = run.registry_version else {
            if last.contains_key(&process) {
                found.push(
                    Check::PolicyRuns,
                    format!("replica {} forgot the registry record it runs", run.replica),
                );
            }
            continue;
        };
        if let Some(before) = last.insert(process, version)
            && before > version
        {
            found.push(
                Check::PolicyRuns,
                format!(
                    "replica {} went back from the policy of registry record {before} to record \
                 {version}'s",
                    run.replica
                ),
            );
        }
        match records.get(version as usize) {
            Some(record) if record.digest == run.digest => {}
            record => found.push(
                Check::PolicyRuns,
                format!(
                    "replica {} runs {} as registry record {version}, which is {record:?}",
                    run.replica, run.digest
                ),
            ),
        }
    }
}
