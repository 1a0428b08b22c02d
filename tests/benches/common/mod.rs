//! What every mend bench shares: criterion set up from the command line; groups sampled for
//! quick routines or for expensive ones; and, after a group has run, criterion's own estimate
//! of each function's time, from which the bench prints its throughputs and ratios
//! (mend/floor) in the words docs/src/benchmarks.md quotes. Each bench decides what to run and how to
//! word its lines; this module does not know what a floor is.
//!
//! The ratios are criterion's numbers of the same run, not a second measurement: when a group
//! finishes, [`Group::finish`] reads the `median` point estimate that criterion saved for each
//! of its functions in `<output>/<group>/<function>/new/estimates.json` (the median of the
//! samples' per-iteration times: a hiccup of a shared 2-core machine moves it least, as the old
//! "best of N" meant to). Criterion's own `time:` line shows the mean (or, when it sampled
//! linearly, the slope), so it differs a little from the printed ratios' inputs. The output
//! directory is criterion's usual one, set explicitly so that this code knows it:
//! `$CRITERION_HOME`, else `<target>/criterion`. An estimate is used only if this run wrote it:
//! in test mode (`cargo test --benches`, `cargo bench -- --test`), for a function a filter left
//! out, and with `--discard-baseline` or `--load-baseline` there is none, and the bench says so
//! instead of printing a ratio. `--save-baseline NAME` and `--baseline NAME` work as usual
//! (criterion writes `new/` in both cases).
//!
//! The lines are printed together at the end ([`Bench::finish`]), after criterion's own
//! report, so that the block docs/src/benchmarks.md quotes is one block.
//!
//! A group's sampling ([`Sampling`]) sets sample size, warm-up and measurement time, except
//! those given on the command line (`cargo bench ... -- --sample-size 20 --measurement-time
//! 30`), which win, so a bench can be made bigger or smaller without editing it.
//!
//! `cli/benches/serve.rs` includes this file by `#[path]`: a bench of mend-cli cannot depend on
//! the mend-tests library, which depends on mend-cli.

// Each bench uses the part it needs.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use criterion::measurement::WallTime;
use criterion::{Bencher, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};

/// Criterion, configured from the command line, and the lines the bench prints at the end.
pub struct Bench {
    criterion: Criterion,
    output: PathBuf,
    lines: Vec<String>,
}

impl Bench {
    pub fn from_args() -> Bench {
        // Criterion's own default, named here so that the estimates can be read back.
        let output = std::env::var_os("CRITERION_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .parent()
                    .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
                    .join("criterion")
            });
        let criterion = Criterion::default()
            .output_directory(&output)
            .configure_from_args();
        Bench {
            criterion,
            output,
            lines: Vec::new(),
        }
    }

    /// A group named `name` (its directory under the output directory), sampled as `sampling`.
    pub fn group(&mut self, name: &str, sampling: Sampling) -> Group<'_> {
        let mut group = Group {
            inner: self.criterion.benchmark_group(name),
            name: name.to_string(),
            output: &self.output,
            lines: &mut self.lines,
            began: SystemTime::now(),
            functions: Vec::new(),
        };
        group.sampling(sampling);
        group
    }

    /// Adds a line to the block printed at the end.
    pub fn report(&mut self, line: impl Into<String>) {
        self.lines.push(line.into());
    }

    /// Criterion's closing summary, then every line the bench reported.
    pub fn finish(self) {
        self.criterion.final_summary();
        if !self.lines.is_empty() {
            println!();
            println!(
                "mend's numbers (criterion's median estimates of this run, unless a line says otherwise):"
            );
            for line in &self.lines {
                println!("{line}");
            }
        }
    }
}

/// How a group samples.
#[derive(Debug, Clone, Copy)]
pub enum Sampling {
    /// For routines of microseconds to a few milliseconds: criterion's own choice of iteration
    /// counts over 100 samples, after a 1 s warm-up, for `measurement`.
    Quick { measurement: Duration },
    /// For routines of tens of milliseconds to seconds, usually with their own setup outside
    /// the timed part (`iter_custom`): 10 samples of the same iteration count
    /// (`SamplingMode::Flat`) within `measurement` of timed work, after one warm-up iteration.
    /// Criterion runs `ceil(measurement / 10 / time of one)` iterations per sample; when that
    /// is 1 it warns that it cannot complete 10 samples in `measurement`, which here only
    /// means one iteration per sample.
    Expensive { measurement: Duration },
}

/// A criterion group whose estimates are read back when it finishes.
pub struct Group<'a> {
    inner: BenchmarkGroup<'a, WallTime>,
    name: String,
    output: &'a Path,
    lines: &'a mut Vec<String>,
    began: SystemTime,
    functions: Vec<String>,
}

