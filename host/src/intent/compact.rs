//! An intent's plan (its [`PlannedEffects`] and [`ExpectedState`]) as one compact byte string:
//! how the Postgres catalog stores it since intent format 3, beside the intent's other fields
//! in columns of their own.
//!
//! **Why this encoding.** A recovery sweep reads every intent of a dataset before it observes
//! anything, so reading them is on the sweep's critical path. Measured on 10,000 intents of one
//! split each (`tests/benches/sweep.rs`; the figures are in docs/src/benchmarks.md), the JSONB
//! bodies took 0.08 s of a 0.17 s probe on Postgres: the server converted each to text, and the
//! host parsed about 660 bytes of JSON each (12 ms for the 10,000 alone). Here the server hands
//! back the bytes as stored, and the host reads them with no keys to match, no escapes to undo
//! and no numbers to parse from decimal: the listing takes about 20 ms, of which decoding the
//! plans is about a fifth (perf), the rest the rows themselves. A serde binary format would
//! keep the derives, but a positional one (postcard, bincode) cannot honour the structs'
//! `skip_serializing_if`, and a self-describing one (MessagePack, or CBOR, with structs as maps)
//! keeps every field's name in every intent and matches it on read (not measured here). The
//! plan's shape is small and fixed per format version, so it is written out by hand, with one
//! encoding per plan (below), which lets Postgres compare plans by their bytes.
//!
//! **Layout.** In mend's compact encoding ([`crate::compact`]: varints, strings and lists
//! prefixed by their length, options tagged 0 or 1), with a split state as one byte, 0 (no
//! row), 1 (staged), 2 (published) or 3 (marked for deletion). In order:
//!
//! ```text
//! effects.stage      list of (split_id string, metadata_json string)
//! effects.objects    list of (split_id string, size number, checksum string)
//! effects.publish    option of (staged_split_ids list of string,
//!                               replaced_split_ids list of string,
//!                               checkpoint_delta option of checkpoint delta,
//!                               publish_token option of string)
//! effects.mark       list of string
//! effects.delete     list of string
//! effects.config     option of (staged_grace_period_ms number, deletion_grace_period_ms number,
//!                               policy_params list of (key string, value string), keys ascending)
//! expected.manifest_version  number
//! expected.split_states      list of (split_id string, split state)
//! expected.config_version    option of number
//! ```
//!
//! Nothing may follow. One plan has one encoding: every list is written in its order, the
//! parameters in key order, numbers in their fewest bytes, and the reader refuses anything
//! else, so a backend compares stored plans by their bytes. The layout is fixed by the
//! intent's format version: a plan of a newer format is refused by that version before its
//! bytes are read ([`crate::intent::check_format`]). Decoding checks every length against the
//! bytes left before it allocates, so damaged bytes are [`UnreadablePlan`] (which a backend
//! reports as `Corrupt`), never read past their end or allowed to allocate more than their own
//! size allows.

use std::collections::BTreeMap;

use super::{ExpectedState, PlannedEffects, PlannedObject, PlannedPublish, PlannedRow};
use crate::compact::{Decoded, Reader, Writer};
use crate::model::{DatasetConfig, SplitState};

/// The plan of `effects` and `expected`, as bytes.
pub fn encode_plan(effects: &PlannedEffects, expected: &ExpectedState) -> Vec<u8> {
    let mut out = Writer::with_capacity(plan_size_hint(effects, expected));
    out.list(&effects.stage, |out, row| {
        out.string(&row.split_id);
        out.string(&row.metadata_json);
    });
    out.list(&effects.objects, |out, object| {
        out.string(&object.split_id);
        out.number(object.size);
        out.string(&object.checksum);
    });
    out.option(effects.publish.as_ref(), |out, publish| {
        out.strings(&publish.staged_split_ids);
        out.strings(&publish.replaced_split_ids);
        out.option(publish.checkpoint_delta.as_ref(), Writer::checkpoint_delta);
        out.option(publish.publish_token.as_ref(), |out, token| {
            out.string(token)
        });
    });
    out.strings(&effects.mark);
    out.strings(&effects.delete);
    out.option(effects.config.as_ref(), |out, config| {
        out.number(config.staged_grace_period_ms);
        out.number(config.deletion_grace_period_ms);
        out.number(config.policy_params.len() as u64);
        for (key, value) in &config.policy_params {
            out.string(key);
            out.string(value);
        }
    });
    out.number(expected.manifest_version);
    out.list(&expected.split_states, |out, (split_id, state)| {
        out.string(split_id);
        out.byte(state_tag(*state));
    });
    out.option(expected.config_version.as_ref(), |out, version| {
        out.number(*version)
    });
    out.into_bytes()
}

