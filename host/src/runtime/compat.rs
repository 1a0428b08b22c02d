//! Whether a policy component may run on this host, decided at load: what it imports, which
//! contract it was built against, and whether its `describe()` agrees with that contract and
//! with what this host implements. Each refusal is a typed [`PolicyError`] that names its one
//! reason and, where there is one, what to do about it.
//!
//! The checks run in two steps around instantiation. [`check_imports`] reads only the
//! component's type, so a component built against another contract version is refused here,
//! naming both versions, rather than by wasmtime's type check of its exports. Then, once
//! `describe()` has answered, [`check_description`] compares that answer with the contract the
//! component was actually built against, then with the host's ABI and semantics revisions.
//!
//! What a host implements is a [`HostAbi`], so that tests can play older and newer hosts;
//! [`HostAbi::current`] is this one. Running a component is still the job of the calls this
//! crate was compiled with, which are those of [`RUNNABLE_CONTRACT_IMPORTS`]: this contract
//! and every older 1.x one, each asked the way its own contract asks (see [`Calls`]).

use std::fmt;

use mend_contract::PolicyDescription;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::error::PolicyError;

/// The contract's interface of data types, at the version this host's bindings are built from
/// (`wit/policy.wit`).
pub const CONTRACT_TYPES_IMPORT: &str = "mend:policy/types@1.5.0";

/// The same interface at 1.4: 1.5 changed only how a stage plan is asked (`bindings::v1_4`).
pub const CONTRACT_1_4_TYPES_IMPORT: &str = "mend:policy/types@1.4.0";

/// The same interface at 1.3: 1.4 changed only how a stage plan and a publish's validation
/// are asked (`bindings::v1_3`).
pub const CONTRACT_1_3_TYPES_IMPORT: &str = "mend:policy/types@1.3.0";

/// The same interface at 1.2, which has no `plan-gc` and no phase `abandoned`
/// (`runtime::older_recovery`).
pub const CONTRACT_1_2_TYPES_IMPORT: &str = "mend:policy/types@1.2.0";

/// The same interface at 1.1, which also has no `plan-reconcile` and observes no config-apply
/// or reconcile intent.
pub const CONTRACT_1_1_TYPES_IMPORT: &str = "mend:policy/types@1.1.0";

/// The contracts this build of mend can run components of, newest first.
pub const RUNNABLE_CONTRACT_IMPORTS: &[&str] = &[
    CONTRACT_TYPES_IMPORT,
    CONTRACT_1_4_TYPES_IMPORT,
    CONTRACT_1_3_TYPES_IMPORT,
    CONTRACT_1_2_TYPES_IMPORT,
    CONTRACT_1_1_TYPES_IMPORT,
];

/// The interfaces a policy component may import. Listing one here grants every policy that
/// authority, so each entry needs a reason.
///
/// - `mend:policy/types`, at each version this host runs: the contract's own data types. A
///   world that `use`s an interface's types imports that interface, but it carries types
///   only; the import check refuses it if a component declares a function in it. It grants
///   nothing.
pub const ALLOWED_IMPORTS: &[&str] = RUNNABLE_CONTRACT_IMPORTS;

/// The ABI this host implements (the `mend:policy` WIT package version).
pub const HOST_ABI_MAJOR: u32 = mend_contract::ABI_MAJOR;
/// The newest minor version of that ABI this host implements.
pub const HOST_ABI_MINOR: u32 = mend_contract::ABI_MINOR;

/// Semantics revisions this host knows how to run. A policy reporting another one is refused:
/// the host cannot know what its decisions mean.
pub const KNOWN_SEMANTICS_REVISIONS: &[u32] = &[1];

/// The WIT package every interface of the contract belongs to.
const CONTRACT_PACKAGE: &str = "mend:policy";

