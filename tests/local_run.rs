//! Run tier (design.md §8): `plbbench run --cluster local` end to end, through
//! the real binary against real PostgreSQL servers. Each run gets a private
//! `PLBBENCH_STATE_DIR` in a temporary sandbox (so its cluster lives in the
//! sibling `run` directory there), is bounded in time (the child is killed
//! and the test fails after a generous limit), and is checked from its files
//! and from the process and cgroup tables, independently of the code under
//! test:
//!
//! - a time-scaled `premium-fault` run writes the whole run folder, every
//!   measured phase has completed queries of both classes, and its files
//!   agree with each other (accounting, one replica per session, no query
//!   recorded twice);
//! - the router stops sending new sessions to r1 once it detects the Down
//!   and uses r1 again after detecting the Rejoin;
//! - the Down really breaks open sessions (connection errors on r1 only);
//! - nothing (process, state directory, cgroup) outlives the run;
//! - SIGINT and SIGTERM end a run within 10 s with a partial but consistent
//!   run folder and the same cleanup, and a second signal stops at once;
//! - an overloaded run (sessions time out connecting in the baseline) still
//!   writes its folder and cleans up, then exits 1 naming each failed
//!   validity check, with the red banner at the top of report.html;
//! - a SIGKILLed run leaves its cluster, and the next plbbench command (any
//!   of them) removes it: servers, cgroups and state directory.
//!
//! Needs PostgreSQL's server binaries (scripts/install-postgres.sh installs
//! them); set `PLBBENCH_SKIP_PG=1` to skip on a machine without them. The
//! runs take one at a time (see [`serial`]); together about 5 minutes.

mod common;
use common::have_postgres;
use common::run::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use serde_json::Value;

// ----- (b) detection and routing, as a pure check -----

/// Margin after the down-detection for sessions admitted just before it.
const ADMIT_MARGIN_S: f64 = 0.05;

/// What [`check_routing`] found.
#[derive(Debug)]
struct Routing {
    down_detected: f64,
    up_detected: f64,
    sessions_on_r1_after_up: usize,
}

/// Check (b) on a run's events, queries and replica samples: the Down of r1
/// is detected, no session whose first query starts after that detection
/// (plus [`ADMIT_MARGIN_S`]) and before the up-detection runs on r1, r1's
/// router-side session count never grows in that window, and r1 is not
/// detected up before its Rejoin. Pure, so it is itself tested below.
fn check_routing(events: &[Row], queries: &[Query], replicas: &[Row]) -> Result<Routing, String> {
    let at = |kind: &str, pred: &dyn Fn(&str) -> bool, after: f64| {
        events
            .iter()
            .filter(|e| e["kind"] == kind && e["replica"] == "r1" && pred(&e["detail"]))
            .map(|e| num(e, "t_s"))
            .find(|t| *t >= after)
    };
    let down = at("fault", &|d| d == "Down", 0.0).ok_or("no `fault,r1,Down` row")?;
    let rejoin = at("fault", &|d| d == "Rejoin", down).ok_or("no `fault,r1,Rejoin` after the Down")?;
    // The router's belief at the Down: a false down-detection just before it
    // (a probe timing out on a saturated replica) with no up since counts.
    let before = events
        .iter()
        .rfind(|e| e["kind"] == "detect" && e["replica"] == "r1" && num(e, "t_s") < down)
        .filter(|e| e["detail"].starts_with("down ("))
        .map(|e| num(e, "t_s"));
    let dd = before
        .or_else(|| at("detect", &|d| d.starts_with("down ("), down))
        .ok_or("the Down of r1 was never detected")?;
    if dd > rejoin {
        return Err(format!("r1 detected down at {dd} s, after its Rejoin at {rejoin} s"));
    }
    let du = at("detect", &|d| d == "up (probe)", dd).ok_or("no `detect,r1,up (probe)` after the down-detection")?;
    if du < rejoin {
        return Err(format!("r1 detected up at {du} s while down (Rejoin at {rejoin} s)"));
    }
    let mut first: BTreeMap<u64, &Query> = BTreeMap::new();
    for q in queries {
        let e = first.entry(q.session).or_insert(q);
        if q.start < e.start {
            *e = q;
        }
    }
    let starts_on_r1 = |from: f64, to: f64| -> Vec<&Query> {
        first.values().filter(|q| q.replica == "r1" && q.start > from && q.start < to).copied().collect()
    };
    let bad = starts_on_r1(dd + ADMIT_MARGIN_S, du);
    if !bad.is_empty() {
        return Err(format!("sessions started on r1 while the router knew it down ({dd}..{du} s): {bad:?}"));
    }
    let active: Vec<(f64, u64)> = replicas
        .iter()
        .filter(|r| r["replica"] == "r1" && num(r, "t_s") > dd && num(r, "t_s") < du)
        .map(|r| (num(r, "t_s"), r["active_p"].parse::<u64>().unwrap() + r["active_f"].parse::<u64>().unwrap()))
        .collect();
    if let Some(w) = active.windows(2).find(|w| w[1].1 > w[0].1) {
        return Err(format!("r1's active sessions grew while known down: {:?} -> {:?}", w[0], w[1]));
    }
    let after_up = starts_on_r1(du, f64::INFINITY).len();
    Ok(Routing { down_detected: dd, up_detected: du, sessions_on_r1_after_up: after_up })
}

