//! The protocol's actions and what each does to the state: one action per conditional catalog
//! write (with the reads of the same engine step before it), and one per client step between
//! them, mirroring the engine's code paths (see [`crate::table::ACTION_TABLE`]).

use stateright::{Model, Property};

use crate::properties;
use crate::state::{
    AbortCall, Answer, History, Hold, IntentRow, Operator, Phase, PublishCall, REPLICAS, Replica,
    Settlement, SplitRow, State, Sweep, SweepStep, Sweeper, Time, WRITERS, Writer,
};

/// How the protocol is deployed in one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Writers act only while `now <= clock_max`; afterwards time goes on only as far as the
    /// longest lease, for the sweeps that wait on it.
    pub clock_max: Time,
    /// An operation's lease, from its begin or latest heartbeat.
    pub intent_lease: Time,
    /// A replica's membership lease, from its latest heartbeat.
    pub member_lease: Time,
    /// The dataset gate's lease from its acquisition (leases on object storage); `None`: a
    /// gate held until released, never taken over (in-process gates, Postgres advisory locks).
    pub gate_lease: Option<Time>,
    /// Whether an operator runs exclusive recovery (once).
    pub operator: bool,
    /// Whether the writers may stop for good (the liveness check).
    pub writers_stop: bool,
}

impl Config {
    /// The deployment the check runs: object-storage gates with leases (takeover), an
    /// operator, writers that may stop.
    pub const CHECKED: Config = Config {
        clock_max: 1,
        intent_lease: 1,
        member_lease: 2,
        gate_lease: Some(1),
        operator: true,
        writers_stop: false,
    };

    /// The deployment the replay drives the engine through: gates shared in one process
    /// (never taken over), no stopping.
    pub const REPLAYED: Config = Config {
        clock_max: 1,
        intent_lease: 1,
        member_lease: 2,
        gate_lease: None,
        operator: true,
        writers_stop: false,
    };

    /// Liveness: the writers stop at any point, no operator; every intent must settle.
    pub const LIVENESS: Config = Config {
        clock_max: 1,
        intent_lease: 1,
        member_lease: 2,
        gate_lease: Some(1),
        operator: false,
        writers_stop: true,
    };

    /// The last instant the clock reaches: past every lease taken while writers act.
    fn time_bound(&self, writers_stopped: bool) -> Time {
        if !writers_stopped {
            return self.clock_max;
        }
        let longest = self
            .intent_lease
            .max(self.member_lease)
            .max(self.gate_lease.unwrap_or(0));
        self.clock_max + longest
    }
}

/// A deliberate bug, enabled one at a time by the tests that prove the checker finds each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// The abort's end lands on what the abort read, without its condition on the intent:
    /// one whose publish landed meanwhile (its intent gone) is answered ended.
    AbortWithoutConditionalEnd,
    /// The publish's step lands on an intent whatever its phase (no condition on it not being
    /// `Abandoned`): an operation an abort or recovery fenced publishes.
    PublishWithoutPhaseCheck,
    /// A replica takes the dataset gate over before the holder's lease ran out.
    TakeoverBeforeLeaseEnd,
    /// Recovery's publish does not check the fencing epoch it carries.
    PublishWithoutEpochCheck,
    /// Exclusive recovery rolls an operation back on what it read, without fencing it first:
    /// a writer's publish landing between the roll-back's read and its marks is marked for
    /// deletion (found by mend-model on the engine before it fenced).
    RollBackWithoutFence,
    /// The publish answers "published" once it found every object in place, before its step
    /// lands: the writer acknowledges a commit that is not visible yet, and may never be.
    PublishAnsweredBeforeLand,
    /// An operation's end applies the checkpoint delta it carried (an empty publish with the
    /// delta still attached): the partition moves with nothing published.
    RollBackAppliesDelta,
    /// Roll-forward recovery never abandons an operation whose lease ran out (it reads every
    /// lease as live): a writer that stopped leaves its intent for ever.
    SweepNeverAbandons,
}

/// Which recovery mode a sweep runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    RollForward,
    Exclusive,
}

