//! The JavaScript policy (`policies/js/policy.js`) as the tests load it: built once per test
//! process by `scripts/build-js-policies`, which installs the builders `package-lock.json` pins
//! and skips the build when the components of the same inputs are already there
//! (`scripts/test` builds them before the tests, so a test only finds them).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The two builds of the JavaScript policy, one per engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsEngine {
    /// componentize-js: SpiderMonkey in one core module.
    SpiderMonkey,
    /// componentize-qjs: QuickJS, a composed component of several core instances.
    QuickJs,
}

impl JsEngine {
    /// Both engines.
    pub const ALL: [JsEngine; 2] = [JsEngine::SpiderMonkey, JsEngine::QuickJs];

    /// The component's file name in the build's output folder.
    pub fn file_name(self) -> &'static str {
        match self {
            JsEngine::SpiderMonkey => "mend_policy_js.wasm",
            JsEngine::QuickJs => "mend_policy_js_qjs.wasm",
        }
    }
}

impl std::fmt::Display for JsEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            JsEngine::SpiderMonkey => "componentize-js (SpiderMonkey)",
            JsEngine::QuickJs => "componentize-qjs (QuickJS)",
        })
    }
}

/// The workspace's root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// Builds the JavaScript policy into `out` with `scripts/build-js-policies`; panics with the
/// script's output if it fails.
pub fn build_js_policies(out: &Path) -> PathBuf {
    let output = Command::new(workspace().join("scripts/build-js-policies"))
        .arg(out)
        .output()
        .expect("run scripts/build-js-policies");
    assert!(
        output.status.success(),
        "scripts/build-js-policies failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    PathBuf::from(printed.lines().last().expect("it prints the folder").trim())
}

/// The bytes of the JavaScript policy built with `engine`, built (once per process) into the
/// default folder, `target/js-policies`.
pub fn js_policy(engine: JsEngine) -> Vec<u8> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let folder = BUILT.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target"));
        build_js_policies(&target.join("js-policies"))
    });
    std::fs::read(folder.join(engine.file_name())).expect("read a built JavaScript policy")
}
