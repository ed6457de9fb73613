//! The `sim` cluster backend (design.md §6): a discrete-event simulation of
//! K replicas as processor-sharing servers under a CFS bandwidth quota, as
//! cgroup `cpu.max` runs the real ones: a replica's processes run at up to
//! one core until the period's quota (C x 100 ms; a Slow one has its
//! fraction) is spent, then wait for the next 100 ms period, so a lone
//! query takes its CPU time, not its CPU time / C (a paused or partitioned
//! replica makes no progress). Connection set-up is a job of its own under
//! the client's connect deadline. The servers are driven
//! by the same client scripts, run controller (`core::control`: router,
//! detection, admission) and collector as real runs. This module only
//! models the servers and clients and carries out the controller's
//! decisions. Virtual time, no I/O, deterministic for a seed: events at
//! equal times run in insertion order and every random draw comes from a
//! client's own generator.

use crate::core::control::{Admission, Admitted, Confirm, Controller};
use crate::core::health::Evidence;
use crate::core::metrics::{Collector, LoginRecord, LoginStep, QueryRecord, ReplicaSample, SessionRecord};
use crate::core::model::{AbortReason, Action, ConnectError, FaultEvent, QueryError, ReplicaId};
use crate::core::schedule::Client;
use crate::core::workload::Workload;

mod agenda;
mod calendar;
mod guard;
mod huge;
mod prefetch;
mod server;

use agenda::{Agenda, Ahead, Ev};
use prefetch::prefetch;
use server::{Server, BACKGROUND, BURST_CORES, SPENT};

/// What the simulator needs besides the collector.
pub struct SimInput<'a> {
    /// The workload (session shape, demands, deadlines).
    pub workload: &'a Workload,
    /// Client scripts (arrivals already scaled).
    pub clients: Vec<Client>,
    /// The run controller over a fresh router, its watch and the optional
    /// admission gate (`--admission modes`).
    pub control: Controller,
    /// Fault schedule, scaled, in order.
    pub faults: &'a [FaultEvent],
    /// CPU cores per replica (C).
    pub cpus: f64,
    /// Run length (scaled), seconds.
    pub duration_s: f64,
    /// Health probe interval, seconds; 0 means no probes (`--detection oracle`).
    pub probe_interval_s: f64,
    /// Connections a replica accepts at once (its `max_connections`; the
    /// generator connects as the superuser, so the reserved slots count).
    pub max_connections: u32,
}

/// What is left open when the run ends.
#[derive(Debug, Default, PartialEq)]
pub struct SimOutcome {
    /// Sessions still open per class.
    pub in_flight: [u64; 2],
    /// Why the run stopped early, when its clock stopped advancing
    /// ([`guard`]); its books end there.
    pub stalled: Option<String>,
    /// What a tier of routers' stale counts did (`--routers`).
    pub tier: Option<crate::core::tier::TierBooks>,
    /// `--admission modes`: what the signals did while a mode was degraded.
    pub modes: Option<crate::core::degradation::ModeBooks>,
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Between sessions; `resume` holds the queries left of a broken session.
    Idle { resume: Option<u32> },
    /// Waiting for admission (`--admission modes`).
    Queued { resume: Option<u32> },
    /// In a session on `replica`; `in_flight` holds the query's sequence
    /// (or the connection set-up's, while `set_up` is under way); `counted`
    /// while its connection counts against the replica's `max_connections`.
    Session { replica: ReplicaId, remaining: u32, in_flight: Option<u64>, broken: bool, set_up: SetUp, counted: bool },
}

/// Where a session's connection set-up is (design.md §6): a PostgreSQL
/// login is first forked by the postmaster, one process serving every
/// login one at a time at its fair share of the replica's quota, then
/// set up by its own backend beside the queries.
#[derive(Clone, Copy, Debug, PartialEq)]
enum SetUp {
    /// Connected (or never connecting): a job in flight is a query.
    Done,
    /// Waiting for the postmaster, or being forked by it.
    Forking,
    /// Its backend authenticates and prepares.
    Starting,
}