/// What a host implements, as the load checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAbi {
    /// The ABI major: a policy must report exactly this one.
    pub abi_major: u32,
    /// The newest ABI minor the host implements; a policy may report it or an older one.
    pub abi_minor: u32,
    /// The semantics revisions the host can run.
    pub known_semantics_revisions: Vec<u32>,
    /// The contract types interfaces a component may import, one per contract version the
    /// host runs components of, newest first (`mend:policy/types@1.5.0`, ...): a component
    /// must import exactly one of them.
    pub contract_imports: Vec<String>,
}

impl HostAbi {
    /// This host.
    pub fn current() -> Self {
        Self {
            abi_major: HOST_ABI_MAJOR,
            abi_minor: HOST_ABI_MINOR,
            known_semantics_revisions: KNOWN_SEMANTICS_REVISIONS.to_vec(),
            contract_imports: RUNNABLE_CONTRACT_IMPORTS
                .iter()
                .map(|import| import.to_string())
                .collect(),
        }
    }

    /// The versions of the contract the host runs components of, newest first.
    fn contracts(&self) -> Vec<ContractVersion> {
        self.contract_imports
            .iter()
            .map(|import| {
                contract_version(import).unwrap_or_else(|| ContractVersion {
                    text: import.clone(),
                    number: None,
                })
            })
            .collect()
    }

    /// What components the host runs, as a refusal says it: `1.5, 1.4, 1.3, 1.2 and 1.1`.
    fn runs(&self) -> String {
        let abis: Vec<String> = self.contracts().iter().map(ContractVersion::abi).collect();
        match abis.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => abis.join(""),
        }
    }
}

impl Default for HostAbi {
    fn default() -> Self {
        Self::current()
    }
}

/// The version of the `mend:policy` contract a component imports, as written in the import's
/// name, and as numbers when it parses as `major.minor.patch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContractVersion {
    text: String,
    number: Option<(u32, u32, u32)>,
}

/// How a loaded component is asked: the calls of the contract it is built against. What an
/// older contract cannot express is never asked of it in a newer form: the host decides it
/// as the host of that contract did, or withholds it with its reason (see each case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Calls {
    /// ABI 1.5: stage plans asked on the request's entries grouped by id (the host sorts
    /// them), answered by index; publishes validated a batch at a time.
    V1_5,
    /// ABI 1.4: asked as 1.5, but a stage plan on the request's ids and the rows' ids packed
    /// in buffers, which the policy sorts and compares itself.
    V1_4,
    /// ABI 1.3: ids as strings; one `validate-publish` per publish.
    V1_3,
    /// ABI 1.2: asked as 1.3, but without `plan-gc` (gc is planned by the grace-period rule
    /// the 1.2 host ran) and without the phase `abandoned` (such an intent is deferred, never
    /// shown to the policy as something else).
    V1_2,
    /// ABI 1.1: asked as 1.2, but without `plan-reconcile` (a reconcile is refused: 1.1 had
    /// none) and without the observations of config-apply and reconcile intents (deferred).
    V1_1,
}

impl Calls {
    /// Whether the contract exports `plan-gc` (1.3 on).
    pub(crate) fn has_plan_gc(self) -> bool {
        matches!(self, Self::V1_5 | Self::V1_4 | Self::V1_3)
    }

    /// Whether the contract exports `plan-reconcile` (1.2 on).
    pub(crate) fn has_plan_reconcile(self) -> bool {
        !matches!(self, Self::V1_1)
    }

    /// Whether publishes are validated a batch at a time, and stage plans answered by index
    /// (1.4 on).
    pub(crate) fn validates_publish_batches(self) -> bool {
        matches!(self, Self::V1_5 | Self::V1_4)
    }

    /// The contract, as a refusal names it.
    pub(crate) fn contract(self) -> &'static str {
        match self {
            Self::V1_5 => "mend:policy@1.5.0",
            Self::V1_4 => "mend:policy@1.4.0",
            Self::V1_3 => "mend:policy@1.3.0",
            Self::V1_2 => "mend:policy@1.2.0",
            Self::V1_1 => "mend:policy@1.1.0",
        }
    }
}