/// Bytes that are not a plan as [`encode_plan`] writes them; a backend reports it as
/// `Corrupt`, naming the intent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its plan of {length} bytes is unreadable: {what}")]
pub struct UnreadablePlan {
    /// How many bytes the plan has.
    pub length: usize,
    /// What is wrong, and at which byte.
    pub what: String,
}

/// The plan `bytes` hold, as [`encode_plan`] wrote it.
pub fn decode_plan(
    bytes: &[u8],
) -> std::result::Result<(PlannedEffects, ExpectedState), UnreadablePlan> {
    let mut input = Reader::new(bytes);
    read_plan(&mut input)
        .and_then(|plan| input.finish().map(|()| plan))
        .map_err(|what| UnreadablePlan {
            length: bytes.len(),
            what,
        })
}

fn read_plan(input: &mut Reader<'_>) -> Decoded<(PlannedEffects, ExpectedState)> {
    let stage = input.list(|input| {
        Ok(PlannedRow {
            split_id: input.string()?,
            metadata_json: input.string()?,
        })
    })?;
    let objects = input.list(|input| {
        Ok(PlannedObject {
            split_id: input.string()?,
            size: input.number()?,
            checksum: input.string()?,
        })
    })?;
    let publish = input.option(|input| {
        Ok(PlannedPublish {
            staged_split_ids: input.strings()?,
            replaced_split_ids: input.strings()?,
            checkpoint_delta: input.option(Reader::checkpoint_delta)?,
            publish_token: input.option(Reader::string)?,
        })
    })?;
    let mark = input.strings()?;
    let delete = input.strings()?;
    let config = input.option(|input| {
        let staged_grace_period_ms = input.number()?;
        let deletion_grace_period_ms = input.number()?;
        let count = input.count()?;
        let mut policy_params = BTreeMap::new();
        for _ in 0..count {
            let key = input.string()?;
            if policy_params
                .last_key_value()
                .is_some_and(|(last, _): (&String, _)| *last >= key)
            {
                return Err(format!("the policy parameter {key:?} is out of order"));
            }
            policy_params.insert(key, input.string()?);
        }
        Ok(DatasetConfig {
            staged_grace_period_ms,
            deletion_grace_period_ms,
            policy_params,
        })
    })?;
    let effects = PlannedEffects {
        stage,
        objects,
        publish,
        mark,
        delete,
        config,
    };
    let expected = ExpectedState {
        manifest_version: input.number()?,
        split_states: input.list(|input| Ok((input.string()?, read_state(input)?)))?,
        config_version: input.option(Reader::number)?,
    };
    Ok((effects, expected))
}

/// A guess at the encoded size, so that the buffer is allocated once: each string's bytes
/// and a few bytes of lengths and numbers around it.
fn plan_size_hint(effects: &PlannedEffects, expected: &ExpectedState) -> usize {
    let rows: usize = effects
        .stage
        .iter()
        .map(|row| row.split_id.len() + row.metadata_json.len() + 4)
        .sum();
    let objects: usize = effects
        .objects
        .iter()
        .map(|object| object.split_id.len() + object.checksum.len() + 8)
        .sum();
    let publish = effects.publish.as_ref().map_or(0, |publish| {
        publish
            .staged_split_ids
            .iter()
            .chain(&publish.replaced_split_ids)
            .map(|id| id.len() + 2)
            .sum::<usize>()
            + 64
    });
    let states: usize = expected
        .split_states
        .iter()
        .map(|(id, _)| id.len() + 3)
        .sum();
    16 + rows + objects + publish + states
}

fn state_tag(state: Option<SplitState>) -> u8 {
    match state {
        None => 0,
        Some(SplitState::Staged) => 1,
        Some(SplitState::Published) => 2,
        Some(SplitState::MarkedForDeletion) => 3,
    }
}

