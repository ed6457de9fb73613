//! What a run's metrics are made of: the records the backends feed the
//! collector (queries, sessions, logins, replica samples, events) and the
//! rows the writers and checks read back (phases.csv, timeseries.csv,
//! replicas.csv, queries.csv, the admission queue's books), with the
//! check that they add up. Plain data: the collector owns the arithmetic.

use super::super::model::{AbortReason, Class, EventKind, QueryError, ReplicaId, Role};
use super::RoleRow;
use serde::{Deserialize, Serialize};

/// One finished query (times in seconds from run start).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryRecord {
    /// Session number (unique within the run).
    pub session: u64,
    /// Class of the session.
    pub class: Class,
    /// Replica that served (or failed) it.
    pub replica: ReplicaId,
    /// When the client's schedule said it should start.
    pub intended_s: f64,
    /// When it was actually sent.
    pub start_s: f64,
    /// When it returned or failed.
    pub end_s: f64,
    /// `None` when it succeeded, else why it failed.
    pub error: Option<QueryError>,
}

/// One ended session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Class.
    pub class: Class,
    /// Replica the router had placed it on.
    pub replica: ReplicaId,
    /// When the session's first query was due (its intended start).
    pub start_s: f64,
    /// When it closed or broke.
    pub end_s: f64,
    /// `None` when completed, else why it was aborted.
    pub abort: Option<AbortReason>,
}

/// A step of a session's login: from the moment its client set out to
/// open it (its intended start) until it is ready for its first query.
/// The wait spans the admission gate, retries after "no replica can take
/// it", the TCP connect, the postmaster's fork and authentication.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoginRecord {
    /// Class of the session.
    pub class: Class,
    /// When the client set out to open the session, s from run start.
    pub intended_s: f64,
    /// What happened.
    pub step: LoginStep,
}

/// How far a login got.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoginStep {
    /// The client set out (at `intended_s`).
    Began,
    /// Ready for its first query at this time, s from run start.
    LoggedIn(f64),
    /// Refused, rejected or timed out at this time: the client backs off
    /// and a later login is a new one.
    GaveUp(f64),
}

/// A once-per-second view of one replica.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSample {
    /// Whether the replica is really up (backend truth, not the router's view).
    pub up: bool,
    /// Its role in the router.
    pub role: Role,
    /// Active sessions `[P, F]` in the router.
    pub active: [u32; 2],
    /// Cumulative CPU seconds, when measurable.
    pub cpu_s: Option<f64>,
}

/// A row of events.csv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventRow {
    /// Seconds from run start.
    pub t_s: f64,
    /// `fault`, `detect`, `role`, `note`, ...
    pub kind: EventKind,
    /// `r1`.. or empty.
    pub replica: String,
    /// Free text.
    pub detail: String,
}

/// Sessions the router placed on one replica in one second, and sessions
/// that aborted there (each aborted session is retried by its client):
/// the recovery ledger's "sessions shifted" and "retries created".
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Flow {
    /// Sessions started on the replica.
    pub started: u32,
    /// Sessions that ended aborted on the replica.
    pub aborted: u32,
}

/// Sessions through the admission queue, per class: every one that joined
/// it left it (admitted or rejected) or was still waiting at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct QueueBooks {
    /// Joined the queue.
    pub joined: [u64; 2],
    /// Left it admitted.
    pub admitted: [u64; 2],
    /// Left it rejected at the deadline.
    pub expired: [u64; 2],
    /// Still waiting at the end.
    pub waiting: [u64; 2],
}

impl QueueBooks {
    /// Sessions waiting in the queue now, per class.
    pub(super) fn waiting_now(&self) -> [u32; 2] {
        [0, 1].map(|c| self.joined[c].saturating_sub(self.admitted[c] + self.expired[c]) as u32)
    }
}

