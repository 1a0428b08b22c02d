//! The properties the checker holds the protocol to: the simulator's safety properties, the
//! liveness property under fairness, and "sometimes" properties that prove the check reached
//! each interesting outcome (a check that never abandons proves nothing about abandonment).

use stateright::Property;

use crate::protocol::{Config, Protocol};
use crate::state::{Operator, SplitRow, State, WRITERS};

/// Names of the safety properties, for the tests.
pub const SAFETY: [&str; 6] = [
    "no acknowledged commit is lost",
    "an operation answered ended never becomes visible",
    "each checkpoint advances exactly once per published delta",
    "never two sweeps of a dataset at once",
    "a fenced publish never lands",
    "an abandoned intent never publishes",
];

/// The liveness property's name.
pub const LIVENESS: &str = "once writers stop, every intent settles";

/// Names of the outcomes the check must reach.
pub const REACHED: [&str; 6] = [
    "a writer's publish lands",
    "a writer's abort ends its operation",
    "recovery abandons an operation",
    "recovery rolls an operation forward",
    "the dataset gate is taken over",
    "exclusive recovery rolls an operation back",
];

pub fn all(config: Config) -> Vec<Property<Protocol>> {
    let mut properties = vec![
        Property::always(SAFETY[0], |_, state: &State| {
            (0..WRITERS).all(|w| {
                !state.history.claimed_published[w]
                    || (state.splits[w] == SplitRow::Published && state.checkpoints[w] == 1)
            })
        }),
        Property::always(SAFETY[1], |_, state: &State| {
            (0..WRITERS).all(|w| !state.history.claimed_ended[w] || state.history.publishes[w] == 0)
        }),
        Property::always(SAFETY[2], |_, state: &State| {
            (0..WRITERS).all(|w| {
                state.history.publishes[w] <= 1
                    && state.checkpoints[w] == state.history.publishes[w]
            })
        }),
        Property::always(SAFETY[3], |_, state: &State| state.live_sweeps() <= 1),
        Property::always(SAFETY[4], |_, state: &State| {
            !state.history.fenced_publish_landed
        }),
        Property::always(SAFETY[5], |_, state: &State| {
            (0..WRITERS).all(|w| !state.history.abandoned[w] || state.history.publishes[w] == 0)
        }),
        Property::sometimes(REACHED[0], |_, state: &State| {
            (0..WRITERS).any(|w| state.history.claimed_published[w])
        }),
        Property::sometimes(REACHED[1], |_, state: &State| {
            (0..WRITERS).any(|w| state.history.claimed_ended[w])
        }),
        Property::sometimes(REACHED[2], |_, state: &State| {
            (0..WRITERS).any(|w| {
                state.history.abandoned[w]
                    && state.intents[w].is_none()
                    && state.splits[w] == SplitRow::MarkedForDeletion
            })
        }),
        Property::sometimes(REACHED[3], |_, state: &State| {
            (0..WRITERS)
                .any(|w| state.history.publishes[w] == 1 && !state.history.claimed_published[w])
        }),
        Property::sometimes(REACHED[4], |_, state: &State| {
            // A sweep still in progress whose gate another holds now.
            state.live_sweeps() == 1
                && state
                    .replicas
                    .iter()
                    .filter_map(|replica| replica.sweep)
                    .chain(match state.operator {
                        Operator::Sweeping(sweep) => Some(sweep),
                        _ => None,
                    })
                    .count()
                    == 2
        }),
        Property::sometimes(REACHED[5], |_, state: &State| {
            state.operator == Operator::Done
                && (0..WRITERS).any(|w| {
                    state.writers[w].begun
                        && state.splits[w] == SplitRow::Absent
                        && !state.history.claimed_ended[w]
                })
        }),
    ];
    if config.writers_stop {
        // Stable once true: no writer begins anything after it stopped, so a state reached
        // by two paths has the same verdict either way (the checker's `eventually` relies on
        // that), and every path ends: each action moves a measure that only grows (the
        // clock, a lease's end, an operation's progress).
        properties.push(Property::eventually(LIVENESS, |_, state: &State| {
            state.writers_stopped && state.all_settled()
        }));
    }
    properties
}