impl ContractVersion {
    /// The calls this build asks a component built against this version with, if it can.
    pub(crate) fn calls(&self) -> Option<Calls> {
        match self.number {
            Some((1, 5, 0)) => Some(Calls::V1_5),
            Some((1, 4, 0)) => Some(Calls::V1_4),
            Some((1, 3, 0)) => Some(Calls::V1_3),
            Some((1, 2, 0)) => Some(Calls::V1_2),
            Some((1, 1, 0)) => Some(Calls::V1_1),
            _ => None,
        }
    }

    /// `major.minor`: how hosts and `describe()` speak of an ABI.
    fn abi(&self) -> String {
        match self.number {
            Some((major, minor, _)) => format!("{major}.{minor}"),
            None => self.text.clone(),
        }
    }
}

impl fmt::Display for ContractVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{CONTRACT_PACKAGE}@{}", self.text)
    }
}

/// The contract version in an import named `mend:policy/<interface>@<version>`; `None` for an
/// import of anything else.
fn contract_version(import: &str) -> Option<ContractVersion> {
    let rest = import.strip_prefix(CONTRACT_PACKAGE)?.strip_prefix('/')?;
    let text = match rest.split_once('@') {
        Some((_, version)) => version.to_string(),
        None => String::new(),
    };
    let mut parts = text.splitn(3, '.').map(str::parse::<u32>);
    let number = match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch))) => Some((major, minor, patch)),
        _ => None,
    };
    Some(ContractVersion { text, number })
}

/// Refuses, before anything is instantiated, a component built against a version of the
/// contract that `host` does not run (or against two at once), then one that imports anything
/// outside the host's contract types, or any function at all: the linker provides none, and a
/// policy has no authority to ask for. Returns the contract version the component is built
/// against, with the calls that ask it.
pub(crate) fn check_imports(
    engine: &Engine,
    component: &Component,
    host: &HostAbi,
) -> Result<(ContractVersion, Calls), PolicyError> {
    let component_type = component.component_type();
    let imports: Vec<(&str, ComponentItem)> = component_type
        .imports(engine)
        .map(|(name, item)| (name, item.ty))
        .collect();
    let host_contracts = host.contracts();

    // The version first: every other refusal of a component built against another contract
    // would only be a symptom of it.
    let mut built_against: Option<ContractVersion> = None;
    for (import, _) in &imports {
        if let Some(version) = contract_version(import) {
            if !host_contracts.contains(&version) {
                return Err(contract_mismatch(&version, host));
            }
            if let Some(other) = built_against.as_ref().filter(|other| **other != version) {
                return Err(PolicyError::Incompatible {
                    reason: format!(
                        "the component is built against both {other} and {version}: its \
                         exports cannot be of both; build it against one (a policy crate \
                         linking the current contract's bindings beside older ones of its \
                         own does this)"
                    ),
                });
            }
            built_against = Some(version);
        }
    }

    // Every forbidden import at once: a policy author fixes the build once, not once per import.
    let forbidden: Vec<String> = imports
        .iter()
        .filter(|(import, item)| {
            let types_only = match item {
                ComponentItem::ComponentInstance(instance) => instance
                    .exports(engine)
                    .all(|(_, export)| matches!(export.ty, ComponentItem::Type(_))),
                ComponentItem::Type(_) => true,
                _ => false,
            };
            !host
                .contract_imports
                .iter()
                .any(|allowed| allowed == import)
                || !types_only
        })
        .map(|(import, _)| import.to_string())
        .collect();
    if !forbidden.is_empty() {
        return Err(PolicyError::ForbiddenImport { imports: forbidden });
    }

    let built_against = built_against.ok_or_else(|| PolicyError::Incompatible {
        reason: format!(
            "the component imports no {CONTRACT_PACKAGE} types, so it was not built against \
             this contract; this host runs {} components: build the policy against wit/ of \
             this mend",
            host.runs()
        ),
    })?;

    // A host played by a test may accept components this build cannot ask: its calls are
    // those of the contracts it was built with. Say so rather than fail on a type error.
    let calls = built_against
        .calls()
        .ok_or_else(|| PolicyError::Incompatible {
            reason: format!(
                "the component is built against {built_against}, which this host accepts, but \
             this build of mend runs {} components only and cannot run it",
                HostAbi::current().runs()
            ),
        })?;
    Ok((built_against, calls))
}

