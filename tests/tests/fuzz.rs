//! The fuzz targets of `mend::fuzzing`, `mend_server::fuzzing` and `mend_cli::fuzzing`, run for a few seconds each on the stable toolchain, as
//! part of `cargo test`: every file of the target's corpus (`fuzz/corpus/<target>/`) is
//! replayed, then a seeded mutator feeds it variations of the corpus until the target's time
//! is up and it has tried at least [`MIN_MUTATED_INPUTS`] of them. `cargo fuzz` (nightly, `fuzz/`) runs the same targets for as long as one likes,
//! guided by coverage; this run needs nothing but `cargo test` and keeps every crasher ever
//! committed to the corpus fixed.
//!
//! The mutator is small and blind to coverage, so it is structure-aware instead: besides bit
//! flips, byte inserts, deletes, copies and splices of other corpus files, it replaces numbers
//! with the edges of their types (`u64::MAX`, `-1`, `2^63`, `1e999`), strings with the
//! characters ids and names refuse (`/`, `..`, bidi controls, 129 bytes), and values with
//! other JSON types; split objects get their length prefix and payload checksum resealed half
//! the time, so that mutations of the header reach past the checksum.
//!
//! - `MEND_FUZZ_SECONDS` (default 2.5): the mutation time per target. A run goes on past it
//!   until it has tried [`MIN_MUTATED_INPUTS`] mutated inputs, so that a loaded machine (or
//!   `MEND_FUZZ_SECONDS=0`) still tries that many.
//! - `MEND_FUZZ_SEED` (default fixed): the seed; every run with one seed tries the same
//!   inputs in the same order (as many of them as the time allows, and at least the floor).
//!
//! A failing input is written to `target/fuzz-failures/<target>/seed-<seed>-input-<n>` and
//! named in the failure; copy it into `fuzz/corpus/<target>/` once fixed, and every later run
//! replays it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mend::fuzzing::{Target, Verdict};
use mend::objects::format;