#[test]
fn routing_check_catches_misrouted_sessions() {
    let row = |pairs: &[(&str, &str)]| -> Row { pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect() };
    let ev =
        |t: &str, kind: &str, detail: &str| row(&[("t_s", t), ("kind", kind), ("replica", "r1"), ("detail", detail)]);
    let events = vec![
        ev("12.0", "fault", "Down"),
        ev("12.3", "detect", "down (probe after connection error)"),
        ev("21.0", "fault", "Rejoin"),
        ev("22.5", "detect", "up (probe)"),
    ];
    let q = |session, replica: &str, start| Query {
        session,
        class: "F".into(),
        replica: replica.into(),
        intended: start,
        start,
        end: start + 0.1,
        ok: true,
        error: String::new(),
    };
    let sample = |t: &str, a: &str| row(&[("t_s", t), ("replica", "r1"), ("active_p", "0"), ("active_f", a)]);
    let good = vec![q(1, "r1", 11.0), q(1, "r1", 12.31), q(2, "r2", 15.0), q(3, "r1", 23.0)];
    let samples = vec![sample("13.0", "4"), sample("14.0", "1"), sample("15.0", "0")];
    let r = check_routing(&events, &good, &samples).unwrap();
    assert_eq!((r.down_detected, r.up_detected, r.sessions_on_r1_after_up), (12.3, 22.5, 1));
    // A session first seen on r1 in the window (here right after the restart
    // but before the up-detection) is misrouted.
    let mut bad = good.clone();
    bad.push(q(4, "r1", 21.8));
    assert!(check_routing(&events, &bad, &samples).unwrap_err().contains("while the router knew it down"));
    // Admissions to r1 while known down show in the router's counts.
    let grew = vec![sample("13.0", "4"), sample("14.0", "1"), sample("15.0", "2")];
    assert!(check_routing(&events, &good, &grew).unwrap_err().contains("grew"));
    // An up-detection before the Rejoin is a false one.
    let mut early = events.clone();
    early.insert(2, ev("18.0", "detect", "up (probe)"));
    assert!(check_routing(&early, &good, &samples).unwrap_err().contains("while down"));
    let undetected: Vec<Row> = events.iter().filter(|e| e["kind"] != "detect").cloned().collect();
    assert!(check_routing(&undetected, &good, &samples).unwrap_err().contains("never detected"));
}

// ----- (a), (b), (c), (e): one time-scaled premium-fault run -----