/// A row of phases.csv (column order is the public contract).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseRow {
    pub phase: String,
    pub start_s: f64,
    pub end_s: f64,
    pub survivors: usize,
    pub class: Class,
    pub completed: u64,
    pub goodput_qps: f64,
    pub retention: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub inflation_p95: Option<f64>,
    pub sessions_ended: u64,
    pub lifetime_mean_s: Option<f64>,
    pub lifetime_p95_s: Option<f64>,
    pub errors: u64,
    pub aborted_sessions: u64,
    pub cpu_mean: Option<f64>,
    pub cpu_cv: Option<f64>,
    /// Sessions refused by `--admission modes` (queue full or deadline);
    /// 0 in a summary.json from before admission.
    #[serde(default)]
    pub rejected: u64,
    /// p95 of the wait for admission, ms (`--admission modes` only).
    pub queued_ms_p95: Option<f64>,
    /// Login wait of the logins that completed in the phase, from the
    /// session's intended start until it was ready for its first query
    /// ([`LoginRecord`]), ms; absent before summary.json version 2.
    #[serde(default)]
    pub login_p50_ms: Option<f64>,
    /// See `login_p50_ms`.
    #[serde(default)]
    pub login_p95_ms: Option<f64>,
    /// See `login_p50_ms`.
    #[serde(default)]
    pub login_p99_ms: Option<f64>,
    /// The longest login wait of the phase: of the logins completed or
    /// given up in it, and of those still waiting at its end, by their age
    /// then, ms.
    #[serde(default)]
    pub login_max_ms: Option<f64>,
    /// Logins begun and still waiting when the phase ended.
    #[serde(default)]
    pub logins_waiting: u64,
    /// Of `rejected`, the sessions refused because the admission queue
    /// was full (the rest reached the queue deadline); absent before
    /// summary.json version 3.
    #[serde(default)]
    pub rejected_full: u64,
}

/// A row of timeseries.csv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesRow {
    pub t_s: u32,
    pub class: Class,
    pub completed: u64,
    pub goodput_qps: f64,
    pub p95_ms: Option<f64>,
    pub active_sessions: u32,
    /// Sessions of the class that wanted service in this second beside the
    /// active ones: refused or aborted in it, or waiting at the admission
    /// gate at its end. Not a timeseries.csv column (the progress check
    /// reads it at run time).
    #[serde(skip)]
    pub wanting: u32,
    /// Logins under way at the sample that ends the second (0 in files
    /// from before summary.json version 2).
    #[serde(default)]
    pub logins_waiting: u32,
    /// The oldest of them: how long it had waited then, ms.
    #[serde(default)]
    pub login_oldest_ms: Option<f64>,
}

/// One second `[t_s, t_s + 1)` of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Its start, s from the run's start.
    pub t_s: u32,
    /// The phase it starts in.
    pub phase: String,
    /// Per class, timeseries.csv's row for this second (p95 in whole ms).
    pub classes: Vec<SeriesRow>,
    /// Every replica at the sample that ends the second (its CPU fraction
    /// covers the second), replicas.csv's rows; empty if none was taken.
    pub replicas: Vec<ReplicaRow>,
}

/// A row of replicas.csv.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaRow {
    pub t_s: f64,
    pub replica: String,
    pub up: bool,
    pub role: Role,
    pub cpu_fraction: Option<f64>,
    pub active_p: u32,
    pub active_f: u32,
}

/// A row of queries.csv (`--raw`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueryRow {
    pub session: u64,
    pub class: Class,
    pub replica: String,
    pub intended_us: u64,
    pub start_us: u64,
    pub end_us: u64,
    pub ok: bool,
    pub error: String,
}

/// Mean CPU fraction of one replica over one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCpu {
    pub phase: String,
    pub replica: String,
    pub u: f64,
}