impl<'a> Group<'a> {
    /// Sampling for the functions benched from now on.
    pub fn sampling(&mut self, sampling: Sampling) -> &mut Self {
        let (mode, samples, warm_up, measurement) = match sampling {
            Sampling::Quick { measurement } => {
                (SamplingMode::Auto, 100, Duration::from_secs(1), measurement)
            }
            // A warm-up shorter than one iteration is exactly one iteration.
            Sampling::Expensive { measurement } => (
                SamplingMode::Flat,
                10,
                Duration::from_millis(1),
                measurement,
            ),
        };
        self.inner.sampling_mode(mode);
        if !given_on_command_line("--sample-size") {
            self.inner.sample_size(samples);
        }
        if !given_on_command_line("--warm-up-time") {
            self.inner.warm_up_time(warm_up);
        }
        if !given_on_command_line("--measurement-time") {
            self.inner.measurement_time(measurement);
        }
        self
    }

    /// What one iteration of the functions benched from now on processes.
    pub fn throughput(&mut self, throughput: Throughput) -> &mut Self {
        self.inner.throughput(throughput);
        self
    }

    /// Benches `f` as `id`: a function name, or `function/parameter`.
    pub fn bench(&mut self, id: &str, f: impl FnMut(&mut Bencher<'_, WallTime>)) -> &mut Self {
        match id.split_once('/') {
            Some((function, parameter)) => {
                self.inner
                    .bench_function(BenchmarkId::new(function, parameter), f);
            }
            None => {
                self.inner.bench_function(id, f);
            }
        }
        self.functions.push(id.to_string());
        self
    }

    /// Ends the group (criterion's summary of it) and reads back what it estimated.
    pub fn finish(self) -> Estimates<'a> {
        let Group {
            inner,
            name,
            output,
            lines,
            began,
            functions,
        } = self;
        inner.finish();
        let mut times = BTreeMap::new();
        let mut missing = Vec::new();
        for function in functions {
            match median_written_since(output, &name, &function, began) {
                Some(time) => {
                    times.insert(function, time);
                }
                None => missing.push(function),
            }
        }
        Estimates {
            group: name,
            times,
            missing,
            lines,
        }
    }
}

/// Criterion's estimates of one group's functions, and the bench's report to add lines to.
pub struct Estimates<'a> {
    group: String,
    times: BTreeMap<String, Duration>,
    missing: Vec<String>,
    lines: &'a mut Vec<String>,
}

impl Estimates<'_> {
    /// The median time of one iteration of `id`, if this run estimated it.
    pub fn time(&self, id: &str) -> Option<Duration> {
        self.times.get(id).copied()
    }

    /// Reports the lines `lines` makes from the estimates, if criterion estimated every
    /// function of the group in this run; otherwise a line saying which it did not.
    pub fn report(self, lines: impl FnOnce(&Times) -> Vec<String>) {
        if self.missing.is_empty() {
            let times = Times(self.times);
            self.lines.extend(lines(&times));
        } else {
            self.lines.push(format!(
                "{}: no estimate of {} in this run (test mode, a filter, --discard-baseline or \
                 --load-baseline); its numbers are not printed",
                self.group,
                self.missing.join(", ")
            ));
        }
    }
}

/// Every function's median time per iteration, by id.
#[derive(Debug)]
pub struct Times(BTreeMap<String, Duration>);

impl std::ops::Index<&str> for Times {
    type Output = Duration;

    fn index(&self, id: &str) -> &Duration {
        self.0
            .get(id)
            .unwrap_or_else(|| panic!("no function {id:?} was benched in this group"))
    }
}

/// Items per second, for `items` processed in `time`.
pub fn per_second(items: usize, time: Duration) -> f64 {
    items as f64 / time.as_secs_f64()
}

pub fn millis(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

pub fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}

/// Whether criterion runs each benchmark once instead of measuring it (`cargo test --benches`,
/// or `cargo bench -- --test`), by the same rule criterion applies to the arguments: then a
/// bench shrinks what it sets up before its groups.
pub fn test_mode() -> bool {
    let mut bench = false;
    let mut test = false;
    for argument in std::env::args().skip(1) {
        bench |= argument == "--bench";
        test |= argument == "--test";
    }
    test || !bench
}

fn given_on_command_line(flag: &str) -> bool {
    std::env::args().any(|argument| {
        argument == flag
            || argument
                .strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// The median point estimate criterion wrote for `group/function` at or after `since`.
fn median_written_since(
    output: &Path,
    group: &str,
    function: &str,
    since: SystemTime,
) -> Option<Duration> {
    let mut path = output.join(directory_name(group));
    for part in function.splitn(2, '/') {
        path.push(directory_name(part));
    }
    path.push("new");
    path.push("estimates.json");
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < since {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let estimates: serde_json::Value = serde_json::from_str(&text).ok()?;
    // Nanoseconds per iteration, for criterion's wall-time measurement.
    let nanos = estimates["median"]["point_estimate"].as_f64()?;
    Some(Duration::from_secs_f64(nanos / 1e9))
}

/// The directory criterion names an id part by (`make_filename_safe` in criterion's report.rs).
fn directory_name(part: &str) -> String {
    const MAX_LENGTH: usize = 64;
    let mut name: String = part
        .chars()
        .map(|c| match c {
            '?' | '"' | '/' | '\\' | '*' | '<' | '>' | ':' | '|' | '^' => '_',
            c => c,
        })
        .collect();
    if name.len() > MAX_LENGTH {
        let mut end = MAX_LENGTH;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        name.truncate(end);
    }
    name
}