/// The shared run's result: its folder and what was seen around it.
struct FaultRun {
    status: ExitStatus,
    stderr: String,
    folder: Option<Folder>,
    seen: Observed,
    /// Processes in the sandbox, and whether `run` exists, right after exit.
    left: Vec<(u32, String)>,
    run_dir_left: bool,
    cgroups_left: Vec<PathBuf>,
    /// The `--stream` file as the run left it.
    stream: String,
}

/// `premium-fault` at `--time-scale 0.2` with the default T=1000: a 60 s
/// run (ramp 12 s, baseline 18-24 s, Down r1 at 24 s, Rejoin at 42 s).
///
/// T is not scaled down: the workload is sized at T=1000 (rr-split's
/// Freemium pair at 70% of its budget) and a client's first session comes
/// after an exponential think of ~116 s, so fewer clients would leave a short run
/// nearly idle and the Down would break few sessions. 0.2 rather than 0.1:
/// at 0.1 the Down lands 6 s after the ramp, when only ~half as many
/// sessions are open and the replicas are far from saturated; then health
/// probes answer at once, and a race that shows under the real load (a
/// probe that succeeded just before the kill, applied after the
/// connection error that detected it, marks r1 up again while it is dead)
/// almost never happens, so check (b) would pass on a broken detector.
/// 0.2 also leaves 16 s after the Rejoin for sessions to return to r1.
/// Probes stay at 1 s (not scaled), so detection takes as long as in a
/// full run.
fn fault_run() -> &'static FaultRun {
    static RUN: OnceLock<FaultRun> = OnceLock::new();
    RUN.get_or_init(|| {
        let _one = serial();
        let sb = Sandbox::new("fault");
        let stream = sb.root.join("stream.ndjson");
        let stream_arg = stream.to_str().unwrap().to_string();
        let mut run = Running::start(
            &sb,
            "premium-fault",
            &["--time-scale", "0.2", "--raw", "--progress", "lines", "--stream", &stream_arg],
        );
        let status = run.finish(RUN_LIMIT);
        let wall = run.started.elapsed();
        let ids: BTreeSet<String> = run
            .seen
            .cgroups
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n.starts_with("plbbench-"))
            .collect();
        let out = FaultRun {
            status,
            stderr: sb.stderr(),
            folder: sb.out().join("summary.json").exists().then(|| Folder::read(&sb.out())),
            left: processes_in(&sb.root),
            run_dir_left: sb.run_dir().exists(),
            cgroups_left: ids.iter().flat_map(|id| cgroups_named(id)).collect(),
            seen: std::mem::take(&mut run.seen),
            stream: std::fs::read_to_string(&stream).unwrap_or_default(),
        };
        eprintln!("premium-fault run at time scale 0.2 took {:.1} s", wall.as_secs_f64());
        out
    })
}

/// The shared run's folder, after checking that the run succeeded.
fn fault_folder() -> Option<&'static Folder> {
    if !have_postgres() {
        return None;
    }
    let run = fault_run();
    assert!(run.status.success(), "plbbench run failed ({}):\n{}", run.status, run.stderr);
    Some(run.folder.as_ref().expect("no run folder"))
}