/// Everything a run measured, ready for the writers.
#[derive(Clone, Debug, Serialize)]
pub struct RunMetrics {
    pub phases: Vec<PhaseRow>,
    pub timeseries: Vec<SeriesRow>,
    pub replicas: Vec<ReplicaRow>,
    /// roles.csv's rows: `Some` above [`FLEET_ROWS`] replicas, when
    /// `replicas` stays empty.
    pub roles: Option<Vec<RoleRow>>,
    pub replica_cpu: Vec<ReplicaCpu>,
    pub events: Vec<EventRow>,
    #[serde(skip)]
    pub queries: Option<Vec<QueryRow>>,
    /// Per second, the longest wait of a query started then (either class).
    #[serde(skip)]
    pub backlog: Vec<(f64, Option<f64>)>,
    /// Per second (index = second), per replica (index = replica id):
    /// session starts and aborts, for the recovery ledger.
    #[serde(skip)]
    pub flow: Vec<Vec<Flow>>,
    pub sessions_started: [u64; 2],
    pub sessions_in_flight: [u64; 2],
    pub abort_reasons: Vec<(Class, String, u64)>,
    pub error_kinds: Vec<(Class, String, u64)>,
    /// Sessions rejected by admission, per class and reason.
    pub rejection_reasons: Vec<(Class, String, u64)>,
    /// The admission queue's books.
    pub queue: QueueBooks,
    /// Sessions aborted on a time-out, per phase (in `phases` order); not a
    /// phases.csv column, the run validity checks read it.
    pub timeouts: Vec<PhaseTimeouts>,
}

/// Sessions of one phase that aborted on a connect or query time-out (the
/// client gave up waiting), per class `[P, F]`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseTimeouts {
    /// Phase name.
    pub phase: String,
    /// Time-outs per class.
    pub sessions: [u64; 2],
}

/// An accounting violation: the run's files would not add up.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("accounting check failed: {0}")]
pub struct AccountingError(pub String);

impl RunMetrics {
    /// Sessions of `class` that aborted on overload (a time-out or a full
    /// server) in `phase` (0 for an unknown phase).
    pub fn timeouts(&self, phase: &str, class: Class) -> u64 {
        self.timeouts.iter().find(|t| t.phase == phase).map_or(0, |t| t.sessions[class.idx()])
    }

    /// Checks that every session is completed, aborted or in flight, and
    /// that per-class query totals agree across phases, time series and raw
    /// rows (design.md §5, issue: reliability).
    pub fn check_accounting(&self) -> Result<(), AccountingError> {
        for class in Class::ALL {
            let c = class.idx();
            let rows = self.phases.iter().filter(|r| r.class == class);
            let (done, aborted, completed, errors) = rows.fold((0, 0, 0, 0), |acc, r| {
                (acc.0 + r.sessions_ended, acc.1 + r.aborted_sessions, acc.2 + r.completed, acc.3 + r.errors)
            });
            if done + aborted + self.sessions_in_flight[c] != self.sessions_started[c] {
                return Err(AccountingError(format!(
                    "class {class}: {} sessions started but {done} completed + {aborted} aborted + {} in flight",
                    self.sessions_started[c], self.sessions_in_flight[c]
                )));
            }
            let q = &self.queue;
            if q.joined[c] != q.admitted[c] + q.expired[c] + q.waiting[c] {
                return Err(AccountingError(format!(
                    "class {class}: {} sessions joined the admission queue but {} admitted + {} rejected + {} waiting",
                    q.joined[c], q.admitted[c], q.expired[c], q.waiting[c]
                )));
            }
            let rejected: u64 = self.phases.iter().filter(|r| r.class == class).map(|r| r.rejected).sum();
            let reasons: u64 = self.rejection_reasons.iter().filter(|r| r.0 == class).map(|r| r.2).sum();
            if rejected != reasons {
                return Err(AccountingError(format!(
                    "class {class}: phases.csv counts {rejected} rejected sessions, the reasons {reasons}"
                )));
            }
            let series: u64 = self.timeseries.iter().filter(|r| r.class == class).map(|r| r.completed).sum();
            if series != completed {
                return Err(AccountingError(format!(
                    "class {class}: phases.csv counts {completed} completed queries, timeseries.csv {series}"
                )));
            }
            if let Some(raw) = &self.queries {
                let ok = raw.iter().filter(|q| q.class == class && q.ok).count() as u64;
                let failed = raw.iter().filter(|q| q.class == class && !q.ok).count() as u64;
                if ok != completed || failed != errors {
                    return Err(AccountingError(format!(
                        "class {class}: queries.csv has {ok} ok / {failed} failed, phases.csv {completed} / {errors}"
                    )));
                }
            }
        }
        Ok(())
    }
}
