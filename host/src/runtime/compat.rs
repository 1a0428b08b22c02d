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
//! [`HostAbi::current`] is this one. Running a component is still the job of the bindings
//! this crate was compiled with, which are for [`CONTRACT_TYPES_IMPORT`] only.

use std::fmt;

use mend_contract::PolicyDescription;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::error::PolicyError;

/// The contract's interface of data types, at the version this host's bindings are built from
/// (`wit/policy.wit`).
pub const CONTRACT_TYPES_IMPORT: &str = "mend:policy/types@1.3.0";

/// The interfaces a policy component may import. Listing one here grants every policy that
/// authority, so each entry needs a reason.
///
/// - `mend:policy/types`: the contract's own data types. A world that `use`s an interface's
///   types imports that interface, but it carries types only; the import check refuses it if
///   a component declares a function in it. It grants nothing.
pub const ALLOWED_IMPORTS: &[&str] = &[CONTRACT_TYPES_IMPORT];

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
    /// The contract types interface a component must import, with its version
    /// (`mend:policy/types@1.3.0`): the contract the host's bindings link against.
    pub contract_import: String,
}

impl HostAbi {
    /// This host.
    pub fn current() -> Self {
        Self {
            abi_major: HOST_ABI_MAJOR,
            abi_minor: HOST_ABI_MINOR,
            known_semantics_revisions: KNOWN_SEMANTICS_REVISIONS.to_vec(),
            contract_import: CONTRACT_TYPES_IMPORT.to_string(),
        }
    }

    /// The version of the contract the host runs components of: `1.3.0`.
    fn contract(&self) -> ContractVersion {
        contract_version(&self.contract_import).unwrap_or_else(|| ContractVersion {
            text: self.contract_import.clone(),
            number: None,
        })
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

impl ContractVersion {
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

/// Refuses, before anything is instantiated, a component built against another version of
/// the contract than `host`'s, then one that imports anything outside the host's contract
/// types, or any function at all: the linker provides none, and a policy has no authority to
/// ask for. Returns the contract version the component is built against.
pub(crate) fn check_imports(
    engine: &Engine,
    component: &Component,
    host: &HostAbi,
) -> Result<ContractVersion, PolicyError> {
    let component_type = component.component_type();
    let imports: Vec<(&str, ComponentItem)> = component_type
        .imports(engine)
        .map(|(name, item)| (name, item.ty))
        .collect();
    let host_contract = host.contract();

    // The version first: every other refusal of a component built against another contract
    // would only be a symptom of it.
    let mut built_against = None;
    for (import, _) in &imports {
        if let Some(version) = contract_version(import) {
            if version != host_contract {
                return Err(contract_mismatch(&version, &host_contract));
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
            *import != host.contract_import || !types_only
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
            host_contract.abi()
        ),
    })?;

    // A host played by a test may accept components this build cannot instantiate: the
    // bindings below are generated from one contract. Say so rather than fail on a type error.
    if host.contract_import != CONTRACT_TYPES_IMPORT {
        return Err(PolicyError::Incompatible {
            reason: format!(
                "the component is built against {built_against}, which this host accepts, but \
                 this build of mend has the bindings of {CONTRACT_PACKAGE}@{} only and cannot \
                 run it",
                HostAbi::current().contract().text
            ),
        });
    }
    Ok(built_against)
}

/// The refusal of a component built against another contract version, saying which way to
/// move: rebuild an older policy, upgrade mend for a newer one.
fn contract_mismatch(component: &ContractVersion, host: &ContractVersion) -> PolicyError {
    let newer_than_host = matches!(
        (component.number, host.number),
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
            host.abi()
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
        let current = HostAbi::current().contract();
        assert_eq!(current.number, Some((HOST_ABI_MAJOR, HOST_ABI_MINOR, 0)));
        assert_eq!(current.to_string(), "mend:policy@1.3.0");
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
        let host = HostAbi::current().contract();
        for older in ["1.1.0", "1.2.0"] {
            let refused = reason(contract_mismatch(
                &contract_version(&format!("mend:policy/types@{older}")).unwrap(),
                &host,
            ));
            assert_eq!(
                refused,
                format!(
                    "built against mend:policy@{older}; this host runs 1.3 components: rebuild the policy against wit/ of this mend"
                )
            );
        }
        let newer = reason(contract_mismatch(
            &contract_version("mend:policy/types@1.4.0").unwrap(),
            &host,
        ));
        assert!(newer.contains("mend:policy@1.4.0") && newer.contains("upgrade mend"));
    }

    #[test]
    fn each_description_refusal_names_its_reason() {
        let host = HostAbi::current();
        let built = host.contract();
        assert!(check_description(&description(3, 1), &built, &host).is_ok());

        let liar = reason(check_description(&description(1, 1), &built, &host).unwrap_err());
        assert!(
            liar.contains(
                "describe() claims ABI 1.1 but the component is built against mend:policy@1.3.0"
            ),
            "{liar}"
        );

        let older_host = HostAbi {
            abi_minor: 2,
            ..HostAbi::current()
        };
        let newer = reason(check_description(&description(3, 1), &built, &older_host).unwrap_err());
        assert!(newer.contains("newer than this host's 1.2"), "{newer}");

        let semantics = reason(check_description(&description(3, 2), &built, &host).unwrap_err());
        assert!(semantics.contains("semantics revision 2"), "{semantics}");

        let knowing = HostAbi {
            known_semantics_revisions: vec![1, 2],
            ..HostAbi::current()
        };
        assert!(check_description(&description(3, 2), &built, &knowing).is_ok());
    }
}
