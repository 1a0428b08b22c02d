// The default reconcile plan, for the frozen-contract fixtures whose contract has
// `plan-reconcile` (`abi-1-2` to `abi-1-4`; 1.1 has none): `include!`d like `older_contracts.rs`.

/// The default policy's reconcile plan, converted to and from the contract's types.
fn reconcile_by_default(input: wit::ReconcileInput) -> Vec<wit::ReconcileDecision> {
    let input = plain::ReconcileInput {
        dataset_id: input.dataset_id,
        now_ms: input.now_ms,
        orphans: input
            .orphans
            .into_iter()
            .map(|orphan| plain::OrphanObject {
                split_id: orphan.split_id,
                same_incarnation: orphan.same_incarnation,
                intact: orphan.intact,
                metadata_json: orphan.metadata_json,
                age_ms: orphan.age_ms,
            })
            .collect(),
    };
    mend_default_policy::plan_reconcile(&input)
        .into_iter()
        .map(|decision| wit::ReconcileDecision {
            split_id: decision.split_id,
            action: match decision.action {
                plain::ReconcileAction::Adopt => wit::ReconcileAction::Adopt,
                plain::ReconcileAction::Discard(why) => wit::ReconcileAction::Discard(why),
            },
        })
        .collect()
}