struct ClientState {
    script: Client,
    state: State,
    session: u64,
    session_start: f64,
    intended: f64,
    sent: f64,
    qseq: u64,
    /// A login is under way (since `intended`, then `session_start`).
    login: bool,
    /// Its query in flight runs under the gate's statement count
    /// (`Controller::statement`), which its end gives back.
    granted: bool,
}

struct Sim<'a, 'c> {
    input: SimInput<'a>,
    col: &'c mut Collector,
    now: f64,
    agenda: Agenda,
    servers: Vec<Server>,
    clients: Vec<ClientState>,
    sessions: u64,
    /// Per replica, the clients whose next query the admission gate holds
    /// (a lower class at its statement limit), first held first.
    held: Vec<std::collections::VecDeque<u32>>,
}

/// Runs the simulation to `duration_s`, feeding `col`.
pub fn run(mut input: SimInput<'_>, col: &mut Collector) -> SimOutcome {
    let k = input.control.replicas();
    let servers = (0..k).map(|_| Server::new()).collect();
    let scripts = std::mem::take(&mut input.clients);
    let mut clients: Vec<ClientState> = huge::with_capacity(scripts.len());
    clients.extend(scripts.into_iter().map(|script| ClientState {
        script,
        state: State::Idle { resume: None },
        session: 0,
        session_start: 0.0,
        intended: 0.0,
        sent: 0.0,
        qseq: 0,
        login: false,
        granted: false,
    }));
    let agenda = Agenda::new(clients.len(), k);
    let held = vec![std::collections::VecDeque::new(); k];
    let mut sim = Sim { input, col, now: 0.0, agenda, servers, clients, sessions: 0, held };
    sim.start();
    let mut guard = guard::Guard::new(sim.clients.len(), k);
    let mut stalled = None;
    while let Some((t, ev)) = sim.agenda.pop() {
        if t >= sim.input.duration_s {
            break;
        }
        if let Err(why) = guard.step(t, &ev) {
            stalled = Some(why);
            break;
        }
        sim.now = t;
        sim.prefetch_ahead();
        sim.handle(ev);
        sim.record();
    }
    if stalled.is_none() {
        sim.now = sim.input.duration_s;
    }
    sim.sample();
    sim.record();
    let mut in_flight = [0u64; 2];
    for c in &sim.clients {
        if matches!(c.state, State::Session { .. }) {
            in_flight[c.script.class.idx()] += 1;
        }
    }
    if let Some(w) = sim.input.control.waiting() {
        sim.col.still_queued(w);
    }
    let modes = sim.input.control.mode_books();
    SimOutcome { in_flight, stalled, tier: sim.input.control.tier_books(), modes }
}

impl Sim<'_, '_> {
    /// Feeds the controller's events to the collector.
    fn record(&mut self) {
        for e in self.input.control.drain_events() {
            e.record(self.col);
        }
    }

    /// Starts loading what the next few events will touch ([`prefetch`]),
    /// in stages: for a replica's completion, the replica and then its job
    /// heap ([`prefetch::DONE_REPLICA`], [`prefetch::DONE_JOBS`]); the slot
    /// and the client ([`prefetch::CLIENT`] ahead; for a replica's
    /// completion, the client whose job ends, and its slot), the client's
    /// replica and its timers ([`prefetch::REPLICA`]), that replica's jobs
    /// ([`prefetch::JOBS`]).
    fn prefetch_ahead(&self) {
        if let Some(Ahead::Done(r)) = self.agenda.ahead(prefetch::DONE_REPLICA) {
            prefetch(&self.servers[r.idx()]);
        }
        if let Some(Ahead::Done(r)) = self.agenda.ahead(prefetch::DONE_JOBS) {
            self.servers[r.idx()].prefetch_jobs();
        }
        self.agenda.prefetch_ahead(prefetch::CLIENT);
        match self.agenda.ahead(prefetch::CLIENT) {
            Some(Ahead::Client(c)) => prefetch(&self.clients[c]),
            Some(Ahead::Done(r)) => {
                if let Some((_, c)) = self.servers[r.idx()].next().filter(|&(_, c)| c != BACKGROUND) {
                    prefetch(&self.clients[c as usize]);
                    self.agenda.prefetch_client(c);
                }
            }
            None => {}
        }
        if let Some(r) = self.replica_ahead(prefetch::REPLICA) {
            prefetch(&self.servers[r.idx()]);
            self.agenda.prefetch_replica(r);
        }
        if let Some(r) = self.replica_ahead(prefetch::JOBS) {
            self.servers[r.idx()].prefetch_jobs();
        }
    }

