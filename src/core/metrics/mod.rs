//! Metric aggregation (design.md §4): one collector owns every histogram.
//! Backends feed it query, session, replica and event records; it bins them
//! by phase (completion time) and by second, merges HdrHistograms (never
//! averages percentiles) and checks at the end that every query and session
//! is counted exactly once. Pure: no clocks, no I/O.

use super::model::{Class, EventKind, ReplicaId};
use super::phases::{locate, Phase, WARMUP};
use super::second_latency::SecondLatency;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;

mod fleet;
mod rows;

pub use fleet::{is_fleet, RoleRow, FLEET_ROWS};
pub use rows::*;

#[derive(Clone)]
struct ClassAgg {
    completed: u64,
    errors: u64,
    latency_us: Histogram<u64>,
    service_us: Histogram<u64>,
    lifetime_ms: Histogram<u64>,
    lifetime_sum_s: f64,
    sessions_ended: u64,
    aborted: u64,
    /// Of `aborted`, sessions that ended on a connect or query time-out.
    timeouts: u64,
    rejected: u64,
    /// Of `rejected`, for a full queue.
    rejected_full: u64,
    queued_ms: Histogram<u64>,
    /// Waits of the logins that completed in the phase, ms.
    login_ms: Histogram<u64>,
    /// The longest wait of a login given up in the phase (refused,
    /// rejected, timed out), ms.
    gave_up_max_ms: Option<f64>,
    /// Logins under way at the phase's end (begun before it), and the
    /// oldest one's age then, s; set once the phase has ended.
    waiting_at_end: Option<(u64, Option<f64>)>,
}

impl ClassAgg {
    fn new() -> ClassAgg {
        let h = || Histogram::new(3).expect("3 significant digits are valid");
        ClassAgg {
            completed: 0,
            errors: 0,
            latency_us: h(),
            service_us: h(),
            lifetime_ms: h(),
            lifetime_sum_s: 0.0,
            sessions_ended: 0,
            aborted: 0,
            timeouts: 0,
            rejected: 0,
            rejected_full: 0,
            queued_ms: h(),
            login_ms: h(),
            gave_up_max_ms: None,
            waiting_at_end: None,
        }
    }
}

#[derive(Clone)]
struct SecondAgg {
    completed: u64,
    /// Longest wait (actual start - intended start) of a query started in
    /// this second: the age of the oldest delayed work, for the recovery ledger.
    wait_max_ms: Option<f64>,
    latency_ms: SecondLatency,
    active: u32,
    /// Sessions refused or aborted in this second, and those waiting at
    /// the admission gate at its sample: demand the class had beside its
    /// active sessions (the progress check's).
    wanting: u32,
    /// Logins under way at the sample that ends the second, and the oldest
    /// one's age then, ms.
    logins: (u32, Option<f64>),
}

/// Owns every aggregate of a run.
pub struct Collector {
    phases: Vec<Phase>,
    cpus: f64,
    per_phase: Vec<[ClassAgg; 2]>,
    seconds: Vec<[SecondAgg; 2]>,
    /// Seconds before this one have settled (see [`SecondLatency`]).
    settled: usize,
    /// Per second, per replica.
    flow: Vec<Vec<Flow>>,
    replica_rows: Vec<ReplicaRow>,
    /// Above [`FLEET_ROWS`] replicas: per-role rows instead of `replica_rows`.
    role_rows: Option<Vec<RoleRow>>,
    cpu_series: Vec<Vec<(f64, f64)>>,
    events: Vec<EventRow>,
    raw: Option<Vec<QueryRow>>,
    sessions_started: [u64; 2],
    abort_reasons: BTreeMap<(Class, String), u64>,
    error_kinds: BTreeMap<(Class, String), u64>,
    rejections: BTreeMap<(Class, String), u64>,
    queue: QueueBooks,
    /// Logins under way per class: intended start (us) -> how many.
    logins: [BTreeMap<u64, u32>; 2],
    /// Phases before this one have their logins-waiting snapshot.
    phases_closed: usize,
    last_record_s: f64,
    /// `--stream`: where each complete second goes, and the next to send.
    stream: Option<(SecondSink, usize)>,
}