/// One action of the model; the `u8` is the writer or replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time passes by one unit.
    Tick,
    Begin(u8),
    Upload(u8),
    Heartbeat(u8),
    PublishStart(u8),
    PublishLand(u8),
    AbortStart(u8),
    AbortEnd(u8),
    /// Every writer stops for good (the liveness check only).
    WritersStop,
    MemberHeartbeat(u8),
    SweepStart(u8),
    SweepSettle(u8),
    ExclusiveStart,
    ExclusiveSettle,
}

/// The protocol under one configuration, with at most one deliberate bug.
#[derive(Clone, Copy, Debug)]
pub struct Protocol {
    pub config: Config,
    pub bug: Option<Bug>,
}

impl Protocol {
    pub fn new(config: Config) -> Self {
        Self { config, bug: None }
    }

    pub fn with_bug(config: Config, bug: Bug) -> Self {
        Self {
            config,
            bug: Some(bug),
        }
    }

    fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    pub fn initial(&self) -> State {
        State {
            now: 0,
            epoch: 0,
            intents: [None; WRITERS],
            splits: [SplitRow::Absent; WRITERS],
            objects: [false; WRITERS],
            checkpoints: [0; WRITERS],
            recorded_publish: [false; WRITERS],
            writers: [Writer {
                begun: false,
                uploaded: false,
                publish: PublishCall::Idle,
                abort: AbortCall::Idle,
                finished: false,
            }; WRITERS],
            replicas: [Replica {
                member_until: self.config.member_lease,
                sweep: None,
            }; REPLICAS],
            operator: if self.config.operator {
                Operator::NotRun
            } else {
                Operator::Done
            },
            gate: None,
            writers_stopped: false,
            history: History::default(),
        }
    }

    /// Every action in a fixed order; `next_state` answers `None` for those not enabled.
    pub fn all_actions() -> Vec<Action> {
        let mut all = vec![Action::Tick];
        for w in 0..WRITERS as u8 {
            all.extend([
                Action::Begin(w),
                Action::Upload(w),
                Action::Heartbeat(w),
                Action::PublishStart(w),
                Action::PublishLand(w),
                Action::AbortStart(w),
                Action::AbortEnd(w),
            ]);
        }
        all.push(Action::WritersStop);
        for r in 0..REPLICAS as u8 {
            all.extend([
                Action::MemberHeartbeat(r),
                Action::SweepStart(r),
                Action::SweepSettle(r),
            ]);
        }
        all.extend([Action::ExclusiveStart, Action::ExclusiveSettle]);
        all
    }

    /// The state after `action`, or `None` where it is not enabled or changes nothing.
    pub fn step(&self, state: &State, action: Action) -> Option<State> {
        let mut next = *state;
        let changed = match action {
            Action::Tick => self.tick(&mut next),
            Action::Begin(w) => self.writer_acts(&next, w) && begin(&mut next, self.config, w),
            Action::Upload(w) => self.writer_acts(&next, w) && upload(&mut next, w),
            Action::Heartbeat(w) => {
                self.writer_acts(&next, w) && heartbeat(&mut next, self.config, w)
            }
            Action::PublishStart(w) => {
                self.writer_acts(&next, w) && self.publish_start(&mut next, w)
            }
            Action::PublishLand(w) => self.writer_acts(&next, w) && self.publish_land(&mut next, w),
            Action::AbortStart(w) => self.writer_acts(&next, w) && abort_start(&mut next, w),
            Action::AbortEnd(w) => self.writer_acts(&next, w) && self.abort_end(&mut next, w),
            Action::WritersStop => {
                let enabled = self.config.writers_stop && !next.writers_stopped;
                next.writers_stopped = true;
                enabled
            }
            Action::MemberHeartbeat(r) => member_heartbeat(&mut next, self.config, r),
            Action::SweepStart(r) => self.sweep_start(&mut next, r),
            Action::SweepSettle(r) => self.sweep_settle(&mut next, Sweeper::Replica(r)),
            Action::ExclusiveStart => self.exclusive_start(&mut next),
            Action::ExclusiveSettle => self.sweep_settle(&mut next, Sweeper::Operator),
        };
        (changed && next != *state).then_some(next)
    }

    /// Whether writer `w` may take a step now: writers act only before they stop, and only up
    /// to the clock's bound (the state space stays finite). A call in flight goes on after an
    /// answer to another said how the operation ended; a new call is only sent before.
    fn writer_acts(&self, state: &State, _w: u8) -> bool {
        !state.writers_stopped && state.now <= self.config.clock_max
    }