    /// The replica of the client whose event is `d` places ahead, if it is
    /// in a session.
    fn replica_ahead(&self, d: usize) -> Option<ReplicaId> {
        match self.agenda.ahead(d)? {
            Ahead::Client(c) => match self.clients[c].state {
                State::Session { replica, .. } => Some(replica),
                _ => None,
            },
            Ahead::Done(r) => Some(r),
        }
    }

    fn at(&mut self, t: f64, ev: Ev) {
        self.agenda.at(t, ev);
    }

    fn start(&mut self) {
        for i in 0..self.clients.len() {
            let w = self.input.workload;
            let c = &mut self.clients[i];
            let t = c.script.arrival_s + c.script.between_s(w);
            c.intended = t;
            self.at(t, Ev::Wake(i as u32));
        }
        for i in 0..self.input.faults.len() {
            self.at(self.input.faults[i].t_s, Ev::Fault(i));
        }
        self.at(0.0, Ev::Sample);
        if self.input.probe_interval_s > 0.0 {
            // Probes run half an interval out of step with whole seconds, so
            // a fault at a round time is not observed at that very instant.
            self.at(self.input.probe_interval_s / 2.0, Ev::Probe);
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(c) => self.wake(c as usize),
            Ev::Done(r) => self.done(r),
            Ev::Timeout(c, q) => self.timeout(c as usize, q),
            Ev::Fault(i) => self.fault(i),
            Ev::Probe => self.probe(),
            Ev::Expire => self.expire(),
            Ev::Quota(r) => {
                self.servers[r.idx()].advance(self.now, self.input.cpus);
                self.reschedule(r);
            }
            Ev::Sample => {
                self.input.control.tick(self.now);
                self.sample();
                self.at(self.now + 1.0, Ev::Sample);
            }
        }
    }

    fn sample(&mut self) {
        let cpus = self.input.cpus;
        let now = self.now;
        let samples: Vec<ReplicaSample> = (0..self.servers.len())
            .map(|r| {
                let s = &mut self.servers[r];
                s.advance(now, cpus);
                ReplicaSample {
                    up: s.up && !s.stalled(),
                    role: self.input.control.role(ReplicaId(r)),
                    active: self.input.control.active(ReplicaId(r)),
                    cpu_s: Some(s.cpu_s),
                }
            })
            .collect();
        self.col.sample(now, &samples);
        // `--admission modes`: this second's load may change the mode, and
        // the new mode may let waiting sessions start.
        let cpu: Vec<Option<f64>> = samples.iter().map(|s| s.cpu_s).collect();
        self.input.control.sample(now, &cpu, None);
        let admitted = self.input.control.admit_waiting(now);
        self.start_admitted(admitted);
        // Held queries ask again once a second (and at once after a mode
        // change), so a hold that lasts is seen in every window.
        for r in ReplicaId::all(self.servers.len()) {
            self.release_held(r, usize::MAX);
        }
    }

    /// Asks again for up to `n` of the queries held on `r`, first held
    /// first; those still held keep their places.
    fn release_held(&mut self, r: ReplicaId, n: usize) {
        let mut again = std::mem::take(&mut self.held[r.idx()]);
        let mut still = std::collections::VecDeque::new();
        let mut tried = 0;
        while let Some(c) = again.pop_front() {
            if tried == n {
                still.push_back(c);
                continue;
            }
            tried += 1;
            let i = c as usize;
            match self.clients[i].state {
                State::Session { replica, broken: false, .. } if replica == r && self.servers[r.idx()].up => {
                    if !self.input.control.statement(self.clients[i].script.class, r) {
                        still.push_back(c);
                        continue;
                    }
                    self.clients[i].granted = true;
                    self.dispatch(i, r);
                }
                State::Session { replica, .. } if replica == r => {
                    self.clients[i].sent = self.now;
                    self.fail_query(i, r);
                }
                _ => {}
            }
        }
        still.extend(std::mem::take(&mut self.held[r.idx()]));
        self.held[r.idx()] = still;
    }

