//! Components that misbehave, each contained with its own typed error: the hostile policy's
//! runaway stage plans (`policies/hostile`: loop, bomb, huge, panic) fail that one call within
//! a bounded time, and a component that imports WASI (`policies/forbidden-import`) or lies
//! about its ABI (`policies/liar`) is refused at load. After each, the same hostile runtime
//! serves a normal decision, and an engine on the default policy keeps working.

use std::time::{Duration, Instant};

use mend::PolicyError;
use mend::model::{ListQuery, StageMode, StageOutcome, StageRequest, StageSplit};
use mend::runtime::{PolicyLimits, PolicyRuntime, imports_of};
use mend_contract::{StageAction, StagePlanInput};
use mend_tests::{Backend, Harness};

const HOSTILE_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_HOSTILE_WASM"));
const FORBIDDEN_IMPORT_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_FORBIDDEN_IMPORT_WASM"));
const LIAR_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_LIAR_WASM"));

/// How long containing one misbehaving component may take, with the default limits (a 1 s
/// CPU deadline per call): the deadline itself plus room for a loaded machine.
const CONTAINED_WITHIN: Duration = Duration::from_secs(5);

fn plan_for(dataset_id: &str) -> StagePlanInput {
    StagePlanInput {
        dataset_id: dataset_id.into(),
        mode: StageMode::CreateOnly,
        split_ids: vec!["b".into(), "a".into(), "b".into()],
        existing: Vec::new(),
    }
}

/// A decision the hostile policy answers like any other: no existing rows, so its plan is the
/// default policy's, an insert per distinct id.
fn assert_serves(hostile: &PolicyRuntime, after: &str) {
    let input = plan_for("an-ordinary-dataset");
    let plan = hostile
        .plan_stage(&input)
        .unwrap_or_else(|error| panic!("after {after}, the hostile runtime failed: {error}"));
    assert_eq!(
        plan,
        mend_default_policy::plan_stage(&input),
        "after {after}"
    );
    assert!(plan.iter().all(|p| p.action == StageAction::Insert));
}

type Expectation = fn(&PolicyError) -> bool;