    fn tick(&self, state: &mut State) -> bool {
        if state.now >= self.config.time_bound(state.writers_stopped) {
            return false;
        }
        state.now += 1;
        true
    }

    /// `publish_operation` up to its step. A writer whose process put its object goes straight
    /// to its step, on the plan and the object its process remembers; otherwise it reads the
    /// intent and looks for the object.
    fn publish_start(&self, state: &mut State, w: u8) -> bool {
        let i = w as usize;
        if !sends_new_calls(state, i) || state.writers[i].publish != PublishCall::Idle {
            return false;
        }
        if state.writers[i].uploaded {
            if self.has(Bug::PublishAnsweredBeforeLand) {
                claim(state, w, Call::Publish, Answer::Published);
            } else {
                state.writers[i].publish = PublishCall::AtLand;
            }
            return true;
        }
        match state.intents[i] {
            Some(intent) if intent.phase == Phase::Armed => {
                if !state.objects[i] {
                    // Refused before anything is written; the writer may go on (upload).
                    claim(state, w, Call::Publish, Answer::Nothing);
                } else if self.has(Bug::PublishAnsweredBeforeLand) {
                    claim(state, w, Call::Publish, Answer::Published);
                } else {
                    state.writers[i].publish = PublishCall::AtLand;
                }
            }
            // Gone (published, or ended) or fenced: the answer says which.
            _ => answer_after_the_end(state, w, Call::Publish),
        }
        true
    }

    /// `publish_operation`'s step (`publish_commit`): published, recorded under the
    /// operation's key and the intent deleted in one step, only while the intent is there and
    /// not fenced (answered from the record when recovery published it first). Refused for
    /// good (its rows or checkpoint moved), it goes on to end the operation; parked there,
    /// this is that end.
    fn publish_land(&self, state: &mut State, w: u8) -> bool {
        let i = w as usize;
        match state.writers[i].publish {
            PublishCall::AtLand => {}
            PublishCall::AtEnd { observed } => {
                self.end_step(state, w, Call::Publish, observed);
                return true;
            }
            PublishCall::Idle => return false,
        }
        if state.recorded_publish[i] {
            state.intents[i] = None;
            claim(state, w, Call::Publish, Answer::Published);
            return true;
        }
        match state.intents[i] {
            // Settled another way meanwhile (recovery rolled it forward, or ended it): the
            // answer says how.
            None => answer_after_the_end(state, w, Call::Publish),
            // Fenced (an abort, recovery): it never publishes.
            Some(intent)
                if intent.phase == Phase::Abandoned && !self.has(Bug::PublishWithoutPhaseCheck) =>
            {
                claim(state, w, Call::Publish, Answer::Ended);
            }
            Some(_) if publish_applies(state, i) => {
                land_publish(state, i);
                state.intents[i] = None;
                claim(state, w, Call::Publish, Answer::Published);
            }
            // Refused for good, nothing landed: the operation ends next.
            Some(intent) => {
                state.writers[i].publish = PublishCall::AtEnd {
                    observed: intent.phase,
                };
            }
        }
        true
    }

    /// `abort_operation`'s end, once it read the intent.
    fn abort_end(&self, state: &mut State, w: u8) -> bool {
        let i = w as usize;
        let AbortCall::AtEnd { observed } = state.writers[i].abort else {
            return false;
        };
        self.end_step(state, w, Call::Abort, observed);
        true
    }

    /// An operation's end (`Engine::end_operation`): one conditional step
    /// (`settle_intents` with one abandonment, on the phase the call read): the intent
    /// deleted, its staged row unstaged with its object, its end recorded; the call answers
    /// ended. The intent gone (its publish landed, or something else ended it): nothing
    /// written, the answer says what did. Its phase moved since it was read: refused, the
    /// call reads it again and parks at the end once more.
    fn end_step(&self, state: &mut State, w: u8, call: Call, observed: Phase) {
        let i = w as usize;
        match state.intents[i] {
            None if self.has(Bug::AbortWithoutConditionalEnd) => {
                claim(state, w, call, Answer::Ended);
            }
            None => answer_after_the_end(state, w, call),
            Some(intent) if intent.phase != observed => {
                let observed = intent.phase;
                match call {
                    Call::Publish => state.writers[i].publish = PublishCall::AtEnd { observed },
                    _ => state.writers[i].abort = AbortCall::AtEnd { observed },
                }
            }
            Some(_) => {
                state.history.abandoned[i] = true;
                if state.splits[i] == SplitRow::Staged {
                    state.splits[i] = SplitRow::Absent;
                    state.objects[i] = false;
                }
                if self.has(Bug::RollBackAppliesDelta) {
                    state.checkpoints[i] += 1;
                }
                state.intents[i] = None;
                claim(state, w, call, Answer::Ended);
            }
        }
    }