#[test]
fn fault_run_writes_a_complete_consistent_folder() {
    let Some(f) = fault_folder() else { return };
    let s = &f.summary;
    assert_eq!(s["partial"], Value::Bool(false));
    let env = &s["environment"];
    assert!(env["postgres_version"].as_str().is_some_and(|v| v.starts_with("PostgreSQL ")), "{env}");
    assert!(env["cpu_budget_enforced"].is_boolean(), "{env}");
    assert_eq!((s["settings"]["time_scale"].as_f64(), s["settings"]["clients"].as_u64()), (Some(0.2), Some(1000)));
    let names: Vec<&str> = f.phases.iter().map(|r| r["phase"].as_str()).collect();
    for want in ["warmup", "baseline", "down1", "rejoin1"] {
        assert!(names.contains(&want), "phases: {names:?}");
    }
    for r in f.phases.iter().filter(|r| r["phase"] != "warmup") {
        assert!(num(r, "completed") > 0.0, "no completed {} queries in {}: {r:?}", r["class"], r["phase"]);
        // Login waits (issue 48): every phase logs sessions in on the real cluster.
        let (p50, p95, max) = (num(r, "login_p50_ms"), num(r, "login_p95_ms"), num(r, "login_max_ms"));
        assert!(0.0 < p50 && p50 <= p95 && p95 <= max && max < 120_000.0, "login waits: {r:?}");
    }
    assert!(f.series.iter().all(|r| !r["logins_waiting"].is_empty()), "timeseries.csv has logins_waiting");
    assert_consistent(f);
    assert_sessions_well_formed(&f.queries);
    let secs = f.series.iter().map(|r| num(r, "t_s")).fold(0.0, f64::max);
    assert!((59.0..=60.0).contains(&secs), "timeseries ends at {secs} s");
    let names: BTreeSet<&str> = f.replicas.iter().map(|r| r["replica"].as_str()).collect();
    assert_eq!(names.len(), K, "replicas.csv names {names:?}");
    assert_eq!(f.replicas.len() % K, 0, "replicas.csv: a sample without every replica");
    let run = fault_run();
    assert_eq!(env["cpu_budget_enforced"].as_bool(), Some(!run.seen.cgroups.is_empty()), "{:?}", run.seen);
    // The saturation guard's block (docs/manual.md, "Run validity checks"); whether it is saturated
    // depends on the machine, tests/generator_guard.rs checks the verdict.
    let g = &s["generator"];
    assert!(g["saturated"].is_boolean() && g["lag_samples"].as_u64().is_some_and(|n| n > 100), "{g}");
    assert!(s["verdicts"].as_array().unwrap().iter().any(|v| v["name"] == "generator not saturated"), "{s}");
    // --progress lines: a status line every 5 s of the 60 s run, each with
    // both classes' goodput and the replicas up.
    let status: Vec<&str> = run.stderr.lines().filter(|l| l.contains("/60 s  P ")).collect();
    assert!((10..=13).contains(&status.len()), "{} status lines:\n{}", status.len(), run.stderr);
    assert!(
        status.iter().all(|l| l.starts_with("plbbench: ") && l.contains(" q/s p95 ") && l.contains("  up ")),
        "{status:?}"
    );
    assert!(status.iter().any(|l| l.contains("up 4/5")), "the Down of r1 shows: {status:?}");
    assert!(status.iter().all(|l| l.contains("  logins waiting P ")), "{status:?}");
    // --stream: a line per second whose completed queries are exactly the
    // folder's (the collector, not task scheduling, decides what counts).
    let lines: Vec<Value> = run.stream.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.first().map(|l| l["type"].clone()), Some(Value::from("run")), "{}", run.stream);
    assert_eq!(lines.len(), 61, "the run line and one per second of the 60 s run");
    for class in ["P", "F"] {
        let streamed: f64 = lines[1..]
            .iter()
            .flat_map(|l| l["classes"].as_array().unwrap().iter().filter(|c| c["class"] == class))
            .map(|c| c["completed"].as_f64().unwrap())
            .sum();
        let total: f64 = f.phases.iter().filter(|r| r["class"] == class).map(|r| num(r, "completed")).sum();
        assert_eq!(streamed, total, "class {class}");
    }
    let r1_down = |l: &Value| l["replicas"][0]["up"] == Value::Bool(false);
    assert!(lines[1..].iter().any(r1_down), "the Down of r1 shows in the stream");
}