#[tokio::test]
async fn misbehaving_components_are_contained_and_everything_else_keeps_working() {
    let limits = PolicyLimits::default();
    let hostile = PolicyRuntime::load(HOSTILE_WASM, limits).expect("the hostile policy loads");
    assert_serves(&hostile, "loading");

    let runaways: [(&str, &str, Expectation); 4] = [
        ("loop", "DeadlineExceeded", |error| {
            matches!(error, PolicyError::DeadlineExceeded { function: "plan-stage", limit }
                if *limit == PolicyLimits::default().cpu_time_per_call)
        }),
        ("bomb", "MemoryExhausted", |error| {
            matches!(error, PolicyError::MemoryExhausted { function: "plan-stage", limit_bytes }
                if *limit_bytes == PolicyLimits::default().max_memory_bytes)
        }),
        ("huge", "OutputTooLarge", |error| {
            matches!(error, PolicyError::OutputTooLarge { function: "plan-stage", size, limit }
                if size > limit && *limit == PolicyLimits::default().max_output_bytes)
        }),
        ("panic", "Trap", |error| {
            matches!(
                error,
                PolicyError::Trap {
                    function: "plan-stage",
                    ..
                }
            )
        }),
    ];
    let mut contained = 0;
    for (behaviour, expected, is_expected) in runaways {
        let started = Instant::now();
        let error = hostile
            .plan_stage(&plan_for(behaviour))
            .expect_err("a runaway plan must fail");
        let elapsed = started.elapsed();
        assert!(
            is_expected(&error),
            "{behaviour}: expected {expected}, got {error:?}"
        );
        assert!(
            elapsed < CONTAINED_WITHIN,
            "{behaviour}: contained only after {elapsed:?}"
        );
        assert_serves(&hostile, behaviour);
        println!(
            "{behaviour:>6}: {expected} after {elapsed:.2?} ({error}); the runtime then served a plan"
        );
        contained += 1;
    }

    let imports = imports_of(FORBIDDEN_IMPORT_WASM).expect("list imports");
    let started = Instant::now();
    let error = PolicyRuntime::load(FORBIDDEN_IMPORT_WASM, limits).unwrap_err();
    let elapsed = started.elapsed();
    match &error {
        PolicyError::ForbiddenImport { imports: named } => {
            // Every import but the contract's types is named, in the component's order.
            let outside: Vec<&String> = imports
                .iter()
                .filter(|import| !import.starts_with("mend:policy/"))
                .collect();
            assert_eq!(named.iter().collect::<Vec<_>>(), outside);
            assert!(
                named.len() > 1,
                "std's WASI layer imports several: {named:?}"
            );
            let message = error.to_string();
            for import in named {
                assert!(message.contains(import.as_str()), "{message}");
            }
            assert!(
                message.contains("no_std") && message.contains("disableFeatures"),
                "the refusal says how to build without them in Rust and JavaScript: {message}"
            );
        }
        other => panic!("expected ForbiddenImport, got {other:?}"),
    }
    assert!(
        imports
            .iter()
            .any(|i| i.starts_with("wasi:cli/environment@")),
        "reading the environment imports wasi:cli/environment: {imports:?}"
    );
    assert!(elapsed < CONTAINED_WITHIN, "refused only after {elapsed:?}");
    assert_serves(&hostile, "the forbidden import");
    println!(
        "forbidden-import: refused at load after {elapsed:.2?} ({error}); it imports {} interfaces",
        imports.len()
    );
    let mut refused = 1;

    let started = Instant::now();
    let error = PolicyRuntime::load(LIAR_WASM, limits).unwrap_err();
    let elapsed = started.elapsed();
    match &error {
        PolicyError::Incompatible { reason } => assert!(
            reason.contains(
                "describe() claims ABI 1.1 but the component is built against mend:policy@1.5.0"
            ),
            "{reason}"
        ),
        other => panic!("expected Incompatible, got {other:?}"),
    }
    assert!(elapsed < CONTAINED_WITHIN, "refused only after {elapsed:?}");
    assert_serves(&hostile, "the liar");
    println!("liar: refused at load after {elapsed:.2?} ({error})");
    refused += 1;

    // The default policy, in an engine, is untouched by all of the above.
    let h = Harness::new(Backend::Memory).await;
    let dataset_id = h.create_dataset("after-hostile").await;
    let staged = h
        .engine
        .stage(&StageRequest {
            dataset_id: dataset_id.clone(),
            mode: StageMode::CreateOnly,
            node: "n".into(),
            splits: ["a", "b"]
                .iter()
                .map(|id| StageSplit {
                    split_id: (*id).into(),
                    metadata_json: "{}".into(),
                })
                .collect(),
        })
        .await
        .expect("the default policy's engine stages");
    assert!(
        staged
            .splits
            .iter()
            .all(|split| split.outcome == StageOutcome::Inserted),
        "{staged:?}"
    );
    let rows = h
        .engine
        .list_splits(&dataset_id, &ListQuery::default())
        .await
        .expect("list");
    assert_eq!(rows.splits.len(), 2);

    println!(
        "{contained} runaway calls contained, {refused} components refused at load; the hostile \
         runtime served {} normal plans; an engine on the default policy staged {} splits",
        contained + refused + 1,
        rows.splits.len()
    );
}

/// The hostile policy's `remember` counts its decisions in a global, marks a static, leaves a
/// marker on its heap and grows its memory; each answer says what it found of the decisions
/// before it. Asked again and again (between runaways that trap and exhaust memory, and from
/// several threads at once), every answer is the first decision's.
#[test]
fn a_decision_finds_nothing_of_the_decisions_before_it() {
    let hostile = PolicyRuntime::load(HOSTILE_WASM, PolicyLimits::default()).expect("loads");
    let remembered = |hostile: &PolicyRuntime| -> String {
        let plan = hostile
            .plan_stage(&plan_for("remember"))
            .expect("remember answers");
        match &plan[..] {
            [planned] => match &planned.action {
                StageAction::Reject(found) => found.clone(),
                other => panic!("remember answers with a rejection, not {other:?}"),
            },
            other => panic!("remember answers one split, not {other:?}"),
        }
    };
    let first = remembered(&hostile);
    assert!(
        first.starts_with(
            "decisions seen 1, marked false, heap marker found false, pages on entry "
        ),
        "{first}"
    );

    let mut decisions = 1;
    for round in 0..20 {
        if round % 5 == 4 {
            for runaway in ["panic", "bomb"] {
                hostile
                    .plan_stage(&plan_for(runaway))
                    .expect_err("a runaway fails");
            }
        }
        assert_eq!(remembered(&hostile), first, "decision {}", decisions + 1);
        decisions += 1;
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let hostile = hostile.clone();
            std::thread::spawn(move || (0..25).map(|_| remembered(&hostile)).collect::<Vec<_>>())
        })
        .collect();
    for thread in threads {
        for found in thread.join().expect("thread") {
            assert_eq!(found, first);
            decisions += 1;
        }
    }
    println!(
        "{decisions} decisions of the remembering policy each found nothing of another: {first}"
    );
}