    /// Whether `sweeper` may take the dataset gate now: it is free, or its holder's lease ran
    /// out (a takeover).
    fn gate_takeable(&self, state: &State) -> bool {
        match state.gate {
            None => true,
            Some(hold) => hold.until <= state.now || self.has(Bug::TakeoverBeforeLeaseEnd),
        }
    }

    fn take_gate(&self, state: &mut State, holder: Sweeper) -> Time {
        let until = match self.config.gate_lease {
            Some(lease) => state.now + lease,
            None => Time::MAX,
        };
        state.gate = Some(Hold { holder, until });
        until
    }

    /// A replica that owns the dataset takes the gate, observes, and decides; it parks at its
    /// settle, or ends at once when it has nothing to execute (then it changed nothing, and
    /// the action is not taken).
    fn sweep_start(&self, state: &mut State, r: u8) -> bool {
        let ri = r as usize;
        if state.owner() != Some(ri)
            || state.replicas[ri].sweep.is_some()
            || !self.gate_takeable(state)
        {
            return false;
        }
        let steps = decide(state, Mode::RollForward, self.bug);
        if steps.iter().all(Option::is_none) {
            return false;
        }
        let hold_until = self.take_gate(state, Sweeper::Replica(r));
        let sweep = Sweep { hold_until, steps };
        state.replicas[ri].sweep = Some(sweep);
        true
    }

    /// The operator's exclusive recovery: the permit (every gate of the dataset), the fencing
    /// epoch bumped, then observe and decide in exclusive mode; it parks at its first step, or
    /// ends when it has none.
    fn exclusive_start(&self, state: &mut State) -> bool {
        if state.operator != Operator::NotRun || !self.gate_takeable(state) {
            return false;
        }
        let hold_until = self.take_gate(state, Sweeper::Operator);
        state.epoch += 1;
        let steps = decide(state, Mode::Exclusive, self.bug);
        state.operator = Operator::Sweeping(Sweep { hold_until, steps });
        end_when_done(state, Sweeper::Operator);
        true
    }

    /// The sweep's next step, one conditional catalog write: a batch settled, or an exclusive
    /// roll-back's fence (and, once it landed, the roll-back). The sweep ends after its last.
    fn sweep_settle(&self, state: &mut State, sweeper: Sweeper) -> bool {
        let Some(sweep) = sweep_of(state, sweeper) else {
            return false;
        };
        let batch = match sweep.steps[0] {
            Some(SweepStep::Settle(batch)) => batch,
            Some(SweepStep::RollBack { writer }) => {
                match self.roll_back_fence(state, writer) {
                    Some(next) => replace_step(state, sweeper, next),
                    None => pop_step(state, sweeper),
                }
                end_when_done(state, sweeper);
                return true;
            }
            Some(SweepStep::Unstage { writer, staged }) => {
                self.roll_back_unstage(state, writer, staged);
                pop_step(state, sweeper);
                end_when_done(state, sweeper);
                return true;
            }
            None => return false,
        };
        // A holder whose lease ran out may not have noticed yet (its renewal had not run):
        // its write is not refused for that, so the conditional writes and the fencing
        // epoch must hold on their own.
        let settlements: Vec<Settlement> = batch.into_iter().flatten().collect();
        let mut after = *state;
        let all_apply = settlements
            .iter()
            .all(|settlement| self.settle(&mut after, *settlement));
        if all_apply || settlements.len() == 1 {
            // One settlement refused on its own is overtaken: nothing written.
            if all_apply {
                *state = after;
            }
            pop_step(state, sweeper);
        } else {
            // The catalog refused the batch whole (nothing written); the sweep settles the
            // same intents one batch of one at a time, each its own conditional write.
            let Some(mut sweep) = sweep_of(state, sweeper) else {
                return false;
            };
            let rest: Vec<Option<SweepStep>> = sweep.steps[1..].to_vec();
            let singles = settlements.iter().map(|settlement| {
                let mut one = [None; WRITERS];
                one[0] = Some(*settlement);
                Some(SweepStep::Settle(one))
            });
            let steps: Vec<Option<SweepStep>> = singles.chain(rest).collect();
            for (slot, step) in sweep.steps.iter_mut().zip(steps) {
                *slot = step;
            }
            set_sweep(state, sweeper, Some(sweep));
            return true;
        }
        end_when_done(state, sweeper);
        true
    }