    /// Starts the sessions the gate let out of its queue.
    fn start_admitted(&mut self, admitted: Vec<Admitted>) {
        for a in admitted {
            let i = a.client as usize;
            let State::Queued { resume } = self.clients[i].state else { continue };
            self.begin(i, a.replica, resume);
        }
    }

    /// Rejects the sessions whose admission deadline has passed; each
    /// client goes back to thinking and its session's work is dropped.
    fn expire(&mut self) {
        for w in self.input.control.expire_waiting(self.now) {
            self.rejected(w.client as usize);
        }
    }

    /// A rejected client backs off as pools and drivers do (the
    /// workload's `[client]` backoff with jitter, growing with each
    /// refusal in a row), then tries a new session.
    fn rejected(&mut self, i: usize) {
        self.login_ended(i, LoginStep::GaveUp(self.now));
        let w = self.input.workload;
        let c = &mut self.clients[i];
        c.state = State::Idle { resume: None };
        c.intended = self.now + c.script.backoff_s(w);
        let t = c.intended;
        self.at(t, Ev::Wake(i as u32));
    }

    /// The client's next step: open a session or send its next query.
    fn wake(&mut self, i: usize) {
        match self.clients[i].state {
            State::Idle { resume } => self.open(i, resume),
            State::Queued { .. } => {}
            State::Session { replica, broken, .. } => {
                if broken || !self.servers[replica.idx()].up {
                    self.clients[i].sent = self.now;
                    self.fail_query(i, replica);
                } else {
                    self.send(i, replica);
                }
            }
        }
    }

    /// Opens a session: a fresh one, or the rest of a broken one.
    fn open(&mut self, i: usize, resume: Option<u32>) {
        let c = &mut self.clients[i];
        let class = c.script.class;
        if !std::mem::replace(&mut c.login, true) {
            self.col.login(LoginRecord { class, intended_s: c.intended, step: LoginStep::Began });
        }
        match self.input.control.request(i as u32, class, self.now) {
            Admission::Route(r) => self.begin(i, r, resume),
            Admission::Queued { deadline_s } => {
                self.clients[i].state = State::Queued { resume };
                self.at(deadline_s, Ev::Expire);
            }
            Admission::Rejected(_) => self.rejected(i),
            Admission::NoRoute => {
                // No capacity: wait and retry; the intended start stays put.
                let backoff = self.clients[i].script.backoff_s(self.input.workload);
                self.at(self.now + backoff, Ev::Wake(i as u32));
            }
        }
    }

    /// Starts a session of client `i` on `r`.
    fn begin(&mut self, i: usize, r: ReplicaId, resume: Option<u32>) {
        let class = self.clients[i].script.class;
        self.sessions += 1;
        self.col.session_started(class, r, self.now);
        let w = self.input.workload;
        let c = &mut self.clients[i];
        c.session = self.sessions;
        c.session_start = c.intended;
        let remaining = resume.unwrap_or_else(|| c.script.session_len(w));
        let s = &self.servers[r.idx()];
        let accepted = s.up && s.connections < self.input.max_connections;
        c.state = State::Session {
            replica: r,
            remaining,
            in_flight: None,
            broken: false,
            set_up: SetUp::Done,
            counted: accepted,
        };
        if !accepted {
            // Down: refused. Full: PostgreSQL turns the client away with
            // "too many clients already" (53300), as the real driver sees.
            let err = if s.up { ConnectError::Full } else { ConnectError::Refused };
            self.connect_failed(i, r, err);
            return;
        }
        self.servers[r.idx()].connections += 1;
        if w.session.connect_cpu_ms > 0.0 {
            self.connect(i, r);
        } else {
            self.send(i, r);
        }
    }