#[test]
fn fault_run_stops_routing_to_r1_while_detected_down() {
    let Some(f) = fault_folder() else { return };
    let r = check_routing(&f.events, &f.queries, &f.replicas).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{r:?}");
    let down = f.events_of("fault", "r1").first().map(|e| e.0).unwrap();
    assert!(r.down_detected - down < 2.5, "detection took {} s (probe interval 1 s)", r.down_detected - down);
    assert!(r.sessions_on_r1_after_up > 0, "no session ran on r1 after it was detected up at {} s", r.up_detected);
    // The replica really was down: the backend's own view in replicas.csv.
    let rejoin = f.events_of("fault", "r1").iter().find(|e| e.1 == "Rejoin").unwrap().0;
    for row in f.replicas.iter().filter(|x| x["replica"] == "r1") {
        let t = num(row, "t_s");
        if t > down + 1.0 && t < rejoin {
            assert_eq!(row["up"], "false", "r1 up at {t} s");
        }
    }
}

#[test]
fn fault_run_down_breaks_open_sessions_on_r1_only() {
    let Some(f) = fault_folder() else { return };
    let down = f.events_of("fault", "r1").first().map(|e| e.0).unwrap();
    let broken: u64 = ["P", "F"]
        .iter()
        .map(|c| {
            let a = f.account(c);
            let n = |k: &str, why: &str| -> u64 {
                a[k].as_array().unwrap().iter().filter(|x| x[0] == why).map(|x| x[1].as_u64().unwrap()).sum()
            };
            n("aborts", "connection lost") + n("aborts", "connect refused") + n("errors", "connection lost")
        })
        .sum();
    assert!(broken > 0, "r1's Down broke no session: {}", f.summary["accounting"]);
    let lost: Vec<&Query> = f.queries.iter().filter(|q| q.error == "connection lost").collect();
    assert!(lost.iter().any(|q| q.replica == "r1"), "no query on r1 lost its connection");
    for q in lost {
        assert!(q.replica == "r1" && q.end >= down, "connection lost outside r1's Down: {q:?}");
    }
}

#[test]
fn fault_run_leaves_nothing_behind() {
    if fault_folder().is_none() {
        return;
    }
    let run = fault_run();
    assert!(run.left.is_empty(), "processes left running: {:?}", run.left);
    assert!(!run.run_dir_left, "the run's cluster directory was left behind");
    assert!(run.cgroups_left.is_empty(), "cgroups left behind: {:?}", run.cgroups_left);
    let enforced = run.folder.as_ref().unwrap().summary["environment"]["cpu_budget_enforced"].as_bool().unwrap();
    assert_eq!(!run.seen.cgroups.is_empty(), enforced, "cgroups seen: {:?}", run.seen.cgroups);
}

// ----- (d): interrupted runs -----

