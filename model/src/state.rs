//! The model's state: what the catalog holds (intents, split rows, objects, checkpoint, fencing
//! epoch, recorded publishes), where each writer's, replica's and the operator's call stands,
//! the dataset gate and the fleet's membership leases, and a history of the answers given and
//! the publishes that landed, which the properties read.

/// Writers: each drives one operation (`w0`, `w1`), which stages and publishes one split
/// (`s0`, `s1`) with a checkpoint delta moving its own partition (`p0`, `p1`) from 0 to 1.
pub const WRITERS: usize = 2;
/// Replicas of the fleet, each running the dataset's roll-forward sweep when it owns it.
pub const REPLICAS: usize = 2;

/// Model time: one unit is [`crate::TIME_UNIT_MS`] of the engine's clock.
pub type Time = u8;

/// An intent's phase, as the catalog stores it (`mend::intent::IntentPhase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Armed,
    Abandoned,
}

/// One operation's intent row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IntentRow {
    pub phase: Phase,
    /// The owner's lease is live while `now < lease_until`.
    pub lease_until: Time,
    /// Sweeps decide on intents oldest first: by creation time, then operation id.
    pub created_at: Time,
}

/// One split's row. A row an abort deletes goes back to `Absent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitRow {
    Absent,
    Staged,
    Published,
    MarkedForDeletion,
}

/// A writer's `publish_operation` in flight: parked at its next conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PublishCall {
    /// None in flight.
    Idle,
    /// It read the intent `Armed` and every object in place; next: its one step, which
    /// publishes, records the result under the operation's key and deletes the intent, only
    /// while the intent is there and not fenced, and only if the publish applies.
    AtLand,
    /// Its step was refused for good (the publish no longer applies): next, the operation's
    /// end, as an abort's ([`AbortCall::AtEnd`]), on the phase it read.
    AtEnd { observed: Phase },
}

/// A writer's `abort_operation` in flight: parked at its next conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortCall {
    /// None in flight.
    Idle,
    /// It observed the intent in phase `observed` (armed, as its process began it, or as it
    /// read it); next: the end, one conditional step on that
    /// phase (`settle_intents` with one abandonment): the intent deleted, its staged row
    /// unstaged, its end recorded. A phase that moved since refuses it; the abort reads again
    /// and parks here on the phase it finds.
    AtEnd { observed: Phase },
}

/// Where a writer's client stands. A writer may have a publish and an abort in flight at once
/// (sent to two replicas, or an abort sent while a publish hangs): the race the protocol's
/// conditional writes decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Writer {
    pub begun: bool,
    /// Its process put its object (and remembers so, with the plan it began): its publish
    /// goes straight to its step, reading nothing first.
    pub uploaded: bool,
    pub publish: PublishCall,
    pub abort: AbortCall,
    /// Answered whether its operation published or ended: it sends nothing new (the calls in
    /// flight still finish).
    pub finished: bool,
}

/// What a call answered about the operation's end: the claims the properties hold it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// Nothing about the end (a heartbeat or upload that landed, a refusal before anything
    /// happened).
    Nothing,
    /// Published (a publish's view, or a refusal naming the publish).
    Published,
    /// Ended without publishing; never becomes visible.
    Ended,
}

/// One settlement of a sweep's batch (`mend::catalog::Settlement`), as decided on what the
/// sweep observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Settlement {
    /// Fence (if still `Armed` and its lease ran out by `observed_at`), mark its own staged
    /// rows, delete the intent; an intent gone already writes nothing and refuses nothing.
    Abandon { writer: u8, observed_at: Time },
    /// Publish as planned carrying `epoch`, record it under the operation's key, delete the
    /// intent; only while the intent is there and not `Abandoned` (a publish recorded already
    /// only deletes the intent, if still there).
    Publish { writer: u8, epoch: u8 },
    /// Already settled: delete the intent.
    Discard { writer: u8 },
}

