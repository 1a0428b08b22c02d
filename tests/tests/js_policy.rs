//! The JavaScript policy (`policies/js/policy.js`), built by `scripts/build-js-policies` with
//! both of its engines: each build loads, imports nothing but the contract's types, passes
//! every golden scenario of the default policy, and decides like the native default policy on
//! random inputs. The QuickJS build is a composed component (several core instances), accepted
//! within the sandbox's limits and refused, at load, below them. Two SpiderMonkey builds in
//! different folders are the same bytes.

use mend::error::PolicyError;
use mend::runtime::{CONTRACT_TYPES_IMPORT, PolicyLimits, PolicyRuntime, imports_of};
use mend::scenarios::{render, run};
use mend_tests::js_policies::{JsEngine, build_js_policies, js_policy};
use sha2::{Digest, Sha256};

use crate::component::decides_like_native;
use crate::scenarios::default_suites;

/// Random inputs of each call per build, as many as the Rust component is given (a decision
/// costs about half a millisecond in SpiderMonkey); enough to reach every
/// outcome of every call (the differential checks that it did).
const VECTORS: u32 = 500;

fn load(engine: JsEngine) -> PolicyRuntime {
    PolicyRuntime::load(&js_policy(engine), PolicyLimits::default())
        .unwrap_or_else(|error| panic!("the {engine} build loads: {error}"))
}

#[test]
fn both_builds_load_import_only_the_contract_and_pass_the_golden_scenarios() {
    for engine in JsEngine::ALL {
        let bytes = js_policy(engine);
        assert_eq!(imports_of(&bytes).unwrap(), [CONTRACT_TYPES_IMPORT]);
        let policy = load(engine);
        assert_eq!(policy.description().name, "mend-default-js");
        let (mut passed, mut failed) = (0, 0);
        for suite in default_suites() {
            let report = run(&policy, &suite);
            passed += report.passed;
            failed += report.failed.len();
            assert!(report.all_passed(), "{engine}:\n{}", render(&report));
        }
        println!(
            "{engine}: {passed} scenarios passed, {failed} failed; {} bytes, {}; needs {}",
            bytes.len(),
            policy.digest(),
            policy.shape()
        );
        assert!(passed > 0);
    }
}

#[test]
fn the_quickjs_build_is_composed_and_refused_below_what_it_needs() {
    let policy = load(JsEngine::QuickJs);
    let needs = *policy.shape();
    assert!(
        needs.core_instances > 1,
        "the QuickJS build is a composed component: {needs}"
    );
    let limits = PolicyLimits {
        max_core_instances: u32::try_from(needs.core_instances - 1).unwrap(),
        ..PolicyLimits::default()
    };
    let error = PolicyRuntime::load(&js_policy(JsEngine::QuickJs), limits).unwrap_err();
    let PolicyError::ExceedsSandbox { over, .. } = &error else {
        panic!("refused at load as over the sandbox, not {error:?}");
    };
    assert_eq!(
        over,
        &[format!(
            "{} core instances where limits.policy_core_instances is {}",
            needs.core_instances,
            needs.core_instances - 1
        )]
    );
    println!("the QuickJS build needs {needs}; one instance fewer: {error}");
}

#[test]
fn both_builds_decide_like_the_native_default_policy() {
    for engine in JsEngine::ALL {
        decides_like_native(&load(engine), &engine.to_string(), VECTORS);
    }
}

/// The component's bytes with the contents of every data section left out: each section
/// (nested modules' and components' included) as its id and bytes, a data section as its id
/// only.
fn without_data(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut sections = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.expect("the component parses");
        match &payload {
            // Their nested payloads are compared one by one.
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => {}
            wasmparser::Payload::DataSection(_) | wasmparser::Payload::DataCountSection { .. } => {
                sections.push((11, Vec::new()));
            }
            other => {
                if let Some((id, range)) = other.as_section() {
                    sections.push((id, bytes[range].to_vec()));
                }
            }
        }
    }
    sections
}

/// What `build.mjs` pins (the source's name, componentize-js's work folder, the clocks'
/// constant, and through `fixed-entropy.c` the randomness and clocks Wizer answers while it
/// initialises the engine) makes two SpiderMonkey builds in different folders the same bytes.
/// The QuickJS build runs Wizer inside componentize-qjs's native binding, which reads the
/// machine's randomness with raw system calls: two of its builds are identical but for a few
/// bytes of the engine's initialised memory (policies/js/README.md, "Reproducibility").
#[test]
fn two_builds_in_different_folders_give_the_same_spidermonkey_component() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::Builder::new()
        .prefix("a-longer-folder-name-than-the-first")
        .tempdir()
        .unwrap();
    let first = build_js_policies(first.path());
    let second = build_js_policies(second.path());
    for engine in JsEngine::ALL {
        let read =
            |folder: &std::path::Path| std::fs::read(folder.join(engine.file_name())).unwrap();
        let (one, two) = (read(&first), read(&second));
        if engine == JsEngine::SpiderMonkey {
            assert!(one == two, "{engine}: two builds differ");
            assert_eq!(
                one,
                js_policy(engine),
                "{engine}: the tests' build is the same"
            );
            println!(
                "{engine}: two builds in different folders, both sha256:{:x} ({} bytes)",
                Sha256::digest(&one),
                one.len()
            );
            continue;
        }
        let (one_sections, two_sections) = (without_data(&one), without_data(&two));
        assert_eq!(one_sections.len(), two_sections.len(), "{engine}");
        for (index, (a, b)) in one_sections.iter().zip(&two_sections).enumerate() {
            assert!(
                a == b,
                "{engine}: section {index} (id {}) differs outside the data",
                a.0
            );
        }
        let apart = if one.len() == two.len() {
            let differing = one.iter().zip(&two).filter(|(a, b)| a != b).count();
            format!("{differing} of {} bytes differ", one.len())
        } else {
            format!("{} and {} bytes long", one.len(), two.len())
        };
        println!(
            "{engine}: {} sections identical outside the data; sha256:{:x} and sha256:{:x} ({apart})",
            one_sections.len(),
            Sha256::digest(&one),
            Sha256::digest(&two),
        );
    }
}