/// Starts `preset` at `--time-scale 0.2` (60 s; premium-fault: baseline
/// 18-24 s, Down r1 at 24 s, Rejoin at 42 s; 0.2 rather than 0.1 so that a
/// signal at mid-run lands after the Down with whole phases before it), sends
/// `signals` (`(delay, signal)`: the first delay counted from when all five
/// replicas run, the next from the previous signal), with `extra` run
/// arguments, and checks exit time,
/// the partial folder and cleanup. Returns the folder and each signal's
/// note time in the run's clock.
fn interrupted(tag: &str, preset: &str, extra: &[&str], signals: &[(Duration, Signal)]) -> Option<(Folder, Vec<f64>)> {
    if !have_postgres() {
        return None;
    }
    let _one = serial();
    let sb = Sandbox::new(tag);
    let args: Vec<&str> = ["--time-scale", "0.2", "--raw"].iter().chain(extra).copied().collect();
    let mut run = Running::start(&sb, preset, &args);
    if let Some(st) = run.poll(RUN_LIMIT, |o| o.replicas_up.is_some()) {
        panic!("run exited ({st}) before its cluster was up:\n{}", sb.stderr());
    }
    let mut sent: Vec<Instant> = Vec::new();
    for (delay, sig) in signals {
        let from = sent.last().copied().unwrap_or_else(|| run.seen.replicas_up.unwrap());
        if let Some(st) = run.poll(RUN_LIMIT, |_| from.elapsed() >= *delay) {
            panic!("run exited ({st}) before signal {sig}:\n{}", sb.stderr());
        }
        kill(run.pid(), *sig).unwrap();
        sent.push(Instant::now());
    }
    let first = sent[0];
    let status = run.finish(first.duration_since(run.started) + Duration::from_secs(60));
    let took = first.elapsed();
    eprintln!("{tag}: exited {:.1} s after the first signal ({status})", took.as_secs_f64());
    assert!(status.code().is_some(), "killed by a signal instead of stopping: {status}\n{}", sb.stderr());
    // 128 + the first signal's number, as a shell reports a killed program
    // (130 SIGINT, 143 SIGTERM), though the folder was written.
    let want = 128 + signals[0].1 as i32;
    assert_eq!(status.code(), Some(want), "exit status after {}:\n{}", signals[0].1, sb.stderr());
    assert!(sb.stderr().contains(&format!("interrupted by {}", signals[0].1)), "stderr:\n{}", sb.stderr());
    assert!(took <= EXIT_AFTER_SIGNAL, "took {took:?} to exit after the signal");
    let f = Folder::read(&sb.out());
    assert_eq!(f.summary["partial"], Value::Bool(true));
    assert_consistent(&f);
    assert_sessions_well_formed(&f.queries);
    let enforced = f.summary["environment"]["cpu_budget_enforced"].as_bool().expect("cpu_budget_enforced");
    assert_cleaned_up(&sb, &run.seen, enforced);
    let notes: Vec<f64> = f.events_of("note", "").iter().map(|n| n.0).collect();
    assert_eq!(notes.len(), signals.len(), "one note per signal: {:?}", f.events_of("note", ""));
    for ((_, detail), (_, sig)) in f.events_of("note", "").iter().zip(signals) {
        assert!(detail.starts_with(sig.as_str()), "note {detail:?} for {sig}");
    }
    let in_flight: u64 = ["P", "F"].iter().map(|c| f.account(c)["sessions_in_flight"].as_u64().unwrap()).sum();
    assert!(in_flight > 0, "no session counted in flight at mid-run");
    Some((f, notes))
}

/// No query starts after the first signal (admissions and new queries stop;
/// 50 ms for one that had just passed the check).
fn assert_no_query_started_after(f: &Folder, t: f64) {
    let late: Vec<&Query> = f.queries.iter().filter(|q| q.start > t + 0.05).collect();
    assert!(late.is_empty(), "queries started after the signal at {t} s: {late:?}");
}

#[test]
fn sigint_mid_run_writes_a_partial_folder_and_cleans_up() {
    // The default workload's queries take milliseconds, so few would be in
    // flight at the signal: on a third of the default CPU budget (`--cpus
    // 0.1`, about the cluster's capacity at T=1000) each replica is
    // throttled most of every 100 ms period and queries wait in flight.
    let signals = [(Duration::from_secs(30), Signal::SIGINT)];
    let Some((f, notes)) = interrupted("sigint", "premium-fault", &["--cpus", "0.1"], &signals) else {
        return;
    };
    let t = notes[0];
    assert!(t > 25.0 && t < 40.0, "signal at {t} s in the run's clock");
    assert_no_query_started_after(&f, t);
    // Queries in flight at the signal may finish within the drain, and are
    // kept; none ends later.
    let drained = f.queries.iter().filter(|q| q.start <= t + 0.05 && q.end > t).count();
    assert!(drained > 0, "no query in flight at the signal was allowed to finish");
    let late: Vec<&Query> = f.queries.iter().filter(|q| q.end > t + DRAIN_S + 1e-6).collect();
    assert!(late.is_empty(), "queries recorded after the drain: {late:?}");
    let down1 = f.phases.iter().filter(|r| r["phase"] == "down1").map(|r| num(r, "completed")).sum::<f64>();
    assert!(down1 > 0.0, "the run was interrupted before its Down");
}