/// A split state, tagged as [`state_tag`] writes it.
fn read_state(input: &mut Reader<'_>) -> Decoded<Option<SplitState>> {
    let started = input.at();
    match input.byte()? {
        0 => Ok(None),
        1 => Ok(Some(SplitState::Staged)),
        2 => Ok(Some(SplitState::Published)),
        3 => Ok(Some(SplitState::MarkedForDeletion)),
        tag => Err(format!(
            "the split state at byte {started} is tagged {tag}, not 0 to 3"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CheckpointDelta, PartitionDelta};
    use proptest::prelude::*;

    fn full_plan() -> (PlannedEffects, ExpectedState) {
        let effects = PlannedEffects {
            stage: vec![PlannedRow {
                split_id: "s-1".into(),
                metadata_json: r#"{"docs":10,"note":"é \"quoted\""}"#.into(),
            }],
            objects: vec![PlannedObject {
                split_id: "s-1".into(),
                size: u64::MAX,
                checksum: format!("sha256:{}", "ab".repeat(32)),
            }],
            publish: Some(PlannedPublish {
                staged_split_ids: vec!["s-1".into()],
                replaced_split_ids: vec!["old-1".into(), "old-2".into()],
                checkpoint_delta: Some(CheckpointDelta {
                    source: "kafka".into(),
                    partitions: vec![
                        PartitionDelta {
                            partition: "p0".into(),
                            from_position: None,
                            to_position: 300,
                        },
                        PartitionDelta {
                            partition: "p1".into(),
                            from_position: Some(128),
                            to_position: 129,
                        },
                    ],
                }),
                publish_token: Some("token".into()),
            }),
            mark: vec!["m-1".into()],
            delete: vec!["d-1".into(), String::new()],
            config: Some(DatasetConfig {
                staged_grace_period_ms: 1,
                deletion_grace_period_ms: 0,
                policy_params: [("a".into(), "1".into()), ("b".into(), String::new())].into(),
            }),
        };
        let expected = ExpectedState {
            manifest_version: 7,
            split_states: vec![
                ("s-1".into(), None),
                ("old-1".into(), Some(SplitState::Published)),
                ("old-2".into(), Some(SplitState::Staged)),
                ("m-1".into(), Some(SplitState::MarkedForDeletion)),
            ],
            config_version: Some(3),
        };
        (effects, expected)
    }

    #[test]
    fn every_field_round_trips() {
        let (effects, expected) = full_plan();
        let bytes = encode_plan(&effects, &expected);
        assert_eq!(decode_plan(&bytes).unwrap(), (effects, expected));
    }

    #[test]
    fn an_empty_plan_is_a_few_bytes() {
        let bytes = encode_plan(&PlannedEffects::default(), &ExpectedState::default());
        // Four empty lists and two absent options of effects; a manifest version of 0, no
        // split states, no config version.
        assert_eq!(bytes, [0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            decode_plan(&bytes).unwrap(),
            (PlannedEffects::default(), ExpectedState::default())
        );
    }

    #[test]
    fn every_truncation_and_any_trailing_byte_is_refused() {
        let (effects, expected) = full_plan();
        let bytes = encode_plan(&effects, &expected);
        let mut refused = 0;
        for end in 0..bytes.len() {
            let error = decode_plan(&bytes[..end]).unwrap_err();
            assert_eq!(error.length, end);
            assert!(
                error.what.contains("in the middle of a value") || error.what.contains("left"),
                "{error}"
            );
            refused += 1;
        }
        assert_eq!(refused, bytes.len());
        let mut longer = bytes.clone();
        longer.push(0);
        let error = decode_plan(&longer).unwrap_err();
        assert_eq!(error.what, "bytes after its end: 1");
    }

    #[test]
    fn bad_tags_lengths_and_numbers_are_refused_by_name() {
        let cases: [(&[u8], &str); 6] = [
            // A stage list claiming more rows than there are bytes.
            (
                &[5, 1],
                "the length 5 at byte 0 is more than the 1 bytes left",
            ),
            // No stage, no objects, a publish tagged 2.
            (&[0, 0, 2], "tagged 2, neither 0 nor 1"),
            // One stage row whose split id is not UTF-8.
            (&[1, 1, 0xff, 0], "not UTF-8"),
            // An object's size of eleven bytes.
            (
                &[
                    0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
                ],
                "does not fit 64 bits",
            ),
            // Empty effects, manifest 0, one split state tagged 4.
            (&[0, 0, 0, 0, 0, 0, 0, 1, 0, 4], "not 0 to 3"),
            // A config whose parameters are out of order.
            (
                &[0, 0, 0, 0, 0, 1, 0, 0, 2, 1, b'b', 0, 1, b'a', 0],
                "out of order",
            ),
        ];
        for (bytes, expected) in cases {
            let error = decode_plan(bytes).unwrap_err();
            assert!(error.what.contains(expected), "{bytes:?}: {error}");
        }
    }

    fn strings() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(".{0,12}", 0..4)
    }

    fn plan() -> impl Strategy<Value = (PlannedEffects, ExpectedState)> {
        let rows = prop::collection::vec(
            (".{0,12}", ".{0,24}").prop_map(|(split_id, metadata_json)| PlannedRow {
                split_id,
                metadata_json,
            }),
            0..4,
        );
        let objects = prop::collection::vec(
            (".{0,12}", any::<u64>(), ".{0,12}").prop_map(|(split_id, size, checksum)| {
                PlannedObject {
                    split_id,
                    size,
                    checksum,
                }
            }),
            0..4,
        );
        let delta = (
            ".{0,8}",
            prop::collection::vec((".{0,8}", any::<Option<u64>>(), any::<u64>()), 0..3),
        )
            .prop_map(|(source, partitions)| CheckpointDelta {
                source,
                partitions: partitions
                    .into_iter()
                    .map(|(partition, from_position, to_position)| PartitionDelta {
                        partition,
                        from_position,
                        to_position,
                    })
                    .collect(),
            });
        let publish = (
            strings(),
            strings(),
            prop::option::of(delta),
            prop::option::of(".{0,8}"),
        )
            .prop_map(
                |(staged_split_ids, replaced_split_ids, checkpoint_delta, publish_token)| {
                    PlannedPublish {
                        staged_split_ids,
                        replaced_split_ids,
                        checkpoint_delta,
                        publish_token,
                    }
                },
            );
        let config = (
            any::<u64>(),
            any::<u64>(),
            prop::collection::btree_map(".{0,6}", ".{0,6}", 0..3),
        )
            .prop_map(
                |(staged_grace_period_ms, deletion_grace_period_ms, policy_params)| DatasetConfig {
                    staged_grace_period_ms,
                    deletion_grace_period_ms,
                    policy_params,
                },
            );
        let state = prop::option::of(prop::sample::select(SplitState::ALL.to_vec()));
        let expected = (
            any::<u64>(),
            prop::collection::vec((".{0,12}", state), 0..4),
            any::<Option<u64>>(),
        )
            .prop_map(
                |(manifest_version, split_states, config_version)| ExpectedState {
                    manifest_version,
                    split_states,
                    config_version,
                },
            );
        (
            rows,
            objects,
            prop::option::of(publish),
            strings(),
            strings(),
            prop::option::of(config),
            expected,
        )
            .prop_map(
                |(stage, objects, publish, mark, delete, config, expected)| {
                    (
                        PlannedEffects {
                            stage,
                            objects,
                            publish,
                            mark,
                            delete,
                            config,
                        },
                        expected,
                    )
                },
            )
    }

    proptest! {
        #[test]
        fn any_plan_round_trips_and_equal_plans_have_equal_bytes(
            (effects, expected) in plan(),
        ) {
            let bytes = encode_plan(&effects, &expected);
            prop_assert_eq!(encode_plan(&effects.clone(), &expected.clone()), bytes.clone());
            prop_assert_eq!(decode_plan(&bytes).unwrap(), (effects, expected));
        }

        #[test]
        fn any_bytes_decode_or_are_refused_without_panicking(
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            if let Ok((effects, expected)) = decode_plan(&bytes) {
                // What decodes is a plan, and encodes back to the same bytes.
                prop_assert_eq!(encode_plan(&effects, &expected), bytes);
            }
        }
    }
}