/// Every target, with the crate whose `fuzzing` module holds it.
fn targets() -> impl Iterator<Item = (&'static str, &'static str, Target)> {
    let of = |krate: &'static str, targets: &'static [(&'static str, Target)]| {
        targets
            .iter()
            .map(move |(name, target)| (krate, *name, *target))
    };
    of("mend", mend::fuzzing::TARGETS)
        .chain(of("mend_server", mend_server::fuzzing::TARGETS))
        .chain(of("mend_cli", mend_cli::fuzzing::TARGETS))
}

/// The default seed: fixed, so that `scripts/test` tries the same inputs every run.
const DEFAULT_SEED: u64 = 0x6d65_6e64_6675_7a7a;
/// Mutated inputs stay below this size: the parsers are linear, and big inputs only slow the
/// loop down.
const MAX_INPUT_BYTES: usize = 64 << 10;
/// Accepted mutants are kept for further mutation, up to this many per target.
const MAX_POOL: usize = 512;
/// Every target tries at least this many mutated inputs, however long they take: the floor
/// of what a run checks, met even when the time is up first (a loaded machine, or
/// `MEND_FUZZ_SECONDS=0`). The slowest target (`checkpoint`) tries that many in under two
/// seconds, with every other target running beside it on two cores.
const MIN_MUTATED_INPUTS: u64 = 1_000;

#[test]
fn split_object() {
    run("split_object");
}

#[test]
fn commit_log_entry() {
    run("commit_log_entry");
}

#[test]
fn checkpoint() {
    run("checkpoint");
}

#[test]
fn scenario_file() {
    run("scenario_file");
}

#[test]
fn settings_file() {
    run("settings_file");
}

#[test]
fn stage_request_body() {
    run("stage_request_body");
}

#[test]
fn stage_compact_body() {
    run("stage_compact_body");
}

#[test]
fn begin_compact_body() {
    run("begin_compact_body");
}

#[test]
fn publish_request_body() {
    run("publish_request_body");
}

#[test]
fn apply_config_body() {
    run("apply_config_body");
}

#[test]
fn create_dataset_body() {
    run("create_dataset_body");
}

#[test]
fn split_ids_body() {
    run("split_ids_body");
}

#[test]
fn list_query() {
    run("list_query");
}

#[test]
fn authorization_header() {
    run("authorization_header");
}

#[test]
fn tokens_file() {
    run("tokens_file");
}

/// Every target has a test above and a corpus; a target added to a `fuzzing` module without
/// them fails here.
#[test]
fn every_target_has_a_test_and_a_corpus() {
    let source = include_str!("fuzz.rs");
    let mut count = 0;
    for (krate, name, _) in targets() {
        count += 1;
        assert!(
            source.contains(&format!("fn {name}() {{\n    run(\"{name}\");")),
            "no test runs target {name}"
        );
        assert!(
            !corpus(name).is_empty(),
            "fuzz/corpus/{name}/ holds no seed files"
        );
        let fuzz_target = corpus_root()
            .join("../fuzz_targets")
            .join(format!("{name}.rs"));
        let text = std::fs::read_to_string(&fuzz_target)
            .unwrap_or_else(|error| panic!("{}: {error}", fuzz_target.display()));
        assert!(
            text.contains(&format!("{krate}::fuzzing::{name}(")),
            "{} does not call {krate}::fuzzing::{name}",
            fuzz_target.display()
        );
    }
    println!("fuzz: {count} targets, each with a test, a corpus and a cargo-fuzz target");
}

/// Replays the corpus of `name`, then mutates it until the time is up, and prints the counts.
fn run(name: &str) {
    let target = targets()
        .find(|(_, candidate, _)| *candidate == name)
        .map(|(_, _, target)| target)
        .unwrap_or_else(|| panic!("no fuzz target {name}"));
    let seed = seed();
    let budget = budget();
    let corpus = corpus(name);
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{name}/ holds no seed files"
    );

    let mut replayed = Counts::default();
    for (path, bytes) in &corpus {
        let verdict = attempt(target, bytes).unwrap_or_else(|| {
            panic!(
                "fuzz {name}: corpus file {} fails (the panic is printed above): {}",
                path.display(),
                preview(bytes)
            )
        });
        replayed.add(verdict);
    }
    // The seeds include valid examples: a target whose corpus is all refused would spend its
    // mutations on the first few bytes.
    assert!(
        replayed.accepted > 0,
        "{name}: no corpus file is accepted; add a valid example to fuzz/corpus/{name}/"
    );

    let mut pool: Vec<Vec<u8>> = corpus.iter().map(|(_, bytes)| bytes.clone()).collect();
    let seeds = pool.len();
    let mut mutated = Counts::default();
    let mut rng = Rng::new(seed ^ fnv(name.as_bytes()));
    let started = Instant::now();
    let mut index: u64 = 0;
    while started.elapsed() < budget || index < MIN_MUTATED_INPUTS {
        let input = mutate(name, &pool, &mut rng);
        let verdict =
            attempt(target, &input).unwrap_or_else(|| save_failure(name, seed, index, &input));
        mutated.add(verdict);
        if verdict == Verdict::Accepted && pool.len() < seeds + MAX_POOL {
            pool.push(input);
        }
        index += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        mutated.total() >= MIN_MUTATED_INPUTS,
        "fuzz {name}: {} mutated inputs tried, fewer than the floor of {MIN_MUTATED_INPUTS}",
        mutated.total()
    );
    println!(
        "fuzz {name}: seed {seed}; {} corpus files replayed ({} accepted, {} refused); \
         {} mutated inputs (at least {MIN_MUTATED_INPUTS}) in {elapsed:.1} s ({:.0}/s): {} \
         accepted, {} refused",
        corpus.len(),
        replayed.accepted,
        replayed.refused,
        mutated.total(),
        mutated.total() as f64 / elapsed,
        mutated.accepted,
        mutated.refused,
    );
}

#[derive(Debug, Default)]
struct Counts {
    accepted: u64,
    refused: u64,
}