#[test]
fn sigterm_mid_run_writes_a_partial_folder_and_cleans_up() {
    let Some((f, notes)) = interrupted("sigterm", "premium-fault", &[], &[(Duration::from_secs(30), Signal::SIGTERM)])
    else {
        return;
    };
    assert_no_query_started_after(&f, notes[0]);
    let late: Vec<&Query> = f.queries.iter().filter(|q| q.end > notes[0] + DRAIN_S + 1e-6).collect();
    assert!(late.is_empty(), "queries recorded after the drain: {late:?}");
}

#[test]
fn second_signal_stops_at_once() {
    // The second signal comes 0.3 s into the 2 s drain; the run must not wait
    // for the rest of it. A drain lasts only while a query is in flight, and
    // the default workload's queries take milliseconds: so r1 is paused
    // (gray-pause: SIGSTOP at 24 s, SIGCONT at 42 s) when the first signal
    // comes at about 30 s, and its sessions' queries hang through the drain.
    let signals = [(Duration::from_secs(30), Signal::SIGINT), (Duration::from_millis(300), Signal::SIGTERM)];
    let Some((f, notes)) = interrupted("twice", "gray-pause", &[], &signals) else { return };
    assert_no_query_started_after(&f, notes[0]);
    let late: Vec<&Query> = f.queries.iter().filter(|q| q.end > notes[1] + 0.1).collect();
    assert!(late.is_empty(), "queries recorded after the second signal at {} s: {late:?}", notes[1]);
}

// ----- (f): an overloaded run fails its validity checks -----

