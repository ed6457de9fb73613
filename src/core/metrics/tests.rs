//! The collector's tests: binning by phase and second, login books,
//! accounting, streaming.

use super::*;
use crate::core::model::{AbortReason, Action, ConnectError, FaultEvent, QueryError, Role};
use crate::core::phases::cut;

#[test]
fn a_second_is_written_one_second_after_it_ends() {
    assert_eq!(due_seconds(0, 0), 0..0);
    assert_eq!(due_seconds(0, 1), 0..0, "second 0 just ended: its last records may still be on the way");
    assert_eq!(due_seconds(0, 2), 0..1);
    assert_eq!(due_seconds(1, 5), 1..4, "a late sample catches up");
    assert_eq!(due_seconds(4, 3), 4..4, "never backwards");
}

fn collector() -> Collector {
    Collector::new(cut(&[], 2, 10.0, 5.0, 20.0), 2, 0.5, true)
}

fn q(end_s: f64, error: Option<QueryError>) -> QueryRecord {
    QueryRecord {
        session: 1,
        class: Class::P,
        replica: ReplicaId(0),
        intended_s: end_s - 0.1,
        start_s: end_s - 0.05,
        end_s,
        error,
    }
}

#[test]
fn login_waits_bin_by_completion_and_a_login_still_waiting_counts_by_its_age() {
    let mut c = collector();
    let login = |c: &mut Collector, class, intended_s, step| c.login(LoginRecord { class, intended_s, step });
    login(&mut c, Class::P, 1.0, LoginStep::Began);
    login(&mut c, Class::P, 1.0, LoginStep::LoggedIn(3.0));
    login(&mut c, Class::F, 5.0, LoginStep::Began);
    login(&mut c, Class::P, 12.0, LoginStep::Began);
    login(&mut c, Class::P, 12.0, LoginStep::GaveUp(13.0));
    c.sample(11.0, &[]);
    let m = c.finish(&|_, _| true, [0, 0]);
    let row = |phase: &str, class| m.phases.iter().find(|r| r.phase == phase && r.class == class).unwrap();
    let warm = row(WARMUP, Class::P);
    assert_eq!((warm.login_p50_ms, warm.login_max_ms, warm.logins_waiting), (Some(2000.0), Some(2000.0), 0));
    let end = m.phases[0].end_s;
    let waiting = row(WARMUP, Class::F);
    assert_eq!((waiting.login_p95_ms, waiting.logins_waiting), (None, 1), "never logged in, still waiting");
    assert_eq!(waiting.login_max_ms, Some(r4((end - 5.0) * 1000.0)), "its age at the phase's end");
    let last = m.phases.iter().rfind(|r| r.class == Class::F).unwrap();
    assert_eq!(last.logins_waiting, 1, "still waiting when the run ended");
    assert_eq!(last.login_max_ms, Some(r4((last.end_s - 5.0) * 1000.0)));
    let gave_up = m.phases.iter().rfind(|r| r.class == Class::P).unwrap();
    assert_eq!((gave_up.login_p50_ms, gave_up.logins_waiting), (None, 0), "a login given up waits no more");
    assert_eq!(gave_up.login_max_ms, Some(1000.0), "but its wait counts in the max");
    let second = m.timeseries.iter().find(|r| r.t_s == 11 && r.class == Class::F).unwrap();
    assert_eq!((second.logins_waiting, second.login_oldest_ms), (1, Some(6000.0)));
}

#[test]
fn latency_is_from_intended_start_and_phases_bin_by_completion() {
    let mut c = collector();
    c.query(q(5.0, None));
    c.query(q(15.0, None));
    c.query(q(15.5, Some(QueryError::Timeout)));
    let m = c.finish(&|_, _| true, [0, 0]);
    let base = m.phases.iter().find(|r| r.phase == "baseline" && r.class == Class::P).unwrap();
    assert_eq!((base.completed, base.errors), (1, 1));
    assert!((base.p95_ms.unwrap() - 100.0).abs() < 0.1, "3 significant digits");
    assert_eq!(base.goodput_qps, r4(1.0 / 10.0));
    m.check_accounting().unwrap();
}

#[test]
fn truncation_drops_unmeasured_phases_and_cuts_the_last() {
    let mut c = Collector::new(cut(&[], 2, 10.0, 5.0, 20.0), 2, 0.5, false);
    c.query(q(12.0, None));
    c.truncate(11.0);
    let m = c.finish(&|_, _| true, [0, 0]);
    let base = m.phases.iter().find(|r| r.phase == "baseline" && r.class == Class::P).unwrap();
    assert_eq!((base.end_s, base.goodput_qps), (12.0, 0.5), "cut at the last record, 1 query in 2 s");
    let mut c = Collector::new(cut(&[], 2, 10.0, 5.0, 20.0), 2, 0.5, false);
    c.truncate(4.0);
    let m = c.finish(&|_, _| true, [0, 0]);
    assert!(m.phases.iter().all(|r| r.phase == "warmup"), "baseline never reached");
}

#[test]
fn unaccounted_sessions_fail_the_check() {
    let mut c = collector();
    c.session_started(Class::F, ReplicaId(0), 1.0);
    c.session_started(Class::F, ReplicaId(0), 1.0);
    c.session_ended(SessionRecord { class: Class::F, replica: ReplicaId(0), start_s: 1.0, end_s: 3.0, abort: None });
    let m = c.finish(&|_, _| true, [0, 0]);
    assert!(m.check_accounting().unwrap_err().0.contains("2 sessions started"));
    let mut c = collector();
    c.session_started(Class::F, ReplicaId(1), 2.0);
    let m = c.finish(&|_, _| true, [0, 1]);
    m.check_accounting().unwrap();
}