impl Counts {
    fn add(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Accepted => self.accepted += 1,
            Verdict::Refused => self.refused += 1,
        }
    }

    fn total(&self) -> u64 {
        self.accepted + self.refused
    }
}

/// Runs one input; `None` when it panicked (a broken property), so that the caller can say
/// which input it was before failing the test.
fn attempt(target: Target, input: &[u8]) -> Option<Verdict> {
    catch_unwind(AssertUnwindSafe(|| target(input))).ok()
}

/// Keeps a failing mutated input where it can be replayed from, and fails the test.
fn save_failure(name: &str, seed: u64, index: u64, input: &[u8]) -> Verdict {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/fuzz-failures")
        .join(name);
    let path = dir.join(format!("seed-{seed}-input-{index}"));
    let saved = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, input));
    panic!(
        "fuzz {name}: seed {seed}, input {index} fails (the panic is printed above); {}: {}\n\
         {}\nonce fixed, copy it into fuzz/corpus/{name}/ so that every run replays it",
        match saved {
            Ok(()) => "saved as",
            Err(_) => "could not be saved as",
        },
        path.display(),
        preview(input)
    );
}

/// The input as escaped text, cut short.
fn preview(input: &[u8]) -> String {
    let text: String = input.escape_ascii().to_string();
    match text.char_indices().nth(2000) {
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], input.len()),
        None => format!("{text} ({} bytes)", input.len()),
    }
}

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
}

/// The files of `fuzz/corpus/<name>/`, sorted by name.
fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_root().join(name);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.expect("a corpus directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let bytes =
                std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            (path, bytes)
        })
        .collect()
}

fn seed() -> u64 {
    match std::env::var("MEND_FUZZ_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("MEND_FUZZ_SEED={text:?} is not a whole number")),
        Err(_) => DEFAULT_SEED,
    }
}

fn budget() -> Duration {
    match std::env::var("MEND_FUZZ_SECONDS") {
        Ok(text) => text
            .trim()
            .parse()
            .ok()
            .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
            .unwrap_or_else(|| panic!("MEND_FUZZ_SECONDS={text:?} is not a number of seconds")),
        Err(_) => Duration::from_millis(2500),
    }
}

/// One new input: a pool entry with one to four mutations stacked.
fn mutate(name: &str, pool: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut input = pool[rng.below(pool.len())].clone();
    // One mutation half the time: stacked ones mostly break the syntax, and the interesting
    // inputs are one edge away from a valid file.
    let count = if rng.below(2) == 0 {
        1
    } else {
        2 + rng.below(3)
    };
    for _ in 0..count {
        let other = &pool[rng.below(pool.len())];
        mutate_once(&mut input, other, rng);
    }
    input.truncate(MAX_INPUT_BYTES);
    if name == "split_object" && rng.below(2) == 0 {
        reseal(&mut input);
    }
    input
}

/// Numbers at the edges of the types mend reads them into.
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "-1",
    "-0",
    "2",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999999",
    "1e999",
    "-1e999",
    "1.5",
    "1e3",
    "0x10",
    "3155760000000",
    "3155760000001",
];

/// Length prefixes at the edges: zero, the sign bit, the largest header and one past it.
const U32_EDGES: &[u32] = &[
    0,
    1,
    0x7fff_ffff,
    0x8000_0000,
    u32::MAX,
    1 << 20,
    (1 << 20) + 1,
];

/// String contents that ids, names and parsers must refuse or survive.
const STRINGS: &[&str] = &[
    "",
    "a",
    " ",
    "a b",
    "a/b",
    "..",
    ".",
    "-a",
    "\\u0000",
    "\\n",
    "\\t",
    "\\\"",
    "\\\\",
    "\\ud800",
    "\\udfff",
    "\u{202e}abc",
    "\u{feff}a",
    "\u{200b}",
    "é",
    "日本",
    "%zz",
    "a%2Fb",
    "sha256:",
    "upsert",
    "create-only",
    "staged",
    "published",
    "marked_for_deletion",
    "plan-stage",
    "decide-recovery",
    "1..2",
    "2..1",
    "-5..5",
    "memory://",
    "s3://bucket/prefix",
    "ftp://x",
    "127.0.0.1:0",
    "[::1]:7600",
];