/// One step of a sweep after it observed, each one conditional catalog write: a batch
/// settled (`settle_intents`), or an exclusive sweep's roll-back of one operation, which it
/// executes alone between batches in two writes: the operation's fence (`abandon_intent`),
/// after which it reads the operation's rows; then the marks of the rows it read staged, with
/// their objects and the intent deleted. Only a roll-back whose fence landed goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SweepStep {
    Settle([Option<Settlement>; WRITERS]),
    RollBack {
        writer: u8,
    },
    /// The roll-back after its fence: `staged` says whether it read the row staged.
    Unstage {
        writer: u8,
        staged: bool,
    },
}

/// A sweep in progress, parked at its next step (the steps before it have run).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sweep {
    /// The gate hold it runs under: its writes are refused from `hold_until` on.
    pub hold_until: Time,
    /// The steps left, in order; a sweep in progress has at least one.
    pub steps: [Option<SweepStep>; 2 * WRITERS],
}

/// Who holds the dataset gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sweeper {
    Replica(u8),
    Operator,
}

/// The dataset gate's hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub holder: Sweeper,
    /// Its lease: another may take the gate over from then on.
    pub until: Time,
}

/// A fleet replica: its membership lease and its sweep in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Replica {
    /// A member while `now < member_until`; the live member with the lowest index owns the
    /// dataset's supervision.
    pub member_until: Time,
    pub sweep: Option<Sweep>,
}

/// The operator's exclusive recovery: it runs once, if the configuration has an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    NotRun,
    Sweeping(Sweep),
    Done,
}

/// What happened, for the properties: every claim made to each writer, and every publish that
/// landed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    pub claimed_published: [bool; WRITERS],
    pub claimed_ended: [bool; WRITERS],
    /// Publishes of each writer's split that landed.
    pub publishes: [u8; WRITERS],
    /// Whether each operation's intent was ever `Abandoned`.
    pub abandoned: [bool; WRITERS],
    /// A publish carrying a fencing epoch other than the dataset's landed.
    pub fenced_publish_landed: bool,
}

/// The whole model state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Time,
    /// The dataset's fencing epoch: exclusive recovery adds one.
    pub epoch: u8,
    pub intents: [Option<IntentRow>; WRITERS],
    pub splits: [SplitRow; WRITERS],
    pub objects: [bool; WRITERS],
    /// Each writer's partition's position.
    pub checkpoints: [u8; WRITERS],
    /// The publish recorded under `op:<id>:publish`, which answers a publish sent again.
    pub recorded_publish: [bool; WRITERS],
    pub writers: [Writer; WRITERS],
    pub replicas: [Replica; REPLICAS],
    pub operator: Operator,
    pub gate: Option<Hold>,
    /// From here on no writer takes a step (for liveness).
    pub writers_stopped: bool,
    pub history: History,
}

impl State {
    /// The replica that owns the dataset now: the live member with the lowest index.
    pub fn owner(&self) -> Option<usize> {
        (0..REPLICAS).find(|&r| self.replicas[r].member_until > self.now)
    }

    /// Sweeps in progress whose gate hold is still live.
    pub fn live_sweeps(&self) -> usize {
        let replicas = self.replicas.iter().filter_map(|replica| replica.sweep);
        let operator = match self.operator {
            Operator::Sweeping(sweep) => Some(sweep),
            _ => None,
        };
        replicas
            .chain(operator)
            .filter(|sweep| sweep.hold_until > self.now)
            .count()
    }

    /// Every operation that began is settled: published, or ended with its intent gone and
    /// none of its rows left staged; and no sweep is in progress.
    pub fn all_settled(&self) -> bool {
        let operations =
            (0..WRITERS).all(|w| self.intents[w].is_none() && self.splits[w] != SplitRow::Staged);
        let sweeps = self.replicas.iter().all(|replica| replica.sweep.is_none())
            && !matches!(self.operator, Operator::Sweeping(_));
        operations && sweeps
    }
}