    /// Sets up the session's connection under the client's login deadline
    /// (if it has one; the TCP connect is the kernel's and instant here):
    /// the postmaster's fork (`fork_cpu_ms`, one login at a time, first
    /// come first served), then the backend's own set-up (the rest of
    /// `connect_cpu_ms`) beside the queries.
    fn connect(&mut self, i: usize, r: ReplicaId) {
        let w = self.input.workload;
        let fork_s = w.session.fork_cpu_ms / 1000.0;
        let stage = if fork_s > 0.0 { SetUp::Forking } else { SetUp::Starting };
        let q = self.next_job(i, stage);
        if let Some(deadline) = w.client.login_deadline_s() {
            self.at(self.now + deadline, Ev::Timeout(i as u32, q));
        }
        if fork_s <= 0.0 {
            return self.enqueue(r, i, q, w.session.connect_cpu_ms / 1000.0);
        }
        let postmaster = &mut self.servers[r.idx()].postmaster;
        postmaster.push_back((i as u32, q));
        if postmaster.len() == 1 {
            self.fork_next(r);
        }
    }

    /// The postmaster forked client `c`'s backend: the backend sets itself
    /// up, and the postmaster turns to the next login waiting, if any.
    fn forked(&mut self, c: u32, r: ReplicaId) {
        let w = self.input.workload;
        let fork_ms = w.session.fork_cpu_ms;
        self.servers[r.idx()].postmaster.pop_front();
        if let State::Session { in_flight: Some(q), set_up, .. } = &mut self.clients[c as usize].state {
            *set_up = SetUp::Starting;
            let q = *q;
            self.enqueue(r, c as usize, q, (w.session.connect_cpu_ms - fork_ms).max(0.0) / 1000.0);
        }
        self.fork_next(r);
    }

    /// Puts the first login waiting for `r`'s postmaster in service.
    fn fork_next(&mut self, r: ReplicaId) {
        if let Some(&(c, q)) = self.servers[r.idx()].postmaster.front() {
            let fork_s = self.input.workload.session.fork_cpu_ms / 1000.0;
            self.enqueue(r, c as usize, q, fork_s);
        }
    }

    /// Ends client `i`'s login under way, if any, with `step`.
    fn login_ended(&mut self, i: usize, step: LoginStep) {
        let c = &mut self.clients[i];
        if std::mem::replace(&mut c.login, false) {
            // Before the session began, its intended start is `intended`.
            let intended_s = if matches!(c.state, State::Session { .. }) { c.session_start } else { c.intended };
            self.col.login(LoginRecord { class: c.script.class, intended_s, step });
        }
    }

    /// Sends client `i`'s next query on `r`, unless the admission gate
    /// holds it ([`Self::release_held`] asks again).
    fn send(&mut self, i: usize, r: ReplicaId) {
        self.login_ended(i, LoginStep::LoggedIn(self.now));
        if !self.input.control.statement(self.clients[i].script.class, r) {
            self.held[r.idx()].push_back(i as u32);
            return;
        }
        self.clients[i].granted = true;
        self.dispatch(i, r);
    }

    /// Puts client `i`'s next query on `r` under its deadline.
    fn dispatch(&mut self, i: usize, r: ReplicaId) {
        let w = self.input.workload;
        let draw = self.clients[i].script.query(w);
        let q = self.next_job(i, SetUp::Done);
        self.enqueue(r, i, q, draw.demand_s);
        let deadline = self.input.control.query_deadline_s(w.client.query_timeout_ms as f64 / 1000.0);
        self.at(self.now + deadline, Ev::Timeout(i as u32, q));
    }

    /// Numbers client `i`'s next job (a query, or its connection's set-up)
    /// and marks it in flight.
    fn next_job(&mut self, i: usize, stage: SetUp) -> u64 {
        let c = &mut self.clients[i];
        c.qseq += 1;
        c.sent = self.now;
        if let State::Session { in_flight, set_up, .. } = &mut c.state {
            *in_flight = Some(c.qseq);
            *set_up = stage;
        }
        c.qseq
    }

