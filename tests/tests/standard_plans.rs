//! Standard stage plans (ABI 1.4): a policy declaring `stage.standard-plans` (the default one)
//! is never asked to plan a stage, and the host's standard plan answers exactly what the same
//! decisions answer when they are asked for (`policies/abi-1-4` and `abi-1-3`: the default
//! decisions, built against 1.4 without the capability and against 1.3, which has none, so
//! the engine asks each, its own contract's way). On every backend, a
//! batch meeting rows in every state and repeating ids stages the same rows with the same
//! outcomes, or is refused in the same words, both ways. On Postgres the standard create-only
//! stage is the bare insert: one statement fewer than asking, since nothing is read first.

use mend::model::{
    ListQuery, PublishRequest, SplitState, StageMode, StageRequest, StageSplit, StagedSplit,
};
use mend::runtime::{PolicyLimits, PolicyRuntime};
use mend_contract::capability::STAGE_STANDARD_PLANS;
use mend_tests::{Backend, Harness};

const ABI_1_3_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_3_WASM"));
const ABI_1_4_WASM: &[u8] = include_bytes!(env!("MEND_POLICY_ABI_1_4_WASM"));

fn request(dataset_id: &str, mode: StageMode, ids: &[&str], writer: u32) -> StageRequest {
    StageRequest {
        dataset_id: dataset_id.into(),
        mode,
        node: "n".into(),
        splits: ids
            .iter()
            .enumerate()
            .map(|(entry, id)| StageSplit {
                split_id: (*id).into(),
                metadata_json: format!(r#"{{"writer":{writer},"entry":{entry}}}"#),
            })
            .collect(),
    }
}

/// What one policy made of the same requests: each answer (outcomes, or the refusal's
/// words), the rows left with their content, and the calls the stages asked of the policy.
#[derive(Debug, PartialEq)]
struct Staged {
    answers: Vec<Result<Vec<StagedSplit>, String>>,
    rows: Vec<(String, SplitState, String)>,
}

/// Rows staged, published and marked, then: create-only over all of them with a repeated id,
/// an upsert over the staged ones, and an upsert meeting a published row (refused whole).
async fn stage_everything(h: &Harness) -> (Staged, u64) {
    let ds = h.create_dataset("standard").await;
    let engine = &h.engine;
    engine
        .stage(&request(&ds, StageMode::Upsert, &["s", "p", "m"], 1))
        .await
        .expect("stage the first rows");
    h.put_objects(&ds, ["p", "m"]).await;
    engine
        .publish(&PublishRequest::staged(&ds, vec!["p".into(), "m".into()]))
        .await
        .expect("publish p and m");
    engine
        .mark_for_deletion(&ds, &["m".into()])
        .await
        .expect("mark m");

    let before = engine.policy().calls_made();
    let requests = [
        request(
            &ds,
            StageMode::CreateOnly,
            &["new", "s", "p", "m", "new", "n2"],
            2,
        ),
        request(&ds, StageMode::Upsert, &["s", "u", "s"], 3),
        request(&ds, StageMode::Upsert, &["s", "p", "x"], 4),
    ];
    let mut answers = Vec::new();
    for request in &requests {
        answers.push(
            engine
                .stage(request)
                .await
                .map(|result| result.splits)
                .map_err(|error| error.to_string()),
        );
    }
    let asked = engine.policy().calls_made() - before;
    let rows = engine
        .list_splits(&ds, &ListQuery::default())
        .await
        .expect("list")
        .splits
        .into_iter()
        .map(|row| (row.split_id, row.state, row.metadata.to_string()))
        .collect();
    (Staged { answers, rows }, asked)
}

#[tokio::test]
async fn the_standard_plan_stages_what_asking_stages_without_asking_on_every_backend() {
    let asked_policies = [ABI_1_4_WASM, ABI_1_3_WASM].map(|bytes| {
        let policy = PolicyRuntime::load(bytes, PolicyLimits::default()).expect("loads");
        assert!(
            !policy
                .description()
                .required_capabilities
                .iter()
                .any(|name| name == STAGE_STANDARD_PLANS)
        );
        policy
    });
    let mut compared = 0;
    for backend in Backend::ALL {
        let standard = Harness::new(backend).await;
        assert!(
            standard
                .engine
                .policy()
                .description()
                .required_capabilities
                .iter()
                .any(|name| name == STAGE_STANDARD_PLANS),
            "the default policy declares the standard plans"
        );
        let (by_standard, standard_asked) = stage_everything(&standard).await;
        assert_eq!(
            standard_asked, 0,
            "{backend}: the standard policy was asked to plan"
        );
        let mut asking_asked = 0;
        for asked_policy in &asked_policies {
            let asking = Harness::with_policy(backend, asked_policy.clone()).await;
            let (by_asking, asked) = stage_everything(&asking).await;
            let minor = asked_policy.description().abi_minor;
            assert_eq!(
                by_standard, by_asking,
                "{backend}, asking a 1.{minor} policy"
            );
            assert_eq!(
                asked, 3,
                "{backend}: one plan per stage of the 1.{minor} policy"
            );
            asking_asked += asked;
        }
        // The answers themselves: the create-only stage inserted only the new ids, skipped
        // every existing row in its state, and the refused upsert wrote nothing.
        let create_only = by_standard.answers[0].as_ref().expect("create-only stages");
        let outcomes: Vec<String> = create_only
            .iter()
            .map(|split| format!("{}:{:?}", split.split_id, split.outcome))
            .collect();
        assert_eq!(
            outcomes,
            [
                "m:Skipped(MarkedForDeletion)",
                "n2:Inserted",
                "new:Inserted",
                "p:Skipped(Published)",
                "s:Skipped(Staged)"
            ],
            "{backend}"
        );
        let refused = by_standard.answers[2]
            .as_ref()
            .expect_err("upsert over p is refused");
        assert!(
            refused.contains("p: split is published"),
            "{backend}: {refused}"
        );
        assert!(
            !by_standard.rows.iter().any(|(id, _, _)| id == "x"),
            "{backend}: the refused batch wrote x"
        );
        println!(
            "{backend}: 3 stages, the same {} answers and {} rows all three ways; the standard \
             policy asked {standard_asked} times, the 1.4 and 1.3 ones {asking_asked}",
            by_standard.answers.len(),
            by_standard.rows.len()
        );
        compared += 1;
    }
    assert_eq!(compared, Backend::ALL.len());
}

/// On Postgres a create-only stage with the standard plan sends the insert alone; asking the
/// policy reads the rows first: one statement more.
#[tokio::test]
async fn a_standard_create_only_stage_on_postgres_is_the_bare_insert() {
    let asked_policy =
        PolicyRuntime::load(ABI_1_3_WASM, PolicyLimits::default()).expect("abi-1-3 loads");
    let standard = Harness::counting_sql(Backend::Postgres).await;
    let asking = Harness::counting_sql_with_policy(Backend::Postgres, asked_policy).await;
    let mut statements = Vec::new();
    for h in [&standard, &asking] {
        let ds = h.create_dataset("bare").await;
        let ids: Vec<String> = (0..100).map(|i| format!("split-{i:03}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let sql = h.sql.as_ref().expect("counting");
        let before = sql.counts();
        let result = h
            .engine
            .stage(&request(&ds, StageMode::CreateOnly, &ids, 1))
            .await
            .expect("stage");
        let sent = sql.counts().since(&before);
        assert_eq!(result.splits.len(), 100);
        statements.push(sent.statements);
    }
    println!(
        "create-only stage of 100 new ids on Postgres: {} statement(s) with the standard plan, \
         {} asking the policy",
        statements[0], statements[1]
    );
    assert_eq!(statements[0], 1, "the standard plan's stage is one insert");
    assert_eq!(statements[1], 2, "asking reads the rows, then inserts");
}