    /// One settlement of a batch, on the state the ones before it left; false where the
    /// catalog refuses it (then the whole batch wrote nothing).
    fn settle(&self, state: &mut State, settlement: Settlement) -> bool {
        match settlement {
            Settlement::Abandon {
                writer,
                observed_at,
            } => {
                let i = writer as usize;
                let Some(intent) = state.intents[i] else {
                    // Settled another way first: nothing written, and the batch goes on
                    // (`Settled::Gone`).
                    return true;
                };
                // Renewed or confirmed since it observed: refused, nothing written.
                if intent.phase == Phase::Abandoned
                    || (intent.phase == Phase::Armed && intent.lease_until <= observed_at)
                {
                    state.history.abandoned[i] = true;
                    if state.splits[i] == SplitRow::Staged {
                        state.splits[i] = SplitRow::MarkedForDeletion;
                    }
                    state.intents[i] = None;
                    return true;
                }
                false
            }
            Settlement::Publish { writer, epoch } => {
                let i = writer as usize;
                // Published already under the operation's key: answered from the record,
                // the intent deleted if still there.
                if state.recorded_publish[i] {
                    state.intents[i] = None;
                    return true;
                }
                // Otherwise only while its intent is there and not fenced, checked in the same
                // step.
                let Some(intent) = state.intents[i] else {
                    return false;
                };
                if intent.phase == Phase::Abandoned {
                    return false;
                }
                let epoch_holds = epoch == state.epoch || self.has(Bug::PublishWithoutEpochCheck);
                if epoch_holds && publish_applies(state, i) {
                    if epoch != state.epoch {
                        state.history.fenced_publish_landed = true;
                    }
                    land_publish(state, i);
                    state.intents[i] = None;
                    true
                } else {
                    false
                }
            }
            Settlement::Discard { writer } => {
                state.intents[writer as usize] = None;
                true
            }
        }
    }

    /// The exclusive sweep's roll-back of one operation (`execute`, `RollBack`), first write:
    /// its fence (`abandon_intent(None)`, which an intent fenced already passes too), then it
    /// reads the operation's rows. If the operation was settled since, there is nothing to
    /// fence, and nothing is touched: the sweep reports it overtaken. Once fenced, no publish
    /// of it can land. Returns the step that follows, if any.
    fn roll_back_fence(&self, state: &mut State, w: u8) -> Option<SweepStep> {
        let i = w as usize;
        let intent = state.intents[i]?;
        if !self.has(Bug::RollBackWithoutFence) {
            state.intents[i] = Some(IntentRow {
                phase: Phase::Abandoned,
                ..intent
            });
        }
        state.history.abandoned[i] = true;
        Some(SweepStep::Unstage {
            writer: w,
            staged: state.splits[i] == SplitRow::Staged,
        })
    }