    /// The connection's set-up is done on the replica; nothing is in flight
    /// until the first query (its wake-up sends it).
    fn connected(&mut self, i: usize) {
        if let State::Session { in_flight, set_up, .. } = &mut self.clients[i].state {
            *in_flight = None;
            *set_up = SetUp::Done;
        }
    }

    /// Puts the backend's exit (`close_cpu_ms`) on server `r` as work no
    /// client waits for: it takes CPU from the queries beside it, and the
    /// backend keeps its connection slot until it is done, as a
    /// PostgreSQL backend holds its slot until its process exits.
    fn close_backend(&mut self, r: ReplicaId) {
        let demand_s = self.input.workload.session.close_cpu_ms / 1000.0;
        if demand_s > 0.0 && self.servers[r.idx()].up {
            self.enqueue(r, BACKGROUND as usize, 0, demand_s);
        } else {
            self.backend_gone(r);
        }
    }

    /// A backend of `r` has exited: its connection slot is free.
    fn backend_gone(&mut self, r: ReplicaId) {
        let s = &mut self.servers[r.idx()];
        s.connections = s.connections.saturating_sub(1);
    }

    /// Puts job `q` of client `i` (`demand_s` of CPU) on server `r`.
    fn enqueue(&mut self, r: ReplicaId, i: usize, q: u64, demand_s: f64) {
        let s = &mut self.servers[r.idx()];
        s.advance(self.now, self.input.cpus);
        s.push(i as u32, q, demand_s);
        self.reschedule(r);
    }

    /// Plans the next completion on `r` and, while it has work, the next
    /// quota event (its quota spent, or its period's end), in place of
    /// the ones planned before.
    fn reschedule(&mut self, r: ReplicaId) {
        let (done, quota) = (Ev::Done(r), Ev::Quota(r));
        let s = &mut self.servers[r.idx()];
        let Some((fv, _)) = s.next() else {
            self.agenda.cancel(done);
            self.agenda.cancel(quota);
            return;
        };
        let n = s.n() as f64;
        if s.budget > SPENT && self.now + s.budget / n.min(BURST_CORES) <= self.now {
            s.budget = 0.0; // too little left to move the clock: spent
        }
        let rate = s.rate();
        let spent = if rate > 0.0 { self.now + s.budget / s.speed() } else { s.period_end };
        let (stalled, period_end) = (s.stalled(), s.period_end);
        let v = s.v;
        match rate > 0.0 {
            true => self.agenda.at(self.now + (fv - v).max(0.0) / rate, done),
            false => self.agenda.cancel(done),
        }
        match stalled {
            false => self.agenda.at(spent.min(period_end), quota),
            true => self.agenda.cancel(quota),
        }
    }

    fn done(&mut self, r: ReplicaId) {
        let cpus = self.input.cpus;
        let s = &mut self.servers[r.idx()];
        s.advance(self.now, cpus);
        let Some(c) = s.pop() else { return };
        self.reschedule(r);
        if c == BACKGROUND {
            return self.backend_gone(r);
        }
        if self.clients[c as usize].stage() == SetUp::Forking {
            self.forked(c, r);
        } else if self.clients[c as usize].connecting() {
            // Set up on the replica: after the set-up's latency outside it
            // (`connect_latency_ms`), the first query goes out, still due
            // at the session's intended start.
            let wait_s = self.input.workload.session.connect_latency_ms / 1000.0;
            if wait_s > 0.0 {
                self.connected(c as usize);
                self.at(self.now + wait_s, Ev::Wake(c));
            } else {
                self.send(c as usize, r);
            }
        } else {
            self.finish_query(c as usize, r, None);
        }
    }