/// Where the collector sends each complete second (`run --stream`).
pub type SecondSink = Box<dyn FnMut(&Second) + Send>;

/// The seconds to send when the sample of second `sampled` arrives, given
/// that every second before `next` is written: `next..sampled - 1`.
fn due_seconds(next: usize, sampled: usize) -> std::ops::Range<usize> {
    next..sampled.saturating_sub(1).max(next)
}

/// Rounds to 4 decimals so files are stable and readable.
pub fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Records into an auto-resizing histogram (values beyond u64 saturate).
fn record<T: hdrhistogram::Counter>(h: &mut Histogram<T>, v: u64) {
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

fn us(t_s: f64) -> u64 {
    (t_s * 1e6).round().max(0.0) as u64
}

impl Collector {
    /// A collector for a run cut into `phases`, `replicas` replicas of
    /// `cpus` cores each; keeps raw query rows when `raw`.
    pub fn new(phases: Vec<Phase>, replicas: usize, cpus: f64, raw: bool) -> Collector {
        let end = phases.last().map_or(0.0, |p| p.end_s);
        let secs = end.ceil().max(1.0) as usize;
        let second = || SecondAgg {
            completed: 0,
            wait_max_ms: None,
            latency_ms: SecondLatency::Empty,
            active: 0,
            wanting: 0,
            logins: (0, None),
        };
        Collector {
            per_phase: phases.iter().map(|_| [ClassAgg::new(), ClassAgg::new()]).collect(),
            phases,
            cpus,
            seconds: (0..secs).map(|_| [second(), second()]).collect(),
            settled: 0,
            flow: vec![vec![Flow::default(); replicas]; secs],
            replica_rows: Vec::new(),
            role_rows: is_fleet(replicas).then(Vec::new),
            cpu_series: vec![Vec::new(); replicas],
            events: Vec::new(),
            raw: raw.then(Vec::new),
            sessions_started: [0; 2],
            abort_reasons: BTreeMap::new(),
            error_kinds: BTreeMap::new(),
            rejections: BTreeMap::new(),
            queue: QueueBooks::default(),
            logins: [BTreeMap::new(), BTreeMap::new()],
            phases_closed: 0,
            last_record_s: 0.0,
            stream: None,
        }
    }

    /// Sends every second to `sink` once it is complete (`run --stream`).
    pub fn stream_to(&mut self, sink: SecondSink) {
        self.stream = Some((sink, 0));
    }

    /// Sends the seconds not sent yet, up to the run's (possibly cut) end.
    pub fn end_stream(&mut self) {
        let end = self.phases.last().map_or(0.0, |p| p.end_s).ceil() as usize;
        self.send_seconds(end.min(self.seconds.len()));
    }

    /// Sends the seconds from the next unsent one up to `until` (exclusive).
    fn send_seconds(&mut self, until: usize) {
        let Some((mut sink, next)) = self.stream.take() else { return };
        for k in next..until.max(next) {
            sink(&self.second_line(k));
        }
        self.stream = Some((sink, until.max(next)));
    }

    /// Second `k` as the stream shows it.
    fn second_line(&self, k: usize) -> Second {
        let end = (k + 1) as f64;
        let replicas =
            self.replica_rows.iter().rev().skip_while(|r| r.t_s >= end + 1.0).take_while(|r| r.t_s >= end).cloned();
        let mut replicas: Vec<ReplicaRow> = replicas.collect();
        replicas.reverse();
        Second {
            t_s: k as u32,
            phase: self.phases[locate(&self.phases, k as f64)].name.clone(),
            classes: Class::ALL.into_iter().map(|c| self.series_row(k, c)).collect(),
            replicas,
        }
    }

    /// Second `k` of class `class`, as timeseries.csv has it.
    fn series_row(&self, k: usize, class: Class) -> SeriesRow {
        let s = &self.seconds[k][class.idx()];
        SeriesRow {
            t_s: k as u32,
            class,
            completed: s.completed,
            goodput_qps: s.completed as f64,
            p95_ms: s.latency_ms.p95().map(|ms| ms as f64),
            active_sessions: s.active,
            wanting: s.wanting,
            logins_waiting: s.logins.0,
            login_oldest_ms: s.logins.1,
        }
    }

    /// Ends the run early at `t_s` (an interrupted run): the phase holding
    /// the later of `t_s` and the last record is cut there and later phases,
    /// which were never measured, are dropped, so no figure divides by time
    /// that was not observed.
    pub fn truncate(&mut self, t_s: f64) {
        let end = t_s.max(self.last_record_s);
        let keep = self.phases.iter().take_while(|p| p.start_s < end).count().max(1);
        self.phases.truncate(keep);
        self.per_phase.truncate(keep);
        let last = self.phases.last_mut().expect("at least one phase");
        last.end_s = last.end_s.min(end).max(last.start_s + 1e-3);
    }

    fn second(&self, t_s: f64) -> usize {
        (t_s.max(0.0) as usize).min(self.seconds.len() - 1)
    }

    /// Counts a query in the phase and second of its completion.
    pub fn query(&mut self, q: QueryRecord) {
        self.last_record_s = self.last_record_s.max(q.end_s);
        let c = q.class.idx();
        let phase = locate(&self.phases, q.end_s);
        let sec = self.second(q.end_s);
        let started = self.second(q.start_s);
        let wait = &mut self.seconds[started][c].wait_max_ms;
        *wait = Some(wait.unwrap_or(0.0).max((q.start_s - q.intended_s) * 1000.0));
        let agg = &mut self.per_phase[phase][c];
        match &q.error {
            None => {
                let latency = us(q.end_s - q.intended_s).max(1);
                agg.completed += 1;
                record(&mut agg.latency_us, latency);
                record(&mut agg.service_us, us(q.end_s - q.start_s).max(1));
                let s = &mut self.seconds[sec][c];
                s.completed += 1;
                // A record for a settled second (over a minute late) counts,
                // but no longer moves that second's p95.
                s.latency_ms.record(latency.div_ceil(1000));
            }
            Some(kind) => {
                agg.errors += 1;
                *self.error_kinds.entry((q.class, kind.to_string())).or_default() += 1;
            }
        }
        if let Some(raw) = &mut self.raw {
            raw.push(QueryRow {
                session: q.session,
                class: q.class,
                replica: q.replica.to_string(),
                intended_us: us(q.intended_s),
                start_us: us(q.start_s),
                end_us: us(q.end_s),
                ok: q.error.is_none(),
                error: q.error.map(|e| e.to_string()).unwrap_or_default(),
            });
        }
    }

    /// The flow cell of replica `r` in the second of `t_s`.
    fn flow_at(&mut self, t_s: f64, r: ReplicaId) -> &mut Flow {
        let sec = self.second(t_s);
        let row = &mut self.flow[sec];
        if row.len() <= r.idx() {
            row.resize(r.idx() + 1, Flow::default());
        }
        &mut row[r.idx()]
    }

    /// Counts a session as started at `t_s` on replica `r` (the moment the
    /// router admitted it there).
    pub fn session_started(&mut self, class: Class, r: ReplicaId, t_s: f64) {
        self.sessions_started[class.idx()] += 1;
        self.flow_at(t_s, r).started += 1;
    }

    /// Counts an ended session in the phase of its end (and, if aborted,
    /// in its replica's aborts of that second).
    pub fn session_ended(&mut self, s: SessionRecord) {
        self.last_record_s = self.last_record_s.max(s.end_s);
        if s.abort.is_some() {
            self.flow_at(s.end_s, s.replica).aborted += 1;
            let sec = self.second(s.end_s);
            self.seconds[sec][s.class.idx()].wanting += 1;
        }
        let agg = &mut self.per_phase[locate(&self.phases, s.end_s)][s.class.idx()];
        match s.abort {
            None => {
                let life = (s.end_s - s.start_s).max(0.0);
                agg.sessions_ended += 1;
                agg.lifetime_sum_s += life;
                record(&mut agg.lifetime_ms, (life * 1000.0).round().max(1.0) as u64);
            }
            Some(reason) => {
                agg.aborted += 1;
                agg.timeouts += u64::from(reason.is_overload());
                *self.abort_reasons.entry((s.class, reason.to_string())).or_default() += 1;
            }
        }
    }

    /// An admission decision at `t_s` after waiting `waited_s`: admitted
    /// (`rejected` = None) or rejected with a reason. `from_queue` says
    /// whether the session had joined the queue.
    pub fn admission(&mut self, class: Class, t_s: f64, waited_s: f64, from_queue: bool, rejected: Option<&str>) {
        self.last_record_s = self.last_record_s.max(t_s);
        let c = class.idx();
        let agg = &mut self.per_phase[locate(&self.phases, t_s)][c];
        record(&mut agg.queued_ms, (waited_s.max(0.0) * 1000.0).round() as u64);
        if let Some(reason) = rejected {
            agg.rejected += 1;
            agg.rejected_full += u64::from(reason == crate::core::admission::REJECT_FULL);
            let sec = self.second(t_s);
            self.seconds[sec][c].wanting += 1;
            *self.rejections.entry((class, reason.to_string())).or_default() += 1;
        }
        match (from_queue, rejected) {
            (true, None) => self.queue.admitted[c] += 1,
            (true, Some(_)) => self.queue.expired[c] += 1,
            _ => {}
        }
    }

    /// A session of `class` found no replica to take it at `t_s` (its
    /// client backs off and retries): demand, for the progress check.
    pub fn unrouted(&mut self, class: Class, t_s: f64) {
        let sec = self.second(t_s);
        self.seconds[sec][class.idx()].wanting += 1;
    }

    /// A step of a login ([`LoginRecord`]): a completed one's wait counts
    /// in the phase of its completion.
    pub fn login(&mut self, rec: LoginRecord) {
        let pending = &mut self.logins[rec.class.idx()];
        let key = us(rec.intended_s);
        let (t_s, logged_in) = match rec.step {
            LoginStep::Began => {
                *pending.entry(key).or_default() += 1;
                return;
            }
            LoginStep::LoggedIn(t_s) => (t_s, true),
            LoginStep::GaveUp(t_s) => (t_s, false),
        };
        if let std::collections::btree_map::Entry::Occupied(mut e) = pending.entry(key) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        self.last_record_s = self.last_record_s.max(t_s);
        let agg = &mut self.per_phase[locate(&self.phases, t_s)][rec.class.idx()];
        let wait_ms = ((t_s - rec.intended_s).max(0.0) * 1000.0).round();
        match logged_in {
            true => record(&mut agg.login_ms, wait_ms as u64),
            false => agg.gave_up_max_ms = Some(agg.gave_up_max_ms.unwrap_or(0.0).max(wait_ms)),
        }
    }

    /// Logins of `class` under way at `t_s` that began by then, and how
    /// long the oldest had waited, s.
    fn logins_at(&self, class: Class, t_s: f64) -> (u64, Option<f64>) {
        let begun = self.logins[class.idx()].range(..=us(t_s));
        let oldest = begun.clone().next().map(|(&k, _)| (t_s - k as f64 / 1e6).max(0.0));
        (begun.map(|(_, &n)| u64::from(n)).sum(), oldest)
    }

    /// Takes the logins-waiting snapshot of every phase that has ended by
    /// `t_s` and has none yet.
    fn close_phases(&mut self, t_s: f64) {
        while let Some(p) = self.phases.get(self.phases_closed).filter(|p| p.end_s <= t_s) {
            let end = p.end_s;
            for class in Class::ALL {
                let at = self.logins_at(class, end);
                self.per_phase[self.phases_closed][class.idx()].waiting_at_end = Some(at);
            }
            self.phases_closed += 1;
        }
    }

    /// A session joined the admission queue.
    pub fn queued(&mut self, class: Class) {
        self.queue.joined[class.idx()] += 1;
    }

    /// Sessions still waiting for admission at the end, per class.
    pub fn still_queued(&mut self, waiting: [u64; 2]) {
        self.queue.waiting = waiting;
    }

    /// The status line's figures over completions in `[from_s, to_s)`
    /// (whole seconds), with the replicas up in `replicas`.
    pub fn status(&self, from_s: f64, to_s: f64, duration_s: f64, replicas: &[ReplicaSample]) -> super::status::Status {
        let (a, b) = (self.second(from_s), self.second(to_s).max(self.second(from_s)));
        let mut completed = [0u64; 2];
        let mut p95_ms = [None; 2];
        for (c, (n, p95)) in completed.iter_mut().zip(&mut p95_ms).enumerate() {
            let mut h = Histogram::<u32>::new(3).expect("valid");
            for s in &self.seconds[a..b] {
                *n += s[c].completed;
                s[c].latency_ms.add_to(&mut h);
            }
            *p95 = (!h.is_empty()).then(|| h.value_at_quantile(0.95));
        }
        super::status::Status {
            t_s: to_s,
            duration_s,
            window_s: (b - a) as f64,
            completed,
            p95_ms,
            up: (replicas.iter().filter(|r| r.up).count(), replicas.len()),
            aborted: [0, 1].map(|c| self.per_phase.iter().map(|p| p[c].aborted).sum()),
            logins: Class::ALL.map(|c| self.logins_at(c, to_s)),
        }
    }

    /// Records the once-per-second view of every replica at `t_s`.
    pub fn sample(&mut self, t_s: f64, replicas: &[ReplicaSample]) {
        let sec = self.second(t_s);
        let mut active = [0u32; 2];
        let mut seen = Vec::new();
        for (r, s) in replicas.iter().enumerate() {
            active[0] += s.active[0];
            active[1] += s.active[1];
            let series = &mut self.cpu_series[r];
            let cpu_fraction = match (s.cpu_s, series.last()) {
                (Some(now), Some(&(t0, c0))) if t_s > t0 => Some(r4(((now - c0) / (self.cpus * (t_s - t0))).max(0.0))),
                _ => None,
            };
            if let Some(c) = s.cpu_s {
                series.push((t_s, c));
            }
            if self.role_rows.is_some() {
                let sessions = s.active[0] + s.active[1];
                seen.push(fleet::Seen { role: s.role, up: s.up, cpu: cpu_fraction, sessions });
                continue;
            }
            self.replica_rows.push(ReplicaRow {
                t_s: r4(t_s),
                replica: ReplicaId(r).to_string(),
                up: s.up,
                role: s.role,
                cpu_fraction,
                active_p: s.active[0],
                active_f: s.active[1],
            });
        }
        if let Some(rows) = &mut self.role_rows {
            rows.extend(fleet::role_rows(r4(t_s), &seen));
        }
        let waiting = self.queue.waiting_now();
        let logins = Class::ALL.map(|c| self.logins_at(c, t_s));
        for (((agg, n), w), (l, oldest)) in self.seconds[sec].iter_mut().zip(active).zip(waiting).zip(logins) {
            agg.active = n;
            agg.wanting += w;
            agg.logins = (l as u32, oldest.map(|s| (s * 1000.0).round()));
        }
        self.close_phases(t_s);
        // Seconds no record can reach any more keep only their p95.
        let settled = sec.saturating_sub(SecondLatency::SETTLE_S);
        for s in self.seconds[self.settled.min(settled)..settled].iter_mut().flatten() {
            s.latency_ms.settle();
        }
        self.settled = self.settled.max(settled);
        if let Some((_, next)) = &self.stream {
            let due = due_seconds(*next, sec);
            self.send_seconds(due.end);
        }
    }

    /// Appends a row to events.csv.
    pub fn event(&mut self, t_s: f64, kind: EventKind, replica: Option<ReplicaId>, detail: impl Into<String>) {
        self.events.push(EventRow {
            t_s: r4(t_s),
            kind,
            replica: replica.map(|r| r.to_string()).unwrap_or_default(),
            detail: detail.into(),
        });
    }

    /// Cumulative CPU of replica `r` at `t`, linearly interpolated.
    fn cpu_at(&self, r: usize, t: f64) -> Option<f64> {
        let s = &self.cpu_series[r];
        let i = s.iter().position(|&(ts, _)| ts >= t)?;
        if i == 0 {
            return (s[0].0 - t).abs().lt(&1e-9).then_some(s[0].1);
        }
        let ((t0, c0), (t1, c1)) = (s[i - 1], s[i]);
        Some(c0 + (c1 - c0) * (t - t0) / (t1 - t0))
    }

    /// Per-replica `u_r` over each phase for replicas `available(phase, r)`.
    fn phase_cpu(&self, available: &dyn Fn(&Phase, usize) -> bool) -> (Vec<ReplicaCpu>, Vec<Option<(f64, f64)>>) {
        let mut rows = Vec::new();
        let mut stats = Vec::new();
        for p in &self.phases {
            let mut us = Vec::new();
            for r in 0..self.cpu_series.len() {
                if !available(p, r) {
                    continue;
                }
                if let (Some(a), Some(b)) = (self.cpu_at(r, p.start_s), self.cpu_at(r, p.end_s)) {
                    let u = (b - a) / (self.cpus * p.len_s());
                    us.push(u);
                    rows.push(ReplicaCpu { phase: p.name.clone(), replica: ReplicaId(r).to_string(), u: r4(u) });
                }
            }
            stats.push((!us.is_empty()).then(|| {
                let mean = us.iter().sum::<f64>() / us.len() as f64;
                let var = us.iter().map(|u| (u - mean).powi(2)).sum::<f64>() / us.len() as f64;
                (mean, if mean > 0.0 { var.sqrt() / mean } else { 0.0 })
            }));
        }
        (rows, stats)
    }

    /// Builds the rows of every file. `available(phase, r)` says whether
    /// replica r was up through the phase (for u_mean and CV);
    /// `in_flight` is the sessions still open at the end per class.
    pub fn finish(mut self, available: &dyn Fn(&Phase, usize) -> bool, in_flight: [u64; 2]) -> RunMetrics {
        // The last phase (or one cut short) ends with the run: its logins
        // still under way are those waiting at the end.
        self.close_phases(f64::INFINITY);
        let (replica_cpu, cpu_stats) = self.phase_cpu(available);
        let baseline = self.phases.iter().position(|p| p.name == "baseline");
        let pct =
            |h: &Histogram<u64>, q: f64, div: f64| (!h.is_empty()).then(|| r4(h.value_at_quantile(q) as f64 / div));
        let mut phases = Vec::new();
        for (i, p) in self.phases.iter().enumerate() {
            for class in Class::ALL {
                let a = &self.per_phase[i][class.idx()];
                let goodput = a.completed as f64 / p.len_s().max(1e-9);
                let p95 = pct(&a.latency_us, 0.95, 1000.0);
                let (retention, inflation) = match baseline {
                    Some(b) if p.name != WARMUP => {
                        let base = &self.per_phase[b][class.idx()];
                        let base_g = base.completed as f64 / self.phases[b].len_s().max(1e-9);
                        let base_p95 = pct(&base.latency_us, 0.95, 1000.0);
                        (
                            (base_g > 0.0).then(|| r4(goodput / base_g)),
                            p95.zip(base_p95).filter(|(_, b)| *b > 0.0).map(|(x, b)| r4(x / b)),
                        )
                    }
                    _ => (None, None),
                };
                phases.push(PhaseRow {
                    phase: p.name.clone(),
                    start_s: r4(p.start_s),
                    end_s: r4(p.end_s),
                    survivors: p.survivors,
                    class,
                    completed: a.completed,
                    goodput_qps: r4(goodput),
                    retention,
                    p50_ms: pct(&a.latency_us, 0.50, 1000.0),
                    p95_ms: p95,
                    p99_ms: pct(&a.latency_us, 0.99, 1000.0),
                    inflation_p95: inflation,
                    sessions_ended: a.sessions_ended,
                    lifetime_mean_s: (a.sessions_ended > 0).then(|| r4(a.lifetime_sum_s / a.sessions_ended as f64)),
                    lifetime_p95_s: pct(&a.lifetime_ms, 0.95, 1000.0),
                    errors: a.errors,
                    aborted_sessions: a.aborted,
                    cpu_mean: cpu_stats[i].map(|s| r4(s.0)),
                    cpu_cv: cpu_stats[i].map(|s| r4(s.1)),
                    rejected: a.rejected,
                    queued_ms_p95: pct(&a.queued_ms, 0.95, 1.0),
                    login_p50_ms: pct(&a.login_ms, 0.50, 1.0),
                    login_p95_ms: pct(&a.login_ms, 0.95, 1.0),
                    login_p99_ms: pct(&a.login_ms, 0.99, 1.0),
                    login_max_ms: login_max_ms(a),
                    logins_waiting: a.waiting_at_end.map_or(0, |w| w.0),
                    rejected_full: a.rejected_full,
                });
            }
        }
        let timeseries =
            (0..self.seconds.len()).flat_map(|k| Class::ALL.map(|class| self.series_row(k, class))).collect();
        let backlog = self
            .seconds
            .iter()
            .enumerate()
            .map(|(t, sec)| (t as f64, sec[0].wait_max_ms.into_iter().chain(sec[1].wait_max_ms).reduce(f64::max)))
            .collect();
        RunMetrics {
            phases,
            timeseries,
            backlog,
            flow: self.flow,
            replicas: self.replica_rows,
            roles: self.role_rows,
            replica_cpu,
            events: self.events,
            queries: self.raw,
            sessions_started: self.sessions_started,
            sessions_in_flight: in_flight,
            abort_reasons: self.abort_reasons.into_iter().map(|((c, r), n)| (c, r, n)).collect(),
            error_kinds: self.error_kinds.into_iter().map(|((c, r), n)| (c, r, n)).collect(),
            rejection_reasons: self.rejections.into_iter().map(|((c, r), n)| (c, r, n)).collect(),
            queue: self.queue,
            timeouts: self
                .phases
                .iter()
                .zip(&self.per_phase)
                .map(|(p, a)| PhaseTimeouts { phase: p.name.clone(), sessions: [a[0].timeouts, a[1].timeouts] })
                .collect(),
        }
    }
}

/// The longest login wait of a phase: of the logins completed or given up
/// in it and, by their age at its end, of those still waiting then, ms.
fn login_max_ms(a: &ClassAgg) -> Option<f64> {
    let done = (!a.login_ms.is_empty()).then(|| a.login_ms.max() as f64);
    let waiting = a.waiting_at_end.and_then(|w| w.1).map(|s| r4(s * 1000.0));
    done.into_iter().chain(a.gave_up_max_ms).chain(waiting).reduce(f64::max)
}

#[cfg(test)]
mod tests;
