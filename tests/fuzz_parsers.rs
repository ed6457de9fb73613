//! Fuzzes the workload and fault-schedule parsers with proptest: random
//! mutations of the real files (lines dropped, duplicated or swapped, values
//! replaced by random tokens, random characters inserted) and random text.
//! Every input must give `Ok` or a one-line error: never a panic. The
//! proxy's startup-packet parser gets random bytes and valid packets with
//! bytes flipped, cut or appended: it never panics, never claims more bytes
//! than it was given, and refuses only with a server's error; its SCRAM
//! exchange gets random and mutated client messages: never a panic, never
//! a login without the password's proof; the readers of a late-naming
//! client's first statements and of a server's login messages get random
//! text and bytes: never a panic, never more bytes claimed than given. Runs a
//! fixed number of cases, `FUZZ_CASES` (default 4096, so CI is quick and
//! every run does the same work; docs/testing.md says how to run a million);
//! a failing case is shrunk and persisted in
//! `tests/fuzz_parsers.proptest-regressions`, which every later run replays
//! first (commit it with the fix).

use plbbench::core::faults::{self, Timeline};
use plbbench::core::workload::Workload;
use plbbench::proxy::late_class;
use plbbench::proxy::scram::{self, Exchange, ScramError, Secret};
use plbbench::proxy::startup::{self, Startup};
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
    let fault_base = faults::preset("cascade").unwrap();
    let input = (edits(), edits(), "\\PC{0,200}");
    let t = Instant::now();
    let mut runner = fixed_runner();
    let cases = runner.config().cases;
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

/// A valid startup message with `params`.
fn startup_packet(params: &[(String, String)]) -> Vec<u8> {
    let mut body = (3u32 << 16).to_be_bytes().to_vec();
    for (k, v) in params {
        body.extend(k.bytes().chain([0]).chain(v.bytes()).chain([0]));
    }
    body.push(0);
    let mut p = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    p.extend(body);
    p
}

/// One packet's bytes: random, or a valid one with edits.
fn packet_bytes() -> impl Strategy<Value = Vec<u8>> {
    let name = "[a-z_]{0,12}";
    let params = prop::collection::vec((name, "\\PC{0,16}"), 0..6);
    let flips = prop::collection::vec((any::<usize>(), any::<u8>()), 0..4);
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        (params, flips, any::<usize>(), prop::collection::vec(any::<u8>(), 0..16)).prop_map(
            |(params, flips, cut, tail)| {
                let user = [("user".to_string(), "app".to_string())];
                let mut p = startup_packet(&user.into_iter().chain(params).collect::<Vec<_>>());
                for (i, b) in flips {
                    let n = p.len();
                    p[i % n] = b;
                }
                p.truncate(cut % (p.len() + 1) + p.len() / 2);
                p.extend(tail);
                p
            }
        ),
    ]
}

/// A runner of `FUZZ_CASES` cases (4096 by default) that replays and
/// saves failing cases in the regressions file.
fn fixed_runner() -> TestRunner {
    let cases: u32 = std::env::var("FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(4096);
    TestRunner::new(Config {
        cases,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    })
}

#[test]
fn the_startup_parser_never_panics_nor_overreads() {
    let mut runner = fixed_runner();
    runner
        .run(&packet_bytes(), |bytes| {
            match startup::parse(&bytes) {
                Ok(Some((packet, used))) => {
                    prop_assert!((8..=bytes.len()).contains(&used), "used {used} of {}", bytes.len());
                    if let Startup::Start { .. } = &packet {
                        prop_assert!(packet.param("user").is_some_and(|u| !u.is_empty()));
                    }
                }
                Ok(None) => prop_assert!(
                    bytes.len() < 4 || u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize > bytes.len()
                ),
                Err(e) => {
                    prop_assert!(["08P01", "0A000", "28000", "22021"].contains(&e.code()));
                    let reply = startup::fatal(e.code(), &e.to_string(), None);
                    prop_assert_eq!(reply.len(), 1 + u32::from_be_bytes(reply[1..5].try_into().unwrap()) as usize);
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A client's SCRAM messages: random bytes, or real ones with bytes
/// flipped, cut or appended.
fn scram_messages() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    let first = b"n,,n=,r=fyko+d2lbbFgONRv9qkxdawL".to_vec();
    let last = b"c=biws,r=fyko+d2lbbFgONRv9qkxdawLSERVER,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".to_vec();
    let mutated = move |m: Vec<u8>| {
        (any::<u16>(), any::<u8>(), 0usize..3).prop_map(move |(at, b, how)| {
            let mut m = m.clone();
            let at = at as usize % (m.len() + 1);
            match how {
                0 if at < m.len() => m[at] = b,
                1 => m.truncate(at),
                _ => m.insert(at, b),
            }
            m
        })
    };
    prop_oneof![
        (proptest::collection::vec(any::<u8>(), 0..64), proptest::collection::vec(any::<u8>(), 0..128)),
        (mutated(first.clone()), Just(last.clone())),
        (Just(first), mutated(last)),
    ]
}

#[test]
fn the_scram_exchange_never_panics_nor_lets_a_guess_in() {
    let mut runner = fixed_runner();
    let secret = Secret::from_password("pencil", b"0123456789abcdef", 64);
    runner
        .run(&scram_messages(), |(first, last)| {
            let _ = scram::initial_response(&first);
            if let Ok((ex, server_first)) = Exchange::start(Some(&secret), &first, "SERVER") {
                prop_assert!(server_first.starts_with("r="));
                let verdict = ex.finish(&last);
                prop_assert!(matches!(verdict, Err(ScramError::Failed | ScramError::Malformed(_))), "{verdict:?}");
            }
            Ok(())
        })
        .unwrap();
}

/// What a late-naming client may send first: random text, or `SET
/// application_name` statements with characters inserted or cut.
fn first_statements() -> impl Strategy<Value = String> {
    let real = "SET application_name = 'premium-web'; SELECT 1".to_string();
    prop_oneof![
        any::<String>(),
        (Just(real.clone()), 0..real.len(), any::<char>()).prop_map(|(s, at, c)| {
            let mut s = s;
            s.insert(at, c);
            s
        }),
        (Just(real), 0..46usize).prop_map(|(s, at)| s[..at].to_string()),
    ]
}

#[test]
fn the_late_class_readers_never_panic_nor_overread() {
    let mut runner = fixed_runner();
    runner
        .run(&(first_statements(), packet_bytes()), |(sql, bytes)| {
            if let late_class::Said::AppName(_) = late_class::said(&sql) {
                prop_assert!(late_class::may_be_set(sql.as_bytes()), "may_be_set misses {sql:?}");
            }
            let _ = late_class::sql_of(b'Q', &bytes);
            let _ = late_class::sql_of(b'P', &bytes);
            if let Some(Some((used, _))) = late_class::set_batch_answered(&bytes) {
                prop_assert!(used <= bytes.len());
            }
            if let Some(g) = late_class::greeting(&bytes) {
                prop_assert!(g.used <= bytes.len());
                if let Some(e) = &g.error {
                    let _ = late_class::error_of(e);
                }
                for p in &g.params {
                    let _ = late_class::param_of(p);
                }
            }
            Ok(())
        })
        .unwrap();
}