#[test]
fn admission_queue_books_balance_and_rejections_are_counted() {
    let mut c = collector();
    c.queued(Class::F);
    c.queued(Class::F);
    c.queued(Class::F);
    c.admission(Class::F, 12.0, 0.5, true, None);
    c.admission(Class::F, 13.0, 5.0, true, Some("queue deadline"));
    c.admission(Class::F, 14.0, 0.0, false, Some("queue full"));
    c.admission(Class::P, 14.0, 0.0, false, None);
    c.still_queued([0, 1]);
    let m = c.finish(&|_, _| true, [0, 0]);
    m.check_accounting().unwrap();
    let f = m.phases.iter().find(|r| r.phase == "baseline" && r.class == Class::F).unwrap();
    assert_eq!(f.rejected, 2);
    assert!((f.queued_ms_p95.unwrap() - 5000.0).abs() < 5.0, "3 significant digits: {:?}", f.queued_ms_p95);
    assert_eq!(m.rejection_reasons.len(), 2);
    let mut c = collector();
    c.queued(Class::P);
    let m = c.finish(&|_, _| true, [0, 0]);
    assert!(m.check_accounting().unwrap_err().0.contains("joined the admission queue"), "a lost waiter fails");
}

#[test]
fn session_starts_and_aborts_are_binned_per_second_and_replica() {
    let mut c = collector();
    c.session_started(Class::P, ReplicaId(0), 3.2);
    c.session_started(Class::F, ReplicaId(0), 3.9);
    c.session_started(Class::F, ReplicaId(1), 4.0);
    c.session_ended(SessionRecord {
        class: Class::P,
        replica: ReplicaId(0),
        start_s: 3.2,
        end_s: 7.5,
        abort: Some(AbortReason::Query(QueryError::ConnectionLost)),
    });
    c.session_ended(SessionRecord { class: Class::F, replica: ReplicaId(0), start_s: 3.9, end_s: 7.6, abort: None });
    let m = c.finish(&|_, _| true, [0, 1]);
    assert_eq!(m.flow.len(), 20, "one row per second of the 20 s run");
    assert_eq!(m.flow[3], vec![Flow { started: 2, aborted: 0 }, Flow::default()]);
    assert_eq!(m.flow[4][1].started, 1);
    assert_eq!(m.flow[7][0], Flow { started: 0, aborted: 1 }, "only the aborted session counts as a retry");
    m.check_accounting().unwrap();
}

#[test]
fn timeouts_are_counted_per_phase_and_class_and_other_aborts_are_not() {
    let down = FaultEvent { t_s: 15.0, replica: ReplicaId(1), action: Action::Down };
    let mut c = Collector::new(cut(&[down], 2, 10.0, 5.0, 20.0), 2, 0.5, false);
    let mut end = |class, end_s, abort| {
        c.session_started(class, ReplicaId(0), 0.5);
        c.session_ended(SessionRecord { class, replica: ReplicaId(0), start_s: 0.5, end_s, abort });
    };
    end(Class::F, 4.0, Some(AbortReason::Connect(ConnectError::Timeout)));
    end(Class::F, 12.0, Some(AbortReason::Connect(ConnectError::Timeout)));
    end(Class::F, 13.0, Some(AbortReason::Query(QueryError::Timeout)));
    end(Class::F, 13.5, Some(AbortReason::Connect(ConnectError::Refused)));
    end(Class::P, 13.8, Some(AbortReason::Connect(ConnectError::Full)));
    end(Class::P, 14.0, Some(AbortReason::Query(QueryError::ConnectionLost)));
    end(Class::P, 16.0, Some(AbortReason::Query(QueryError::Timeout)));
    end(Class::P, 16.5, None);
    let m = c.finish(&|_, _| true, [0, 0]);
    m.check_accounting().unwrap();
    let phases: Vec<&str> = m.timeouts.iter().map(|t| t.phase.as_str()).collect();
    assert_eq!(phases, ["warmup", "baseline", "down1"]);
    assert_eq!((m.timeouts("warmup", Class::F), m.timeouts("warmup", Class::P)), (1, 0));
    assert_eq!(
        (m.timeouts("baseline", Class::F), m.timeouts("baseline", Class::P)),
        (2, 1),
        "refused is no time-out; a full server is overload"
    );
    assert_eq!((m.timeouts("down1", Class::F), m.timeouts("down1", Class::P)), (0, 1), "connection lost is none");
    assert_eq!(m.timeouts("rejoin9", Class::F), 0);
    let base = m.phases.iter().find(|r| r.phase == "baseline" && r.class == Class::F).unwrap();
    assert_eq!(base.aborted_sessions, 3, "every abort still counts as aborted");
}

#[test]
fn cpu_fraction_comes_from_cumulative_samples() {
    let mut c = collector();
    let s = |cpu| ReplicaSample { up: true, role: Role::M, active: [0, 0], cpu_s: Some(cpu) };
    for t in 0..=20 {
        c.sample(t as f64, &[s(t as f64 * 0.25), s(t as f64 * 0.5)]);
    }
    let m = c.finish(&|_, _| true, [0, 0]);
    let base = m.phases.iter().find(|r| r.phase == "baseline").unwrap();
    // u = 0.5 and 1.0 -> mean 0.75, cv = 0.25/0.75.
    assert_eq!(base.cpu_mean, Some(0.75));
    assert_eq!(base.cpu_cv, Some(r4(1.0 / 3.0)));
    assert_eq!(m.replicas[2].cpu_fraction, Some(0.5));
}
