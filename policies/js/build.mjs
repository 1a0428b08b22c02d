// Builds the JavaScript policy (policy.js) into two components, one per engine:
//
//   node build.mjs OUT_DIR
//
// - OUT_DIR/mend_policy_js.wasm      componentize-js (StarlingMonkey: SpiderMonkey in wasm)
// - OUT_DIR/mend_policy_js_qjs.wasm  componentize-qjs (QuickJS)
//
// Both are built against the contract in ./wit (or ../../wit) and may import nothing but its
// types: mend refuses any other import, so every WASI feature of each engine is turned off
// here. Each file is printed with its sha256.
//
// Everything that made two builds differ is pinned here: the source's name, componentize-js's
// work folder, the time it writes into its clock stubs, and (fixed-entropy.c, preloaded into
// Wizer) the randomness and clocks the engine's initialisation reads before Wizer snapshots
// it. Two SpiderMonkey builds give the same bytes; the QuickJS build still differs in a few
// bytes of its snapshot, made inside componentize-qjs's native binding, which this cannot
// reach. README.md ("Reproducibility") has the details.

import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { componentize as componentizeJs } from '@bytecodealliance/componentize-js';
import { componentize as componentizeQjs } from 'componentize-qjs';
import wizer from '@bytecodealliance/wizer';

const here = dirname(fileURLToPath(import.meta.url));
// The contract: `wit/` beside this script in a project written by `mend policy new` (and in
// the copy scripts/build-js-policies builds from), else the checkout's own.
const witPath = existsSync(join(here, 'wit')) ? join(here, 'wit') : resolve(here, '..', '..', 'wit');
const sourcePath = join(here, 'policy.js');

/// The one world of the contract, and the name the source has inside both components. The
/// name is part of the bytes (it is in the engines' snapshots), so it is fixed rather than
/// taken from wherever the checkout is.
const WORLD = 'policy';
const SOURCE_NAME = 'policy.js';

/// Where componentize-js works. It makes its work folder under the system's temporary folder
/// with a random name, and that folder's path ends up in the component: StarlingMonkey keeps
/// the paths of the scripts it was started with in its snapshot. So every build uses this same
/// path (same parent, same name), and two builds on one machine cannot run at once.
const STARLINGMONKEY_TMP = '/tmp/mend-policy-js-build';

if (!process.argv[2] || process.argv.length > 3) {
  console.error('usage: node build.mjs OUT_DIR');
  process.exit(2);
}
const outDir = resolve(process.argv[2]);
await mkdir(outDir, { recursive: true });
const source = await readFile(sourcePath, 'utf8');

await write('mend_policy_js.wasm', await buildStarlingMonkey());
await write('mend_policy_js_qjs.wasm', await buildQuickJs());

/// componentize-js with every WASI feature disabled: no stdio (errors trap instead of being
/// printed), no random, no clocks, no http, no fetch event. The component then imports only the
/// contract's types.
async function buildStarlingMonkey() {
  await mkdir(STARLINGMONKEY_TMP, { recursive: true });
  const workDir = join(STARLINGMONKEY_TMP, createHash('sha256').update('0').digest('hex').slice(0, 12));
  if (existsSync(workDir)) {
    throw new Error(
      `${workDir} exists: another build is running, or one was interrupted; remove it once no build runs`,
    );
  }
  // The source is handed over as text under a fixed name, so that the component holds neither
  // the checkout's path nor the working directory's: componentize-js records it relative to
  // its work folder, unless the working directory's path is a prefix of that folder's.
  process.chdir(here);
  if (workDir.startsWith(here)) {
    throw new Error(`build from a checkout whose path is not a prefix of ${workDir}`);
  }

  // componentize-js names its work folder `$TMPDIR/<12 hex digits of sha256(Math.random())>`:
  // both are pinned for the one call that makes it (synchronously, before its first await).
  //
  // With the clocks feature disabled, componentize-js replaces the wall and monotonic clocks
  // by functions answering one constant: the time of the build, read with `Date.now()` when it
  // stubs them, after its first await. The policy reads no clock; the constant is pinned to 0
  // (the Unix epoch) for the whole call, so that it is the same in every build and obviously
  // not a time anyone should rely on.
  const saved = { tmpDir: process.env.TMPDIR, random: Math.random, now: Date.now };
  const restoreWorkFolder = () => {
    Math.random = saved.random;
    if (saved.tmpDir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved.tmpDir;
  };
  process.env.TMPDIR = STARLINGMONKEY_TMP;
  Math.random = () => 0;
  Date.now = () => 0;
  try {
    const building = componentizeJs(source, {
      sourceName: SOURCE_NAME,
      witPath,
      worldName: WORLD,
      disableFeatures: ['stdio', 'random', 'clocks', 'http', 'fetch-event'],
      wizerBin: await fixedEntropyWizer(),
    });
    restoreWorkFolder();
    const { component } = await building;
    return component;
  } finally {
    restoreWorkFolder();
    Date.now = saved.now;
  }
}

/// Wizer with `fixed-entropy.c` preloaded, as a script for componentize-js to run in Wizer's
/// place (under OUT_DIR/.fixed-entropy/). Needs a C compiler (`cc`); without one, the build
/// goes on with Wizer as it is and says that its digest will not be reproducible.
async function fixedEntropyWizer() {
  const folder = join(outDir, '.fixed-entropy');
  await mkdir(folder, { recursive: true });
  const library = join(folder, 'fixed-entropy.so');
  const compiled = spawnSync(
    'cc',
    ['-O2', '-shared', '-fPIC', '-o', library, join(here, 'fixed-entropy.c'), '-ldl'],
    { stdio: 'inherit' },
  );
  if (compiled.status !== 0) {
    console.warn(
      'build.mjs: no C compiler (cc) to build fixed-entropy.c: the SpiderMonkey component is built, but two builds will not give the same digest',
    );
    return undefined;
  }
  const script = join(folder, 'wizer');
  // The shell exports the working directory as PWD, and Wizer hands its environment to the
  // module it initialises: PWD is unset so that where the build ran stays out of the snapshot.
  await writeFile(script, `#!/bin/sh\nunset PWD OLDPWD\nLD_PRELOAD='${library}' exec '${wizer}' "$@"\n`);
  await chmod(script, 0o755);
  return script;
}

/// componentize-qjs with its WASI imports replaced by traps (`stubWasi`; without it the
/// component imports 18 WASI interfaces) and the runtime that does not use the component
/// model's async ABI (`sync`; without it the component uses `task.cancel`, which mend's engine,
/// built without component-model async, refuses to compile).
async function buildQuickJs() {
  const { component } = await componentizeQjs({
    witPath,
    jsSource: source,
    world: WORLD,
    stubWasi: true,
    sync: true,
  });
  return component;
}

async function write(name, bytes) {
  const path = join(outDir, name);
  await writeFile(path, bytes);
  const digest = createHash('sha256').update(bytes).digest('hex');
  console.log(`${digest}  ${path} (${bytes.length} bytes)`);
}
