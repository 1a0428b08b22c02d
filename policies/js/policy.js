// mend's default policy, ported to JavaScript: the same decisions as `guest/src`, made by a
// component built from this one ES module (see README.md beside it).
//
// Each section below is one export of the `mend:policy` world (`wit/policy.wit`) and ports one
// file of `guest/src`: `describe` (lib.rs), `planStage` (stage.rs), `validatePublishes`
// (publish.rs), `decideRecovery` (recovery.rs), `planReconcile` (reconcile.rs) and `planGc`
// (gc.rs). Every answer must equal the Rust default's, order and strings included: the golden
// scenarios in `guest/scenarios` hold both to it.
//
// Like the Rust policy, this module is pure: no clock, no randomness, no environment, no
// state kept between calls. Time comes in as `nowMs`; decisions depend only on the input.
//
// How WIT values appear here (componentize-js and componentize-qjs agree on all but numbers
// and absent options): records are objects with camelCase fields, enums are their case names
// as strings (`"create-only"`, `"marked-for-deletion"`), variants are `{ tag, val }`. Two
// differences are absorbed where they matter:
// - `u64` and `s64` are BigInt in componentize-js and Number in componentize-qjs (exact only
//   within 2^53); every comparison and subtraction of them goes through `u64(...)` or
//   `s64(...)` below, so that either works, exactly wherever the engine handed over an exact
//   value;
// - an absent `option<T>` is `undefined` in one and `null` in the other: `isNone` takes both.

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// Sorts `ids` in place, in the order Rust's `str::cmp` gives, and returns them. Rust compares
/// UTF-8 bytes, which is code point order; JavaScript's `<` compares UTF-16 code units, which
/// is the same order except for a character above U+FFFF (a surrogate pair, 0xD800..0xDFFF)
/// against one in U+E000..U+FFFF. Ids are sorted with this everywhere the Rust code sorts them
/// (a sorted Vec, a BTreeSet or a BTreeMap), so the answers list them in the same order.
///
/// Both engines interpret JavaScript (no JIT in a component), where comparing unit by unit in
/// JavaScript made a 100,000-id stage plan about twice as slow as the engine's own `<`: that is
/// used whenever no id holds a surrogate, which one pass over the ids tells.
function sortIds(ids) {
  return ids.sort(ids.some(hasSurrogate) ? compareCodePoints : compareUnits);
}

const SURROGATE = /[\uD800-\uDFFF]/;

function hasSurrogate(id) {
  return SURROGATE.test(id);
}

function compareUnits(a, b) {
  if (a === b) return 0;
  return a < b ? -1 : 1;
}