/// T=3000 on replicas of a third of the default budget (`--cpus 0.1`):
/// about three times what the cluster can serve, without faults, at
/// `--time-scale 0.1` (a 30 s run, 24 s of baseline), with the default
/// workload's deadlines cut to 1 s to connect and 2 s per query so that
/// the growing queues show as time-outs within the run. Under `--checks
/// fail` the run writes its folder and cleans up, then exits 1 with one
/// stderr line per failed check; summary.json holds the failed verdicts
/// and report.html opens with the banner. About 45 s.
#[test]
fn overloaded_run_fails_its_checks_with_exit_1_and_a_banner() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("overload");
    let workload = sb.root.join("short-deadlines.toml");
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/analytics.toml")).unwrap();
    let short = text.replace("connect_timeout_ms = 10000", "connect_timeout_ms = 1000");
    let short = short.replace("query_timeout_ms = 30000", "query_timeout_ms = 2000");
    assert_ne!(short, text, "the default workload's deadlines moved");
    std::fs::write(&workload, short).unwrap();
    let args = ["--time-scale", "0.1", "--T", "3000", "--cpus", "0.1", "--checks", "fail"];
    let mut run = Running::start(&sb, "none", &[&args[..], &["--workload", workload.to_str().unwrap()]].concat());
    let status = run.finish(RUN_LIMIT);
    let err = sb.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("plbbench: check failed: ")).collect();
    for want in ["baseline steady: ", "time-outs: baseline "] {
        assert!(lines.iter().any(|l| l.starts_with(want)), "no `{want}` line:\n{err}");
    }
    assert!(err.contains("plbbench: error: the run failed "), "{err}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(sb.out().join("summary.json")).unwrap()).unwrap();
    let failed: Vec<&str> = s["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["ok"] == Value::Bool(false))
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(failed.len(), lines.len(), "one stderr line per failed verdict: {failed:?}\n{err}");
    assert!(failed.contains(&"baseline steady") && failed.contains(&"time-outs"), "{failed:?}");
    assert_eq!(s["settings"]["checks"], "fail");
    let timeouts: u64 = s["accounting"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| a["aborts"].as_array().unwrap())
        .filter(|r| r[0] == "connect timeout" || r[0] == "timeout")
        .map(|r| r[1].as_u64().unwrap())
        .sum();
    eprintln!("overloaded run: {timeouts} sessions timed out; failed checks {failed:?}");
    let html = std::fs::read_to_string(sb.out().join("report.html")).unwrap();
    let main = html.find("<main>").unwrap() + "<main>".len();
    let banner = html.find(r#"<div class="banner checks" id="failing-verdicts">"#).expect("no banner");
    assert_eq!(html[main..banner].trim(), "", "the banner is the top of the page");
    let banner = &html[banner..banner + html[banner..].find("</div>").unwrap()];
    assert!(banner.contains(&format!("FAILED {} OF", failed.len())) && banner.contains("<b>time-outs</b>"), "{banner}");
    let enforced = s["environment"]["cpu_budget_enforced"].as_bool().expect("cpu_budget_enforced");
    assert_cleaned_up(&sb, &run.seen, enforced);
}

/// SIGKILL runs no handler: the cluster outlives plbbench (its servers,
/// cgroups and state), and the next plbbench command, whatever it is,
/// finds the owner gone and removes all of it, saying so.
#[test]
fn sigkill_leaves_an_orphan_that_the_next_command_removes() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("sigkill");
    let mut run = Running::start(&sb, "none", &["--time-scale", "0.2"]);
    if let Some(st) = run.poll(RUN_LIMIT, |o| o.replicas_up.is_some()) {
        panic!("run exited ({st}) before its cluster was up:\n{}", sb.stderr());
    }
    kill(run.pid(), Signal::SIGKILL).unwrap();
    let status = run.finish(RUN_LIMIT);
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
    let cgroups = run.seen.cgroups.clone();
    assert!(!processes_in(&sb.run_dir()).is_empty(), "nothing outlived the SIGKILL: this test shows nothing");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .arg("roles")
        .env("PLBBENCH_STATE_DIR", sb.state_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("removed the cluster a killed plbbench left in"), "{err}");
    assert!(processes_in(&sb.run_dir()).is_empty(), "left: {:?}", processes_in(&sb.run_dir()));
    assert!(!sb.run_dir().exists(), "the state directory is still there");
    for cg in cgroups {
        assert!(!cg.exists(), "cgroup {} is still there", cg.display());
    }
}

/// A class starved on purpose on the real cluster fails the progress check
/// (design.md §4, revised 2026-12-06): the paper's workload at T=100 under
/// 3RR+2RR, whose three Premium replicas are all paused (SIGSTOP) halfway
/// through a run at time scale 0.2 (60 s): Premium's open sessions hang,
/// its new ones find no replica, and it completes nothing for the last 36
/// s while Freemium goes on. The run exits 1 naming Premium in the
/// progress check, and Freemium is not named. About 75 s.
#[test]
fn a_starved_class_fails_the_progress_check_on_the_real_cluster() {
    if !have_postgres() {
        return;
    }
    let _one = serial();
    let sb = Sandbox::new("starved");
    let faults = sb.root.join("premium-paused.toml");
    let events: String = ["r1", "r2", "r3"]
        .iter()
        .map(|r| format!("[[event]]\nt_s = 120\nreplica = \"{r}\"\naction = \"pause\"\n\n"))
        .collect();
    std::fs::write(&faults, events).unwrap();
    let args = ["--time-scale", "0.2", "--T", "100", "--workload", "paper", "--checks", "fail"];
    let mut run = Running::start(&sb, faults.to_str().unwrap(), &[&args[..], &["--strategy", "rr-split"]].concat());
    let status = run.finish(RUN_LIMIT);
    let err = sb.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    let line = err.lines().find_map(|l| l.strip_prefix("plbbench: check failed: progress: ")).expect(&err);
    assert!(line.starts_with("P: no query completed for ") && !line.contains("F: "), "{line}");
    let starved: f64 = line["P: no query completed for ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(starved >= 25.0, "Premium starved for {starved} s: {line}");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(sb.out().join("summary.json")).unwrap()).unwrap();
    let progress =
        s["verdicts"].as_array().unwrap().iter().find(|v| v["name"] == "progress").expect("a progress verdict");
    assert_eq!(progress["ok"], Value::Bool(false));
    let enforced = s["environment"]["cpu_budget_enforced"].as_bool().expect("cpu_budget_enforced");
    assert_cleaned_up(&sb, &run.seen, enforced);
}