/// Whole JSON values to put in place of another.
const VALUES: &[&str] = &[
    "null",
    "true",
    "false",
    "[]",
    "{}",
    "\"\"",
    "[null]",
    "{\"\":null}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
];

/// Bytes that mean something to JSON, TOML, URLs or the split object format.
const SPECIAL_BYTES: &[u8] = b"\0\x7f\x80\xff\"\\{}[],:=.#&%+-0 \n\r\t'";

fn mutate_once(input: &mut Vec<u8>, other: &[u8], rng: &mut Rng) {
    let len = input.len();
    // Numbers, strings and values are replaced twice as often as the byte-level mutations.
    match rng.below(17) {
        // Flip one bit.
        0 if len > 0 => {
            let at = rng.below(len);
            input[at] ^= 1 << rng.below(8);
        }
        // Overwrite one byte with a meaningful one.
        1 if len > 0 => {
            let at = rng.below(len);
            input[at] = SPECIAL_BYTES[rng.below(SPECIAL_BYTES.len())];
        }
        // Insert a meaningful byte.
        2 => {
            let at = rng.below(len + 1);
            input.insert(at, SPECIAL_BYTES[rng.below(SPECIAL_BYTES.len())]);
        }
        // Delete a range.
        3 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(16)).min(len);
            input.drain(start..end);
        }
        // Copy a range of itself elsewhere.
        4 if len > 0 => {
            let start = rng.below(len);
            let end = (start + 1 + rng.below(64)).min(len);
            let chunk = input[start..end].to_vec();
            let at = rng.below(len + 1);
            input.splice(at..at, chunk);
        }
        // Splice: our head, another file's tail.
        5 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            input.truncate(cut);
            input.extend_from_slice(&other[from..]);
        }
        // Insert a range of another file.
        6 if !other.is_empty() => {
            let start = rng.below(other.len());
            let end = (start + 1 + rng.below(128)).min(other.len());
            let at = rng.below(len + 1);
            input.splice(at..at, other[start..end].iter().copied());
        }
        // Cut the end off.
        7 if len > 0 => input.truncate(rng.below(len)),
        // Overwrite four bytes with an edge of u32, little-endian (the object length prefix).
        8 if len >= 4 => {
            let at = rng.below(len - 3);
            let value = U32_EDGES[rng.below(U32_EDGES.len())];
            input[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        9 | 14 => replace_number(input, rng),
        10 | 15 => replace_string(input, rng),
        11 | 16 => replace_value(input, rng),
        // Repeat a line (a TOML key twice, a JSON member twice).
        12 => {
            let lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
            if lines.len() > 1 {
                let line = lines[rng.below(lines.len())].to_vec();
                let at = rng.below(lines.len());
                let mut joined: Vec<Vec<u8>> = lines.iter().map(|l| l.to_vec()).collect();
                joined.insert(at, line);
                *input = joined.join(&b'\n');
            }
        }
        // A long run of one byte.
        _ => {
            let at = rng.below(len + 1);
            let byte = SPECIAL_BYTES[rng.below(SPECIAL_BYTES.len())];
            let count = 1 + rng.below(300);
            input.splice(at..at, std::iter::repeat_n(byte, count));
        }
    }
}

/// Replaces one number (a run of digits, with its sign, point and exponent) with an edge.
fn replace_number(input: &mut Vec<u8>, rng: &mut Rng) {
    let spans = spans(input, |bytes, start| {
        if !bytes[start].is_ascii_digit() || (start > 0 && is_number_byte(bytes[start - 1])) {
            return None;
        }
        let start = if start > 0 && bytes[start - 1] == b'-' {
            start - 1
        } else {
            start
        };
        let end = (start + 1..=bytes.len())
            .find(|&end| end == bytes.len() || !is_number_byte(bytes[end]))
            .unwrap_or(bytes.len());
        Some((start, end))
    });
    if let Some(&(start, end)) = pick(&spans, rng) {
        input.splice(start..end, NUMBERS[rng.below(NUMBERS.len())].bytes());
    }
}