/// The refusal of a component built against a contract version `host` does not run, saying
/// which way to move: rebuild an older policy, upgrade mend for a newer one.
fn contract_mismatch(component: &ContractVersion, host: &HostAbi) -> PolicyError {
    let newest = host.contracts().iter().filter_map(|c| c.number).max();
    let newer_than_host = matches!(
        (component.number, newest),
        (Some(theirs), Some(ours)) if theirs > ours
    );
    let what_to_do = if newer_than_host {
        "upgrade mend to run it, or rebuild the policy against wit/ of this mend"
    } else {
        "rebuild the policy against wit/ of this mend"
    };
    PolicyError::Incompatible {
        reason: format!(
            "built against {component}; this host runs {} components: {what_to_do}",
            host.runs()
        ),
    }
}

/// Refuses a policy whose `describe()` disagrees with the contract it is built against, or
/// whose ABI or semantics `host` does not implement.
pub(crate) fn check_description(
    description: &PolicyDescription,
    built_against: &ContractVersion,
    host: &HostAbi,
) -> Result<(), PolicyError> {
    let policy = format!("policy {} {}", description.name, description.version);
    let claimed = (description.abi_major, description.abi_minor);
    if built_against.number.map(|(major, minor, _)| (major, minor)) != Some(claimed) {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "{policy}: describe() claims ABI {}.{} but the component is built against \
                 {built_against}: its description cannot be trusted, rebuild it from one source",
                description.abi_major, description.abi_minor
            ),
        });
    }
    if description.abi_major != host.abi_major {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "{policy} implements ABI {}.{}, this host implements ABI {}.{}: the major versions differ",
                description.abi_major, description.abi_minor, host.abi_major, host.abi_minor
            ),
        });
    }
    if description.abi_minor > host.abi_minor {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "{policy} needs ABI {}.{}, newer than this host's {}.{}: upgrade mend first",
                description.abi_major, description.abi_minor, host.abi_major, host.abi_minor
            ),
        });
    }
    if !host
        .known_semantics_revisions
        .contains(&description.semantics_revision)
    {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "{policy} has semantics revision {}, which this host does not know (it knows {:?}): upgrade mend first",
                description.semantics_revision, host.known_semantics_revisions
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn description(abi_minor: u32, semantics_revision: u32) -> PolicyDescription {
        PolicyDescription {
            abi_minor,
            semantics_revision,
            ..mend_default_policy::describe()
        }
    }

    fn reason(error: PolicyError) -> String {
        match error {
            PolicyError::Incompatible { reason } => reason,
            other => panic!("expected Incompatible, got {other:?}"),
        }
    }

    #[test]
    fn the_contract_import_is_the_abi_of_this_crate() {
        assert_eq!(
            CONTRACT_TYPES_IMPORT,
            format!("mend:policy/types@{HOST_ABI_MAJOR}.{HOST_ABI_MINOR}.0")
        );
        let contracts = HostAbi::current().contracts();
        assert_eq!(
            contracts[0].number,
            Some((HOST_ABI_MAJOR, HOST_ABI_MINOR, 0))
        );
        assert_eq!(contracts[0].to_string(), "mend:policy@1.5.0");
        assert_eq!(contracts[0].calls(), Some(Calls::V1_5));
        // Every older 1.x contract is still run, each asked its own way.
        let older: Vec<(String, Option<Calls>)> = contracts[1..]
            .iter()
            .map(|contract| (contract.to_string(), contract.calls()))
            .collect();
        assert_eq!(
            older,
            [
                ("mend:policy@1.4.0".to_string(), Some(Calls::V1_4)),
                ("mend:policy@1.3.0".to_string(), Some(Calls::V1_3)),
                ("mend:policy@1.2.0".to_string(), Some(Calls::V1_2)),
                ("mend:policy@1.1.0".to_string(), Some(Calls::V1_1)),
            ]
        );
        for contract in &contracts {
            let calls = contract.calls().expect("every contract run has its calls");
            assert_eq!(calls.contract(), contract.to_string());
        }
        assert_eq!(HostAbi::current().runs(), "1.5, 1.4, 1.3, 1.2 and 1.1");
    }

    #[test]
    fn contract_versions_are_read_from_contract_imports_only() {
        let version = contract_version("mend:policy/types@1.1.0").unwrap();
        assert_eq!(version.number, Some((1, 1, 0)));
        assert_eq!(version.abi(), "1.1");
        assert_eq!(
            contract_version("mend:policy/host@2.0.0-rc")
                .unwrap()
                .number,
            None
        );
        assert_eq!(contract_version("wasi:cli/environment@0.2.6"), None);
        assert_eq!(contract_version("mend:policyx/types@1.2.0"), None);
    }

    #[test]
    fn a_mismatched_contract_says_which_way_to_move() {
        // A host that runs 1.5 and 1.4 only, as one without the older calls would.
        let host = HostAbi {
            contract_imports: RUNNABLE_CONTRACT_IMPORTS[..2]
                .iter()
                .map(|import| import.to_string())
                .collect(),
            ..HostAbi::current()
        };
        for older in ["1.1.0", "1.2.0", "1.3.0", "1.0.0"] {
            let refused = reason(contract_mismatch(
                &contract_version(&format!("mend:policy/types@{older}")).unwrap(),
                &host,
            ));
            assert_eq!(
                refused,
                format!(
                    "built against mend:policy@{older}; this host runs 1.5 and 1.4 components: rebuild the policy against wit/ of this mend"
                )
            );
        }
        let host = HostAbi::current();
        let newer = reason(contract_mismatch(
            &contract_version("mend:policy/types@1.6.0").unwrap(),
            &host,
        ));
        assert!(newer.contains("mend:policy@1.6.0") && newer.contains("upgrade mend"));
    }

    #[test]
    fn each_description_refusal_names_its_reason() {
        let host = HostAbi::current();
        let built = host.contracts()[0].clone();
        assert!(check_description(&description(5, 1), &built, &host).is_ok());
        // A 1.4 component claiming 1.4 runs on this 1.5 host, and a 1.3 one claiming 1.3.
        let built_1_4 = host.contracts()[1].clone();
        assert!(check_description(&description(4, 1), &built_1_4, &host).is_ok());
        let built_1_3 = host.contracts()[2].clone();
        assert!(check_description(&description(3, 1), &built_1_3, &host).is_ok());

        let liar = reason(check_description(&description(1, 1), &built, &host).unwrap_err());
        assert!(
            liar.contains(
                "describe() claims ABI 1.1 but the component is built against mend:policy@1.5.0"
            ),
            "{liar}"
        );

        let older_host = HostAbi {
            abi_minor: 4,
            ..HostAbi::current()
        };
        let newer = reason(check_description(&description(5, 1), &built, &older_host).unwrap_err());
        assert!(newer.contains("newer than this host's 1.4"), "{newer}");

        let semantics = reason(check_description(&description(5, 2), &built, &host).unwrap_err());
        assert!(semantics.contains("semantics revision 2"), "{semantics}");

        let knowing = HostAbi {
            known_semantics_revisions: vec![1, 2],
            ..HostAbi::current()
        };
        assert!(check_description(&description(5, 2), &built, &knowing).is_ok());
    }
}