    fn timeout(&mut self, i: usize, q: u64) {
        if !self.clients[i].live(q) {
            return;
        }
        let State::Session { replica, .. } = self.clients[i].state else { return };
        let s = &mut self.servers[replica.idx()];
        s.advance(self.now, self.input.cpus);
        let forking = self.clients[i].stage() == SetUp::Forking;
        let was_first = s.postmaster.front().is_some_and(|&(c, _)| c == i as u32);
        if !forking || was_first {
            // In service (a login waiting for the postmaster is not).
            s.cancel(i as u32, q);
        }
        if forking {
            // It leaves the postmaster's queue; if it was being forked, the
            // next login's fork starts.
            s.postmaster.retain(|&(c, _)| c != i as u32);
            if was_first {
                self.fork_next(replica);
            }
        }
        if self.clients[i].connecting() {
            let (why, confirm) = self.input.control.connect_failed(replica, ConnectError::Timeout, self.now);
            self.confirm(confirm);
            self.abort(i, replica, why);
        } else {
            self.finish_query(i, replica, Some(QueryError::Timeout));
        }
        self.reschedule(replica);
    }

    /// Records the query and tells the controller how it went; the session
    /// goes on, closes, or aborts on error.
    fn finish_query(&mut self, i: usize, r: ReplicaId, error: Option<QueryError>) {
        let w = self.input.workload;
        let now = self.now;
        let c = &mut self.clients[i];
        self.col.query(QueryRecord {
            session: c.session,
            class: c.script.class,
            replica: r,
            intended_s: c.intended,
            start_s: c.sent,
            end_s: now,
            error,
        });
        // The simulator's checks are instantaneous: no success is stale.
        let answer = error.map_or(Ok((now - c.sent) * 1000.0), Err);
        let (class, latency_ms) = (c.script.class, (now - c.intended) * 1000.0);
        let granted = std::mem::replace(&mut c.granted, false);
        let confirm = self.input.control.query_answered(r, answer, now, now);
        self.confirm(confirm);
        if error.is_none() {
            self.input.control.served(class, latency_ms);
        }
        if granted && self.input.control.statement_ended(class, r) {
            self.release_held(r, 1);
        }
        if let Some(e) = error {
            return self.abort(i, r, AbortReason::Query(e));
        }
        let c = &mut self.clients[i];
        let State::Session { remaining, in_flight, .. } = &mut c.state else { return };
        *in_flight = None;
        *remaining -= 1;
        if *remaining == 0 {
            self.close(i, r, None);
        } else {
            let think = c.script.think_s(w);
            c.intended = now + think;
            self.at(now + think, Ev::Wake(i as u32));
        }
    }

    fn close(&mut self, i: usize, r: ReplicaId, abort: Option<AbortReason>) {
        let w = self.input.workload;
        let now = self.now;
        let c = &mut self.clients[i];
        let class = c.script.class;
        let closed = matches!(c.state, State::Session { counted: true, .. });
        self.login_ended(i, LoginStep::GaveUp(now));
        let c = &mut self.clients[i];
        self.col.session_ended(SessionRecord { class, replica: r, start_s: c.session_start, end_s: now, abort });
        // A broken session's client retries the failed query and the rest
        // of its work in a new session after a backoff.
        let resume = match c.state {
            State::Session { remaining, .. } if abort.is_some() => Some(remaining),
            _ => None,
        };
        c.state = State::Idle { resume };
        let next = if abort.is_some() {
            now + c.script.backoff_s(w)
        } else {
            c.script.succeeded();
            now + c.script.between_s(w)
        };
        c.intended = next;
        let admitted = self.input.control.client_session_ended(i as u32, r, class, now);
        self.at(next, Ev::Wake(i as u32));
        if closed {
            self.close_backend(r);
        }
        self.start_admitted(admitted);
    }

    fn abort(&mut self, i: usize, r: ReplicaId, reason: AbortReason) {
        self.close(i, r, Some(reason));
    }

    fn connect_failed(&mut self, i: usize, r: ReplicaId, err: ConnectError) {
        let (why, confirm) = self.input.control.connect_failed(r, err, self.now);
        self.confirm(confirm);
        self.abort(i, r, why);
    }

    /// The probe a client's lost or refused connection asks for, answered
    /// at once as a periodic probe would be (the simulator's checks are
    /// instantaneous).
    fn confirm(&mut self, confirm: Option<Confirm>) {
        if let Some(Confirm(r)) = confirm {
            let seen = self.seen(r);
            self.input.control.confirmed(r, seen, self.now, self.now);
        }
    }

