//! Fuzzes the workload and fault-schedule parsers with proptest: random
//! mutations of the real files (lines dropped, duplicated or swapped, values
//! replaced by random tokens, random characters inserted) and random text.
//! Every input must give `Ok` or a one-line error: never a panic. Runs a
//! fixed number of cases, `FUZZ_CASES` (default 4096, so CI is quick and
//! every run does the same work; docs/testing.md says how to run a million);
//! a failing case is shrunk and persisted in
//! `tests/fuzz_parsers.proptest-regressions`, which every later run replays
//! first (commit it with the fix).

use plbbench::core::faults::{self, Timeline};
use plbbench::core::workload::Workload;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use std::time::Instant;

const WORKLOAD: &str = include_str!("../workloads/analytics.toml");
const TL: Timeline = Timeline { replicas: 5, ramp_s: 60.0, baseline_s: 30.0, duration_s: 300.0 };

#[derive(Clone, Debug)]
enum Edit {
    Drop(usize),
    Dup(usize),
    Swap(usize, usize),
    Value(usize, String),
    Insert(usize, usize, char),
}

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| v.to_string()),
        Just("\"r0\"".into()),
        Just("\"rejoin\"".into()),
        Just("[[event]]".into()),
        Just("nan".into()),
        Just("inf".into()),
        Just("-0.0".into()),
        "[ -~]{0,12}",
        "\\PC{0,8}",
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(
        prop_oneof![
            any::<usize>().prop_map(Edit::Drop),
            any::<usize>().prop_map(Edit::Dup),
            (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Edit::Swap(a, b)),
            (any::<usize>(), token()).prop_map(|(a, t)| Edit::Value(a, t)),
            (any::<usize>(), any::<usize>(), any::<char>()).prop_map(|(a, b, c)| Edit::Insert(a, b, c)),
        ],
        0..8,
    )
}

fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for e in edits {
        if lines.is_empty() {
            break;
        }
        let n = lines.len();
        match e {
            Edit::Drop(i) => {
                lines.remove(i % n);
            }
            Edit::Dup(i) => lines.insert(i % n, lines[i % n].clone()),
            Edit::Swap(a, b) => lines.swap(a % n, b % n),
            Edit::Value(i, t) => {
                let l = &mut lines[i % n];
                if let Some(eq) = l.find('=') {
                    l.truncate(eq + 1);
                    l.push(' ');
                    l.push_str(t);
                }
            }
            Edit::Insert(i, at, c) => {
                let l = &mut lines[i % n];
                let chars: Vec<char> = l.chars().collect();
                let at = at % (chars.len() + 1);
                *l = chars[..at].iter().chain(std::iter::once(c)).chain(chars[at..].iter()).collect();
            }
        }
    }
    lines.join("\n")
}

fn check_one_line(r: Result<(), String>) -> Result<(), TestCaseError> {
    if let Err(msg) = r {
        prop_assert!(!msg.contains('\n'), "multi-line error: {msg:?}");
        prop_assert!(!msg.is_empty());
    }
    Ok(())
}

#[test]
fn parsers_never_panic_and_errors_are_one_line() {
    let cases: u32 = std::env::var("FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(4096);
    let fault_base = faults::preset("cascade").unwrap();
    let input = (edits(), edits(), "\\PC{0,200}");
    let t = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    });
    runner
        .run(&input, |(we, fe, random)| {
            check_one_line(Workload::parse(&mutate(WORKLOAD, &we)).map(|_| ()).map_err(|e| e.to_string()))?;
            check_one_line(faults::parse(&mutate(fault_base, &fe), TL).map(|_| ()).map_err(|e| e.to_string()))?;
            check_one_line(Workload::parse(&random).map(|_| ()).map_err(|e| e.to_string()))?;
            check_one_line(faults::parse(&random, TL).map(|_| ()).map_err(|e| e.to_string()))?;
            Ok(())
        })
        .unwrap();
    eprintln!("fuzzed {} inputs per parser kind in {:.1} s", u64::from(cases) * 2, t.elapsed().as_secs_f64());
}
