//! What the readers saw, held to the end: `reader-generations` and `config-applies`.

use std::collections::{BTreeMap, BTreeSet};

use mend::model::{DatasetConfig, SplitState};

use super::{Check, ConfigOutcome, Found, History};

/// Config applies under idempotency keys: one promoted is the config it asked for, at a
/// version no other apply was answered with, and every generation read at that version shows
/// it (as the end does, if it is still the latest); one refused never shows anywhere. And the
/// readers agree: one config per config version, and each handle's version only moves forward.
pub(super) fn config_applies(history: &History, dataset: &mend::model::Dataset, found: &mut Found) {
    let mut by_version: BTreeMap<u64, (&DatasetConfig, String)> = BTreeMap::new();
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    for read in &history.reads {
        let seen = format!(
            "reader {} at manifest version {}",
            read.reader, read.manifest_version
        );
        match by_version.get(&read.config_version) {
            Some((config, by)) if **config != read.config => found.push(
                Check::ConfigApplies,
                format!(
                    "config version {} is {:?} to {by} and {:?} to {seen}",
                    read.config_version, config, read.config
                ),
            ),
            Some(_) => {}
            None => {
                by_version.insert(read.config_version, (&read.config, seen));
            }
        }
        if last
            .insert(read.reader, read.config_version)
            .is_some_and(|before| before > read.config_version)
        {
            found.push(
                Check::ConfigApplies,
                format!(
                    "reader {}'s config version went back to {}",
                    read.reader, read.config_version
                ),
            );
        }
    }
    let mut answered: BTreeMap<u64, &str> = BTreeMap::new();
    for apply in &history.config_applies {
        found.config_applies_checked += 1;
        let key = apply.key.as_str();
        let shown_at: Vec<u64> = by_version
            .iter()
            .filter(|(_, (config, _))| **config == apply.config)
            .map(|(version, _)| *version)
            .chain((dataset.config == apply.config).then_some(dataset.config_version))
            .collect();
        match &apply.outcome {
            ConfigOutcome::Promoted { version, config } => {
                if *config != apply.config {
                    found.push(
                        Check::ConfigApplies,
                        format!(
                            "false answer: {key} asked for {:?} and was answered {config:?}",
                            apply.config
                        ),
                    );
                }
                if let Some(other) = answered.insert(*version, key) {
                    found.push(
                        Check::ConfigApplies,
                        format!(
                            "false answer: {other} and {key} were both answered config version \
                         {version}"
                        ),
                    );
                }
                if shown_at.iter().any(|shown| shown != version)
                    || dataset.config_version < *version
                    || dataset.config_version == *version && dataset.config != apply.config
                {
                    found.push(Check::ConfigApplies, format!(
                        "false answer: {key} was answered promoted at config version {version}, \
                         yet its config shows at {shown_at:?} and the dataset ends at config \
                         version {}",
                        dataset.config_version
                    ));
                }
            }
            ConfigOutcome::Refused => {
                if !shown_at.is_empty() {
                    found.push(
                        Check::ConfigApplies,
                        format!(
                            "false answer: {key} was refused, yet its config shows at config \
                         versions {shown_at:?}"
                        ),
                    );
                }
            }
            ConfigOutcome::Unknown => {}
        }
    }
}

/// What the readers saw: each handle's manifest versions only move forward; each generation
/// shows every operation whole or not at all, and never a merge beside what it replaced; and
/// a split a reader ever saw published is published at the end unless a merge that published
/// replaced it (nothing else in this run unpublishes a split, so a split seen and gone is data
/// lost, and a split of an operation answered ended that was ever seen is a false answer the
/// end state alone could miss).
pub(super) fn generations(
    history: &History,
    rows: &BTreeMap<String, SplitState>,
    published_ids: &BTreeSet<&str>,
    found: &mut Found,
) {
    let mut last: BTreeMap<usize, u64> = BTreeMap::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for read in &history.reads {
        // A new generation's version is later than the one before; one served again is the
        // same.
        if let Some(&before) = last.get(&read.reader)
            && (read.manifest_version < before
                || read.manifest_version == before && !read.unchanged
                || read.manifest_version != before && read.unchanged)
        {
            found.push(
                Check::ReaderGenerations,
                format!(
                    "reader {}'s handle went from manifest version {before} to {}",
                    read.reader, read.manifest_version
                ),
            );
        }
        last.insert(read.reader, read.manifest_version);
        if read.unchanged {
            // The generation served before: checked when it was new.
            continue;
        }
        found.generations_checked += 1;
        for record in &history.operations {
            let shown = record
                .split_ids
                .iter()
                .filter(|split_id| read.published.contains(*split_id))
                .count();
            if shown != 0 && shown != record.split_ids.len() {
                found.push(
                    Check::ReaderGenerations,
                    format!(
                        "reader {} at manifest version {} shows {shown} of {}'s {} splits",
                        read.reader,
                        read.manifest_version,
                        record.operation_id,
                        record.split_ids.len()
                    ),
                );
            }
            let replaced_shown: Vec<&String> = record
                .replaced_split_ids
                .iter()
                .filter(|split_id| read.published.contains(*split_id))
                .collect();
            if shown != 0 && !replaced_shown.is_empty() {
                found.push(
                    Check::ReaderGenerations,
                    format!(
                        "reader {} at manifest version {} shows merge {} and the splits it \
                         replaced {replaced_shown:?} at once",
                        read.reader, read.manifest_version, record.operation_id
                    ),
                );
            }
        }
        seen.extend(read.published.iter().map(String::as_str));
    }
    // A split replaced by a merge that published is gone by design.
    let replaced: BTreeSet<&str> = history
        .operations
        .iter()
        .filter(|record| published_ids.contains(record.operation_id.as_str()))
        .flat_map(|record| record.replaced_split_ids.iter().map(String::as_str))
        .collect();
    for split_id in seen {
        if rows.get(split_id) != Some(&SplitState::Published) && !replaced.contains(split_id) {
            found.push(
                Check::ReaderGenerations,
                format!(
                    "a reader saw {split_id} published, yet at the end it is {:?}",
                    rows.get(split_id)
                ),
            );
        }
    }
}