    /// What a probe of `r` sees now: a dead server refuses, a paused or
    /// partitioned one times out.
    fn seen(&self, r: ReplicaId) -> Evidence {
        let s = &self.servers[r.idx()];
        match (s.up, s.stalled()) {
            (false, _) => Evidence::Refused,
            (true, true) => Evidence::ProbeTimeout,
            (true, false) => Evidence::ProbeOk { ms: 0.0 },
        }
    }

    /// A query on a connection whose server died fails at once (the
    /// controller confirms the lost connection with a probe).
    fn fail_query(&mut self, i: usize, r: ReplicaId) {
        self.finish_query(i, r, Some(QueryError::ConnectionLost));
    }

    fn fault(&mut self, idx: usize) {
        let FaultEvent { replica: r, action, .. } = self.input.faults[idx];
        let cpus = self.input.cpus;
        self.servers[r.idx()].advance(self.now, cpus);
        self.input.control.fault(r, action.to_string(), self.now);
        match action {
            Action::Down => self.kill(r),
            Action::Rejoin => self.servers[r.idx()].up = true,
            Action::Pause => self.servers[r.idx()].paused = true,
            Action::Resume => self.servers[r.idx()].paused = false,
            Action::Slow(f) => self.servers[r.idx()].requota(f, cpus),
            Action::Restore => self.servers[r.idx()].requota(1.0, cpus),
            Action::Partition => self.servers[r.idx()].partitioned = true,
            Action::Heal => self.servers[r.idx()].partitioned = false,
        }
        // The rate changed: the pending completion, if any, is stale.
        self.reschedule(r);
        let healthy = self.servers[r.idx()].up && !self.servers[r.idx()].stalled();
        self.input.control.told(r, healthy, self.now);
    }

    /// Down: the server dies; in-flight queries fail now, idle connections
    /// fail on their next query.
    fn kill(&mut self, r: ReplicaId) {
        let s = &mut self.servers[r.idx()];
        s.up = false;
        let mut jobs = s.drain();
        jobs.extend(std::mem::take(&mut s.postmaster));
        self.agenda.cancel(Ev::Done(r));
        self.agenda.cancel(Ev::Quota(r));
        for (c, q) in jobs {
            let c = c as usize;
            if !self.clients[c].live(q) {
                continue;
            }
            // A connection being set up is refused; a query fails.
            if self.clients[c].connecting() {
                self.connect_failed(c, r, ConnectError::Refused);
            } else {
                self.fail_query(c, r);
            }
        }
        // Its connections died with it, the held queries' too.
        self.servers[r.idx()].connections = 0;
        self.release_held(r, usize::MAX);
        for c in &mut self.clients {
            if let State::Session { replica, broken, counted, .. } = &mut c.state {
                if *replica == r {
                    *broken = true;
                    *counted = false;
                }
            }
        }
    }

    /// Health probes: each replica's real state is observed once per
    /// interval; a dead one refuses, a paused or partitioned one times out
    /// (removed only after consecutive timeouts, as in real runs); then
    /// time passes for the watch (probation windows end).
    fn probe(&mut self) {
        for r in ReplicaId::all(self.servers.len()) {
            let seen = self.seen(r);
            self.input.control.probed(r, seen, self.now, self.now);
        }
        self.input.control.tick(self.now);
        self.at(self.now + self.input.probe_interval_s, Ev::Probe);
    }
}

impl ClientState {
    /// Whether query `q` is this client's query in flight.
    fn live(&self, q: u64) -> bool {
        matches!(self.state, State::Session { in_flight: Some(x), .. } if x == q)
    }

    /// Whether the job in flight is the connection's set-up.
    fn connecting(&self) -> bool {
        self.stage() != SetUp::Done
    }

    /// Where the session's connection set-up is.
    fn stage(&self) -> SetUp {
        match self.state {
            State::Session { set_up, .. } => set_up,
            _ => SetUp::Done,
        }
    }
}

#[cfg(test)]
mod tests;