    /// The roll-back's second write: the row it read staged marked (whatever its state now:
    /// the fence keeps a publish from landing in between), its object and row deleted, then
    /// the intent.
    fn roll_back_unstage(&self, state: &mut State, w: u8, staged: bool) {
        let i = w as usize;
        if staged {
            state.splits[i] = SplitRow::Absent;
            state.objects[i] = false;
        }
        state.intents[i] = None;
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![self.initial()]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        actions.extend(
            Self::all_actions()
                .into_iter()
                .filter(|&action| self.step(state, action).is_some()),
        );
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        self.step(state, action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(self.config)
    }
}

/// `begin_operation`: the intent `Armed` with its lease, the row staged create-only.
fn begin(state: &mut State, config: Config, w: u8) -> bool {
    let i = w as usize;
    if state.writers[i].begun {
        return false;
    }
    state.intents[i] = Some(IntentRow {
        phase: Phase::Armed,
        lease_until: state.now + config.intent_lease,
        created_at: state.now,
    });
    state.splits[i] = SplitRow::Staged;
    state.writers[i].begun = true;
    true
}

/// `upload_object`: the object put on the plan the writer's process began with (it reads no
/// intent first), then, beside its record, a look at the intent: one gone or fenced by then is
/// answered as ended, and its object is left for reconcile, which discards an ended
/// operation's objects.
fn upload(state: &mut State, w: u8) -> bool {
    let i = w as usize;
    if !sends_new_calls(state, i) || state.objects[i] {
        return false;
    }
    state.objects[i] = true;
    state.writers[i].uploaded = true;
    match state.intents[i] {
        Some(intent) if intent.phase != Phase::Abandoned => {}
        _ => answer_after_the_end(state, w, Call::Other),
    }
    true
}

/// `heartbeat_operation`: renews the lease, conditional on the phase it read (it reads again
/// and retries when the phase moved). A lease never moves back (`update_intent` keeps the
/// later one).
fn heartbeat(state: &mut State, config: Config, w: u8) -> bool {
    let i = w as usize;
    if !sends_new_calls(state, i) {
        return false;
    }
    match state.intents[i] {
        Some(intent) if intent.phase != Phase::Abandoned => {
            state.intents[i] = Some(IntentRow {
                lease_until: intent.lease_until.max(state.now + config.intent_lease),
                ..intent
            });
        }
        _ => answer_after_the_end(state, w, Call::Other),
    }
    true
}

/// `abort_operation` up to its end, which it reaches without reading.
fn abort_start(state: &mut State, w: u8) -> bool {
    let i = w as usize;
    if !sends_new_calls(state, i) || state.writers[i].abort != AbortCall::Idle {
        return false;
    }
    // A writer sends calls only once it began, and its process remembers the plan it began
    // (`Engine::abort_operation`): the abort goes straight to its one conditional step on the
    // phase it began in, reading nothing first; the step finds what happened since.
    state.writers[i].abort = AbortCall::AtEnd {
        observed: Phase::Armed,
    };
    true
}

/// A replica's membership heartbeat: renews its lease, or joins again when it lapsed.
fn member_heartbeat(state: &mut State, config: Config, r: u8) -> bool {
    let until = state.now + config.member_lease;
    let replica = &mut state.replicas[r as usize];
    if replica.member_until == until {
        return false;
    }
    replica.member_until = until;
    true
}

/// What a sweep in `mode` decides for each intent, oldest first (the default policy's
/// decisions, `mend_default_policy`'s `decide_recovery`), as the steps that execute them.
fn decide(state: &State, mode: Mode, bug: Option<Bug>) -> [Option<SweepStep>; 2 * WRITERS] {
    let mut order: Vec<usize> = (0..WRITERS)
        .filter(|&i| state.intents[i].is_some())
        .collect();
    order.sort_by_key(|&i| (state.intents[i].map(|intent| intent.created_at), i));
    let mut steps: Vec<SweepStep> = Vec::new();
    let mut batch: [Option<Settlement>; WRITERS] = [None; WRITERS];
    let mut batched = 0;
    for i in order {
        let intent = state.intents[i].expect("only intents that are there");
        let writer = i as u8;
        let settled = state.splits[i] == SplitRow::Published && state.checkpoints[i] >= 1;
        let lease_live = intent.lease_until > state.now || bug == Some(Bug::SweepNeverAbandons);
        let effects_in_place = state.splits[i] != SplitRow::Absent && state.objects[i];
        let settlement = if intent.phase == Phase::Abandoned {
            Some(Settlement::Abandon {
                writer,
                observed_at: state.now,
            })
        } else if settled {
            Some(Settlement::Discard { writer })
        } else if lease_live && mode == Mode::RollForward {
            None
        } else if effects_in_place && publish_applies(state, i) {
            Some(Settlement::Publish {
                writer,
                epoch: state.epoch,
            })
        } else if intent.phase == Phase::Armed && mode == Mode::RollForward {
            Some(Settlement::Abandon {
                writer,
                observed_at: state.now,
            })
        } else if mode == Mode::Exclusive {
            // Executed alone, after the batch before it.
            if batched > 0 {
                steps.push(SweepStep::Settle(batch));
                batch = [None; WRITERS];
                batched = 0;
            }
            steps.push(SweepStep::RollBack { writer });
            None
        } else {
            // Blocked: an operator must decide.
            None
        };
        if let Some(settlement) = settlement {
            batch[batched] = Some(settlement);
            batched += 1;
        }
    }
    if batched > 0 {
        steps.push(SweepStep::Settle(batch));
    }
    let mut fixed = [None; 2 * WRITERS];
    for (slot, step) in fixed.iter_mut().zip(steps) {
        *slot = Some(step);
    }
    fixed
}

/// Whether writer `i`'s publish applies: its row staged, its partition where the delta starts.
fn publish_applies(state: &State, i: usize) -> bool {
    state.splits[i] == SplitRow::Staged && state.checkpoints[i] == 0
}

/// A publish of writer `i`'s split lands: the row published, the delta applied, the result
/// recorded under the operation's key.
fn land_publish(state: &mut State, i: usize) {
    state.splits[i] = SplitRow::Published;
    state.checkpoints[i] += 1;
    state.recorded_publish[i] = true;
    state.history.publishes[i] += 1;
}

/// Which of a writer's calls answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Publish,
    Abort,
    /// An upload or a heartbeat, which are one step each.
    Other,
}