fn is_number_byte(byte: u8) -> bool {
    byte.is_ascii_digit() || matches!(byte, b'.' | b'e' | b'E' | b'+' | b'-')
}

/// Replaces the contents of one double-quoted string.
fn replace_string(input: &mut Vec<u8>, rng: &mut Rng) {
    let spans = spans(input, |bytes, start| {
        if bytes[start] != b'"' {
            return None;
        }
        let mut at = start + 1;
        while at < bytes.len() {
            match bytes[at] {
                b'\\' => at += 2,
                b'"' => return Some((start + 1, at)),
                _ => at += 1,
            }
        }
        None
    });
    if let Some(&(start, end)) = pick(&spans, rng) {
        let replacement = match rng.below(STRINGS.len() + 2) {
            n if n < STRINGS.len() => STRINGS[n].to_owned(),
            // One past every length limit of ids and names.
            n if n == STRINGS.len() => "x".repeat(129),
            _ => "y".repeat(1 + rng.below(5000)),
        };
        input.splice(start..end, replacement.bytes());
    }
}

/// Replaces the value after one `:` or `=` (up to the next `,`, `}`, `]` or line end) with a
/// JSON value of another type.
fn replace_value(input: &mut Vec<u8>, rng: &mut Rng) {
    let spans = spans(input, |bytes, start| {
        if !matches!(bytes[start], b':' | b'=') {
            return None;
        }
        let end = (start + 1..=bytes.len())
            .find(|&end| end == bytes.len() || matches!(bytes[end], b',' | b'}' | b']' | b'\n'))
            .unwrap_or(bytes.len());
        Some((start + 1, end))
    });
    if let Some(&(start, end)) = pick(&spans, rng) {
        input.splice(start..end, VALUES[rng.below(VALUES.len())].bytes());
    }
}

/// Every span `at` finds, starting at each byte; at most a few hundred, spread evenly.
fn spans(input: &[u8], at: impl Fn(&[u8], usize) -> Option<(usize, usize)>) -> Vec<(usize, usize)> {
    let step = (input.len() / 4096).max(1);
    (0..input.len())
        .step_by(step)
        .filter_map(|start| at(input, start))
        .collect()
}

fn pick<'a, T>(items: &'a [T], rng: &mut Rng) -> Option<&'a T> {
    (!items.is_empty()).then(|| &items[rng.below(items.len())])
}

/// Makes a mutated split object consistent again where its header still parses as JSON: the
/// length prefix, and the header's payload size and checksum, are set to what the bytes hold,
/// so that the mutation is judged by the header parser and not by the checksum.
fn reseal(input: &mut Vec<u8>) {
    let Ok(len) = format::header_len(input) else {
        return;
    };
    let header_end = (format::PREFIX_LEN + len as usize).min(input.len());
    let Ok(mut header) =
        serde_json::from_slice::<serde_json::Value>(&input[format::PREFIX_LEN..header_end])
    else {
        return;
    };
    let payload = input[header_end..].to_vec();
    if let Some(fields) = header.as_object_mut() {
        fields.insert("payload_size".into(), payload.len().into());
        fields.insert("payload_sha256".into(), format::sha256(&payload).into());
    }
    let json = serde_json::to_vec(&header).expect("a JSON value serialises");
    let mut sealed = format::MAGIC.to_vec();
    sealed.extend_from_slice(&(json.len() as u32).to_le_bytes());
    sealed.extend_from_slice(&json);
    sealed.extend_from_slice(&payload);
    *input = sealed;
}

/// SplitMix64: small, fast, and the same on every platform, so a seed replays anywhere.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; `bound` is at least 1.
    fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound.max(1) as u64) as usize
    }
}

/// FNV-1a, to give each target its own stream from one seed.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