/// Code point order: the surrogates are moved above U+E000..U+FFFF before comparing.
function compareCodePoints(a, b) {
  if (a === b) return 0;
  const shared = Math.min(a.length, b.length);
  for (let i = 0; i < shared; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

function codePointRank(unit) {
  if (unit < 0xd800) return unit;
  return unit >= 0xe000 ? unit - 0x800 : unit + 0x2000;
}

/// Distinct ids, sorted as a Rust `BTreeSet<&str>` holds them.
function sortedSet(ids) {
  return sortIds([...new Set(ids)]);
}

/// The state of each row by id. A row listed twice counts as its last listing, as in a
/// `BTreeMap` collected from the list.
function rowStates(rows) {
  const states = new Map();
  for (const row of rows) states.set(row.splitId, row.state);
  return states;
}

/// A split state as Rust's `Display` writes it (`SplitState::as_str`): snake_case, the name
/// used in storage and JSON, not the WIT case name.
const STATE_NAMES = {
  staged: 'staged',
  published: 'published',
  'marked-for-deletion': 'marked_for_deletion',
};

const I64_MIN = -(2n ** 63n);
const I64_MAX = 2n ** 63n - 1n;

/// A WIT `u64` as a BigInt, whichever engine handed it over. componentize-qjs reads a `u64` as
/// a signed 64-bit integer before making a Number of it, so 2^64 - 1 arrives as -1: reading it
/// back as unsigned gives the value again (rounded to a double's 53 bits, as the engine left it).
function u64(value) {
  return BigInt.asUintN(64, BigInt(value));
}

/// A WIT `s64` as a BigInt, whichever engine handed it over.
///
/// componentize-js 0.23.0 hands an `s64` that travels as a plain core-wasm argument (`nowMs`
/// of decide-recovery, plan-reconcile and plan-gc) over as its unsigned reading, so -1 arrives
/// as 2^64 - 1 (an `s64` read from memory, `updatedAtMs` or `ageMs`, arrives signed): a BigInt
/// is read back as signed. componentize-qjs hands a Number rounded to 53 bits, so values near
/// i64::MAX arrive as 2^63: a Number is clamped to the range instead, since wrapping it would
/// turn the end of time into its start.
function s64(value) {
  if (typeof value === 'bigint') return BigInt.asIntN(64, value);
  const rounded = BigInt(value);
  return rounded > I64_MAX ? I64_MAX : rounded;
}

function isNone(option) {
  return option === undefined || option === null;
}

// ---------------------------------------------------------------------------------------------
// describe (guest/src/lib.rs)
// ---------------------------------------------------------------------------------------------

/// The ABI this module implements, the major and minor of the `mend:policy` WIT package, and
/// the revision of the decision semantics: the same as the Rust default's, since it decides
/// the same. Bump the revision with the Rust one, never apart from it.
const ABI_MAJOR = 1;
const ABI_MINOR = 5;
const SEMANTICS_REVISION = 1;

/// The Rust default reports its crate's version (the workspace's); this port reports the same
/// version, kept by hand with the workspace's `version` in the root Cargo.toml.
const VERSION = '0.1.0';

export function describe() {
  return {
    name: 'mend-default-js',
    version: VERSION,
    abiMajor: ABI_MAJOR,
    abiMinor: ABI_MINOR,
    semanticsRevision: SEMANTICS_REVISION,
    requiredCapabilities: [
      'stage.upsert',
      'stage.create-only',
      'publish.checkpoint',
      'publish.token',
      'stage.standard-plans',
    ],
  };
}

// ---------------------------------------------------------------------------------------------
// plan-stage (guest/src/stage.rs)
// ---------------------------------------------------------------------------------------------
//
// | mode        | no row  | staged row         | published / marked row        |
// |-------------|---------|--------------------|-------------------------------|
// | upsert      | insert  | overwrite          | reject (the whole batch)      |
// | create-only | insert  | skip (staged)      | skip (published / marked)     |
//
// Duplicate ids in one request are folded into one decision, with the outcome the entries
// would have had one after another: in create-only mode the first entry wins (the later ones
// would find it and skip), in upsert mode the last one does (each overwrites the one before).
//
// Since ABI 1.5 the host folds the duplicates' order for it: each distinct id arrives as
// its group of request indices, with its row, as `plan_groups` in stage.rs decides them.

/// One decision per distinct split id, as a `stage-plan`: the index of the entry that
/// supplies each, its action, and the reason of each rejection. The request arrives grouped by
/// id (ABI 1.5: the host sorts it): group `g` is the request indices
/// `entries[ends[g - 1]..ends[g]]`, in request order, and its row's state is `rows[g]`, so
/// no id is read or compared here. An input built wrongly (a group empty or past the entries,
/// another number of rows than of groups) throws, which traps: the host reports a failed
/// call, never a plan.
export function planStage(input) {
  const { entries, ends, rows } = input;
  if (ends.length !== rows.length) throw new Error('one row state per group');
  const requestIndices = new Uint32Array(ends.length);
  const actions = new Uint8Array(ends.length);
  const reasons = [];
  let start = 0;
  for (let group = 0; group < ends.length; group++) {
    const end = Number(ends[group]);
    if (end <= start || end > entries.length) throw new Error(`group ${group} is empty or past the entries`);
    requestIndices[group] = input.mode === 'upsert' ? entries[end - 1] : entries[start];
    if (rows[group] >= ROW_STATES.length) throw new Error(`row state ${rows[group]} is no case of row-state`);
    const state = ROW_STATES[rows[group]];
    const action = stageAction(input.mode, state);
    actions[group] = PLANNED_ACTIONS.indexOf(action);
    if (action === 'reject') reasons.push(rejection(state));
    start = end;
  }
  return { requestIndices: [...requestIndices], actions, reasons };
}

/// The `row-state` cases by index (ABI 1.5 carries a group's row as a byte), as the states
/// `stageAction` takes: `undefined` for no row.
const ROW_STATES = [undefined, 'staged', 'published', 'marked-for-deletion'];

/// The `planned-action` cases, in order: an action crosses as its index (ABI 1.5).
const PLANNED_ACTIONS = [
  'insert',
  'overwrite',
  'skip-staged',
  'skip-published',
  'skip-marked-for-deletion',
  'reject',
];

/// The `planned-action` case for a row in `state` (`undefined`: no row).
function stageAction(mode, state) {
  if (state === undefined) return 'insert';
  if (mode === 'create-only') return `skip-${state}`;
  if (state === 'staged') return 'overwrite';
  return 'reject';
}

function rejection(state) {
  return `split is ${STATE_NAMES[state]}; upsert overwrites only staged splits`;
}

// ---------------------------------------------------------------------------------------------
// validate-publishes (guest/src/publish.rs)
// ---------------------------------------------------------------------------------------------
//
// A publish is one atomic step: staged ids become published, replaced ids become marked for
// deletion, the checkpoint delta is applied and the publish token is checked. The host calls
// this with what it observed under the dataset's lock and applies the publish only when the
// answer is empty.

/// For each publish of a batch, in order, its violations (ABI 1.4: one call for the batch).
export function validatePublishes(inputs) {
  return inputs.map(validatePublish);
}

/// The violations of `input`, in a fixed order (in both, missing, not staged, not published,
/// checkpoint, token); empty when the publish may proceed.
function validatePublish(input) {
  const rows = rowStates(input.rows);
  const violations = [];

  const staged = sortedSet(input.stagedSplitIds);
  const replaced = sortedSet(input.replacedSplitIds);
  const replacedIds = new Set(replaced);
  const inBoth = staged.filter((id) => replacedIds.has(id));
  if (inBoth.length > 0) {
    violations.push({
      kind: 'split-in-both',
      subjects: inBoth,
      message: `splits named both to publish and to replace: ${inBoth.join(', ')}`,
    });
  }

  const missing = sortedSet([...staged, ...replaced].filter((id) => !rows.has(id)));
  if (missing.length > 0) {
    violations.push({
      kind: 'split-missing',
      subjects: missing,
      message: `splits not found: ${missing.join(', ')}`,
    });
  }

  const notStaged = idsNotInState(staged, rows, 'staged');
  if (notStaged.length > 0) {
    violations.push({
      kind: 'not-staged',
      subjects: notStaged,
      message: `splits to publish must be staged, these are not: ${notStaged.join(', ')}`,
    });
  }

  const notPublished = idsNotInState(replaced, rows, 'published');
  if (notPublished.length > 0) {
    violations.push({
      kind: 'not-published',
      subjects: notPublished,
      message: `splits to replace must be published, these are not: ${notPublished.join(', ')}`,
    });
  }

  const delta = input.checkpointDelta;
  if (!isNone(delta)) {
    // The last listing of a partition counts, as in the Rust BTreeMap.
    const current = new Map();
    for (const position of input.checkpoint) {
      current.set(position.partition, u64(position.position));
    }
    const mismatched = [];
    for (const partition of delta.partitions) {
      const position = current.get(partition.partition);
      const from = isNone(partition.fromPosition) ? undefined : u64(partition.fromPosition);
      const movesForward = from === undefined || u64(partition.toPosition) > from;
      // Both absent, or both present and equal: the delta starts where the checkpoint is.
      if (position !== from || !movesForward) mismatched.push(partition.partition);
    }
    if (mismatched.length > 0) {
      // Sorted, duplicates kept: a partition listed twice in the delta is named twice.
      sortIds(mismatched);
      violations.push({
        kind: 'checkpoint-mismatch',
        subjects: mismatched,
        message:
          `checkpoint delta of source ${delta.source} does not start at the current positions ` +
          `or does not move forward, partitions: ${mismatched.join(', ')}`,
      });
    }
  }

  const token = isNone(input.publishToken) ? undefined : input.publishToken;
  const currentToken = isNone(input.currentPublishToken) ? undefined : input.currentPublishToken;
  if (token !== currentToken) {
    violations.push({
      kind: 'stale-publish-token',
      subjects: [],
      message:
        currentToken !== undefined
          ? "the publish token is not the dataset's current one"
          : 'the dataset has no publish token, but the request carries one',
    });
  }

  return violations;
}

/// The ids of `ids` (sorted already) whose row exists but is not in `state`.
function idsNotInState(ids, rows, state) {
  return ids.filter((id) => rows.has(id) && rows.get(id) !== state);
}

// ---------------------------------------------------------------------------------------------
// decide-recovery (guest/src/recovery.rs)
// ---------------------------------------------------------------------------------------------
//
// For every intent the host observed, in order:
//
// 1. Abandon (finish abandoning) an intent already in phase `abandoned`: recovery fenced it
//    earlier and stopped before it was done; its owner can do nothing more with it.
// 2. Stale when its effects are already visible: the publish happened (every split it
//    publishes is published or since replaced, every split it replaces is marked or gone, and
//    the checkpoint stands at or past the delta's end: positions never move backwards, so
//    later commits moving the same partitions on do not make it unsettled), or every split a
//    gc deletes is gone.
// 3. Defer while the owner's lease is live, except in exclusive mode: it may still be working,
//    and nothing may race it.
// 4. A gc is always rolled forward: marking a marked split and deleting what is gone are
//    no-ops, and the host only marks and deletes what is still eligible.
// 5. A config apply is rolled forward (promoted) while the dataset is still at the config
//    version it expects to replace. A reconcile is rolled forward while every object it
//    planned is still there as it found it: staging its rows again is create-only, and the
//    host then publishes or marks only rows still staged that no other intent names. A commit
//    or merge whose effects are all in place (confirmed, or every planned row and object found
//    as planned) and whose publish still applies is rolled forward.
// 6. A commit or merge that confirmed, but whose checkpoint delta another publish overtook
//    before its own landed (its splits still staged, the checkpoint moved on from the delta's
//    start), can never publish: it is abandoned in every mode, as its writer's own publish or
//    abort would end it.
//
//    A commit or merge that never confirmed (`armed`) and whose owner's lease ran out is
//    abandoned outside exclusive mode: it is fenced, its own staged rows are marked and its
//    objects left to gc. Nothing of it was ever visible, so this compensates nothing. Not when
//    one of its objects is present but not as planned: that is damage an operator must look
//    at (blocked).
// 7. Anything else needs its effects undone: roll back in exclusive mode (and in probe and
//    verify, which report what exclusive recovery would do and execute nothing); in
//    roll-forward mode blocked, saying why and that exclusive recovery resolves it.
//    Roll-forward mode never compensates another writer's work.

/// One decision per intent, in the input's order.
export function decideRecovery(input) {
  return input.intents.map((intent) => ({
    operationId: intent.operationId,
    decision: decideIntent(input.mode, intent),
  }));
}

function decideIntent(mode, intent) {
  const rows = rowStates(intent.rows);
  const state = (id) => rows.get(id);
  const isCommitOrMerge = intent.kind === 'commit' || intent.kind === 'merge';

  // Only a commit or a merge is ever fenced this way; any other kind in this phase is decided
  // as it would be otherwise (and the host would refuse to abandon it).
  if (intent.phase === 'abandoned' && isCommitOrMerge) {
    return {
      tag: 'abandon',
      val: 'abandoned: it was fenced earlier; its staged rows are marked and the intent deleted',
    };
  }
  if (settled(intent, state)) return { tag: 'stale' };
  if (intent.ownerLeaseLive && mode !== 'exclusive') {
    return { tag: 'defer', val: "the owner's lease is live: it may still be working" };
  }
  switch (intent.kind) {
    case 'gc':
      return { tag: 'roll-forward' };
    case 'config-apply':
      if (intent.configAtExpected) return { tag: 'roll-forward' };
      // Nothing of a config apply that lost is in place: dropping it undoes nothing.
      if (mode === 'roll-forward') {
        return blocked(
          'another config change was promoted first: its promotion no longer applies',
          'run `mend recover --mode exclusive` to drop it; the dataset keeps the config promoted first',
        );
      }
      return { tag: 'roll-back' };
    case 'reconcile': {
      const missing = missingObjects(intent);
      if (missing.length === 0) return { tag: 'roll-forward' };
      return undoOrBlock(
        mode,
        `objects it planned to adopt or discard are gone or changed: ${missing.join(', ')}`,
      );
    }
    default:
      break; // a commit or a merge: decided below
  }

  const missingRows = intent.plannedRows.filter((id) => state(id) === undefined);
  const badObjects = missingObjects(intent);
  // A confirmed intent's rows were all in place; its objects are checked whatever the phase:
  // one deleted or changed since must never be published (invariant 1).
  const effectsInPlace =
    (intent.phase === 'effects-confirmed' || missingRows.length === 0) &&
    badObjects.length === 0;
  const publishApplies =
    intent.publishStaged.every((id) => state(id) === 'staged') &&
    intent.publishReplaced.every((id) => state(id) === 'published') &&
    (!intent.hasCheckpointDelta || intent.checkpointAtFrom);

  if (effectsInPlace && publishApplies) return { tag: 'roll-forward' };
  if (intent.phase === 'effects-confirmed' && overtaken(intent, state)) {
    return {
      tag: 'abandon',
      val:
        'abandoned: it confirmed, but another publish moved the checkpoint on from the ' +
        'positions its delta starts at before its own publish landed, so it can never ' +
        'publish; fenced, its staged rows marked for deletion, its objects left to gc',
    };
  }
  const damaged = intent.objects.filter((object) => object.present && !object.matches);
  if (intent.phase === 'armed' && damaged.length === 0 && mode !== 'exclusive') {
    const why = effectsInPlace
      ? 'its publish no longer applies'
      : 'it never confirmed its effects';
    return {
      tag: 'abandon',
      val:
        `abandoned: its owner's lease ran out and ${why}; fenced, its staged rows marked ` +
        'for deletion, its objects left to gc',
    };
  }
  let why;
  if (!effectsInPlace) {
    const missing = [
      ...missingRows.map((id) => `row ${id}`),
      ...badObjects.map((id) => `object ${id}`),
    ];
    why =
      'the operation stopped before its effects were in place (missing or different: ' +
      `${missing.join(', ')})`;
  } else {
    why = 'its publish no longer applies: a split changed state or the checkpoint moved on';
  }
  return undoOrBlock(mode, why);
}

/// An operation that cannot be completed: roll it back where compensation is allowed (and in
/// probe and verify, which execute nothing and report what exclusive recovery would do); in
/// roll-forward mode, blocked, saying why.
function undoOrBlock(mode, why) {
  if (mode !== 'roll-forward') return { tag: 'roll-back' };
  return blocked(
    why,
    'run `mend recover --mode exclusive` to roll it back; until then its staged rows stay invisible',
  );
}

function blocked(why, operatorAction) {
  return { tag: 'blocked', val: { why, operatorAction } };
}

/// The planned objects not found as planned, in the intent's order.
function missingObjects(intent) {
  return intent.objects.filter((object) => !object.matches).map((object) => object.splitId);
}

/// Whether a confirmed operation's publish can never land: its checkpoint no longer stands at
/// the delta's from-positions (positions only move forward, and its publish checked them
/// before it confirmed) while every split its publish makes published is still staged (its
/// own publish moves them and the checkpoint in one step, so it did not land). A delta-only
/// publish is never taken for overtaken: without splits, its own landed publish and
/// another's look alike.
function overtaken(intent, state) {
  return (
    intent.hasCheckpointDelta &&
    !intent.checkpointAtFrom &&
    intent.publishStaged.length > 0 &&
    intent.publishStaged.every((id) => state(id) === 'staged')
  );
}

/// Whether the operation's visible effects already happened.
function settled(intent, state) {
  const publishedOrMarked = (id) => {
    const found = state(id);
    return found === 'published' || found === 'marked-for-deletion';
  };
  switch (intent.kind) {
    case 'gc':
      return intent.gcSplits.length > 0 && intent.gcSplits.every((id) => state(id) === undefined);
    case 'config-apply':
      return intent.configApplied;
    case 'reconcile':
      // Every adopted split published (or since marked), every discarded one marked.
      return (
        intent.publishStaged.every(publishedOrMarked) &&
        intent.markSplits.every((id) => state(id) === 'marked-for-deletion')
      );
    default:
      break; // a commit or a merge: decided below
  }
  if (intent.publishStaged.length === 0 && intent.publishReplaced.length === 0) {
    return intent.hasCheckpointDelta && intent.checkpointAtTo;
  }
  return (
    intent.publishStaged.every(publishedOrMarked) &&
    intent.publishReplaced.every((id) => {
      const found = state(id);
      return found === undefined || found === 'marked-for-deletion';
    }) &&
    (!intent.hasCheckpointDelta || intent.checkpointReachedTo)
  );
}

// ---------------------------------------------------------------------------------------------
// plan-reconcile (guest/src/reconcile.rs)
// ---------------------------------------------------------------------------------------------
//
// The host hands over only orphans it may act on: no row, named by no intent, older than the
// staged grace period. It stages a row for each from the object's embedded header,
// create-only, and then does what the policy says with the rows it won:
//
// - adopt (publish) an object that is whole (size and checksum as its header records) and
//   belongs to the dataset's current incarnation: it is data some writer finished uploading,
//   whose row was lost;
// - discard (mark for deletion) anything else: a damaged object, or one left by an earlier
//   dataset of the same name. Gc deletes it after the deletion grace period, so an operator
//   has that long to look at it.

/// One action per orphan, in the input's order.
export function planReconcile(input) {
  return input.orphans.map((orphan) => ({
    splitId: orphan.splitId,
    action: reconcileAction(orphan),
  }));
}

function reconcileAction(orphan) {
  if (!orphan.intact) {
    return {
      tag: 'discard',
      val: 'its payload does not match the size and checksum in its header',
    };
  }
  if (!orphan.sameIncarnation) {
    return { tag: 'discard', val: 'it was written for an earlier dataset of the same name' };
  }
  return { tag: 'adopt' };
}

// ---------------------------------------------------------------------------------------------
// plan-gc (guest/src/gc.rs)
// ---------------------------------------------------------------------------------------------
//
// The default rule, the one mend applied before gc was a policy decision:
//
// - a staged split untouched for longer than the staged grace period (its last change strictly
//   before `now - staged grace`) was abandoned by its writer: mark it;
// - a marked split untouched for longer than the deletion grace period: delete its object,
//   then its row.
//
// Both lists keep the input's order. The host hands over only rows no intent names, marks only
// rows still staged and untouched since it read them, deletes only rows still marked, and
// refuses a whole plan that names anything else.

/// The default plan for one gc run.
export function planGc(input) {
  const stagedCutoff = msBefore(input.nowMs, input.stagedGracePeriodMs);
  const deletionCutoff = msBefore(input.nowMs, input.deletionGracePeriodMs);
  const plan = { mark: [], delete: [] };
  for (const candidate of input.candidates) {
    const updatedAt = s64(candidate.updatedAtMs);
    if (candidate.state === 'staged' && updatedAt < stagedCutoff) {
      plan.mark.push(candidate.splitId);
    } else if (candidate.state === 'marked-for-deletion' && updatedAt < deletionCutoff) {
      plan.delete.push(candidate.splitId);
    }
  }
  return plan;
}

/// `at` (an s64) moved back by `ms` (a u64), stopping at the start of time rather than
/// wrapping: Rust's `at.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX))`. BigInt never
/// wraps, so both clamps are written out.
function msBefore(at, ms) {
  let back = u64(ms);
  if (back > I64_MAX) back = I64_MAX;
  const cutoff = s64(at) - back;
  return cutoff < I64_MIN ? I64_MIN : cutoff;
}