/// Whether writer `i` sends a new call: begun, and not yet told how its operation ended.
fn sends_new_calls(state: &State, i: usize) -> bool {
    state.writers[i].begun && !state.writers[i].finished
}

/// What a step answers once the intent is gone or fenced: the recorded publish, or ended.
fn answer_after_the_end(state: &mut State, w: u8, call: Call) {
    if state.recorded_publish[w as usize] {
        claim(state, w, call, Answer::Published);
    } else {
        claim(state, w, call, Answer::Ended);
    }
}

/// Writer `w`'s `call` answers `answer`; a claim about its operation's end finishes its
/// client.
fn claim(state: &mut State, w: u8, call: Call, answer: Answer) {
    let i = w as usize;
    match call {
        Call::Publish => state.writers[i].publish = PublishCall::Idle,
        Call::Abort => state.writers[i].abort = AbortCall::Idle,
        Call::Other => {}
    }
    match answer {
        Answer::Nothing => return,
        Answer::Published => state.history.claimed_published[i] = true,
        Answer::Ended => state.history.claimed_ended[i] = true,
    }
    state.writers[i].finished = true;
}

fn sweep_of(state: &State, sweeper: Sweeper) -> Option<Sweep> {
    match sweeper {
        Sweeper::Replica(r) => state.replicas[r as usize].sweep,
        Sweeper::Operator => match state.operator {
            Operator::Sweeping(sweep) => Some(sweep),
            _ => None,
        },
    }
}

fn set_sweep(state: &mut State, sweeper: Sweeper, sweep: Option<Sweep>) {
    match sweeper {
        Sweeper::Replica(r) => state.replicas[r as usize].sweep = sweep,
        Sweeper::Operator => {
            state.operator = match sweep {
                Some(sweep) => Operator::Sweeping(sweep),
                None => Operator::Done,
            }
        }
    }
}

/// Replaces the sweep's next step with `next` (a roll-back's second write after its first).
fn replace_step(state: &mut State, sweeper: Sweeper, next: SweepStep) {
    if let Some(mut sweep) = sweep_of(state, sweeper) {
        sweep.steps[0] = Some(next);
        set_sweep(state, sweeper, Some(sweep));
    }
}

fn pop_step(state: &mut State, sweeper: Sweeper) {
    if let Some(mut sweep) = sweep_of(state, sweeper) {
        sweep.steps.rotate_left(1);
        sweep.steps[2 * WRITERS - 1] = None;
        set_sweep(state, sweeper, Some(sweep));
    }
}

/// The sweep ends once it has no step left, and releases the gate if it still holds it.
fn end_when_done(state: &mut State, sweeper: Sweeper) {
    if sweep_of(state, sweeper).is_none_or(|sweep| sweep.steps[0].is_some()) {
        return;
    }
    set_sweep(state, sweeper, None);
    if state.gate.is_some_and(|hold| hold.holder == sweeper) {
        state.gate = None;
    }
}
