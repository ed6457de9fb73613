//! The run controller (docs/architecture.md, rank 1): the one owner of the router, the watch
//! (detection, health, probation) and the admission gate, so the simulator
//! and the real driver make the same decisions from the same code. A
//! backend tells it what happened — a session asks to start or ends, a
//! probe answers, a connection fails, a query returns, a fault is applied,
//! a CPU sample arrives, time passes — passing the time, and gets typed
//! decisions back (route, queue, reject; which waiting sessions start or
//! expire; the query deadline). Everything worth recording accumulates as
//! [`ControlEvent`]s for the backend to drain into its collector.
//!
//! Sans-IO: no clock, no tasks, no locks. The simulator owns one
//! controller; the driver keeps one behind one mutex.
//!
//! Rules kept here rather than in the backends:
//! - a success from a check that began before the last observed failure of
//!   its replica is stale and ignored (a probe that connected just before a
//!   Down must not undo its detection);
//! - a client's session is no witness a replica can be removed on
//!   (docs/resilience.md, "What counts as failure evidence"): a session the
//!   server ended with its own ErrorResponse (a protocol violation, a
//!   cancel, `pg_terminate_backend`) or a query the server answered with an
//!   error says nothing about the replica; a connection lost with no word
//!   from the server, or a refused connect, makes the replica *suspect*,
//!   and the backend confirms at once with a probe of its own
//!   ([`Confirm`]): only that probe's failure is evidence, so no client can
//!   forge a replica's death;
//! - under suspicion a query's latency is evidence (a timed-out query
//!   counts as the slowest answer);
//! - the gate's CPU signal is the mean CPU, since the last reading, of the
//!   healthy replicas of the top class's own role (every healthy replica
//!   where no replica has that role), and a sample whose CPU was skipped
//!   does not replace that reading;
//! - every role change the router makes is logged at the instant it is made,
//!   after the notes of whatever caused it.

use super::admission::{Decision, Gate, Waiting};
use super::degradation::{Load, Mode, Transition};
use super::health::Evidence;
use super::metrics::Collector;
use super::model::{AbortReason, Class, ConnectError, EventKind, QueryError, ReplicaId, Role};
use super::router::Router;
use super::tier::{Tier, TierBooks, TierConfig};
use super::watch::{Answers, Note, Watch};

/// What a new session's request to start decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Start it on this replica (the router counted it active).
    Route(ReplicaId),
    /// The gate holds it back; it is rejected unless admitted by `deadline_s`.
    Queued {
        /// Run time by which it expires.
        deadline_s: f64,
    },
    /// The gate refused it now (queue full).
    Rejected(&'static str),
    /// No replica may take it: back off and retry.
    NoRoute,
}

/// A waiting session the gate let start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admitted {
    /// Client index (as passed to [`Controller::request`]).
    pub client: u32,
    /// Its class.
    pub class: Class,
    /// Where it starts (the router counted it active).
    pub replica: ReplicaId,
}

/// How long a confirming probe may take before it counts as a timeout
/// (1 s): a new connection and `SELECT 1`, on a replica that a client just
/// saw drop its connection or refuse one. A dead server refuses at once, so
/// the confirmation adds the time of one refused connect (about a
/// millisecond on loopback) to a crash's detection; a live server answers
/// within it unless it is hung, and a hung one is then one timeout nearer
/// removal, as a periodic probe's timeout would make it.
pub const CONFIRM_TIMEOUT_S: f64 = 1.0;

/// A replica a client saw fail, to be confirmed by a probe of the
/// backend's own now: a new connection and `SELECT 1` within
/// [`CONFIRM_TIMEOUT_S`], whose answer goes to [`Controller::confirmed`].
/// At most one is asked per replica at a time.
#[must_use = "a suspect replica is removed only by a confirming probe"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Confirm(pub ReplicaId);

/// Where a piece of evidence came from; its name appears in events.csv
/// (`down (probe)`, `down (probe after connection error)`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A health probe.
    Probe,
    /// A client query's answer.
    Query,
    /// A client's connection broke under a query.
    ConnectionError,
    /// A client's connect was refused.
    ConnectionRefused,
    /// A client's connect timed out.
    ConnectTimeout,
    /// A live server turned a client away: too many clients.
    ServerFull,
    /// A probe confirming a client's lost connection.
    ConfirmLost,
    /// A probe confirming a client's refused connect.
    ConfirmRefused,
}

impl Source {
    /// The name used in events.csv.
    pub fn name(self) -> &'static str {
        match self {
            Source::Probe => "probe",
            Source::Query => "query",
            Source::ConnectionError => "connection error",
            Source::ConnectionRefused => "connection refused",
            Source::ConnectTimeout => "connect timeout",
            Source::ServerFull => "too many clients",
            Source::ConfirmLost => "probe after connection error",
            Source::ConfirmRefused => "probe after connection refused",
        }
    }
}

/// Something the controller did that the backend records.
#[derive(Clone, Debug, PartialEq)]
pub enum ControlEvent {
    /// A row of events.csv.
    Log {
        /// Run time, seconds.
        t_s: f64,
        /// What happened.
        kind: EventKind,
        /// To which replica, if any.
        replica: Option<ReplicaId>,
        /// Free text.
        detail: String,
    },
    /// An admission decision (see [`Collector::admission`]).
    Admission {
        /// The session's class.
        class: Class,
        /// Run time, seconds.
        t_s: f64,
        /// How long it waited.
        waited_s: f64,
        /// Whether it had joined the queue.
        from_queue: bool,
        /// Why it was rejected, if it was.
        rejected: Option<&'static str>,
    },
    /// A session joined the admission queue.
    Queued(Class),
    /// A session of this class asked to start at this time and no replica
    /// could take it (its client backs off and retries): demand the
    /// progress check counts.
    NoRoute(Class, f64),
}

impl ControlEvent {
    /// Feeds the event to the collector.
    pub fn record(self, col: &mut Collector) {
        match self {
            ControlEvent::Log { t_s, kind, replica, detail } => col.event(t_s, kind, replica, detail),
            ControlEvent::Admission { class, t_s, waited_s, from_queue, rejected } => {
                col.admission(class, t_s, waited_s, from_queue, rejected)
            }
            ControlEvent::Queued(class) => col.queued(class),
            ControlEvent::NoRoute(class, t_s) => col.unrouted(class, t_s),
        }
    }
}

/// The run controller; see the module doc.
#[derive(Clone, Debug)]
pub struct Controller {
    router: Router,
    watch: Watch,
    gate: Option<Gate>,
    /// How query answers count as evidence (under suspicion only).
    answers: Option<Answers>,
    /// CPU cores per replica (C): the base of the gate's utilisation.
    cpus: f64,
    /// Per replica, when a failure was last observed.
    failed_s: Vec<f64>,
    /// Per replica, the confirming probe asked and not yet answered: what
    /// the client saw.
    confirming: Vec<Option<Source>>,
    /// The last CPU reading and its time (at first: nothing, at 0).
    last_cpu: (f64, Vec<Option<f64>>),
    events: Vec<ControlEvent>,
    /// A simulated tier of routers around the router, its leader.
    tier: Option<Tier>,
}

impl Controller {
    /// A controller over a fresh `router`, its `watch` and the optional
    /// admission `gate`; `cpus` is the per-replica budget C and
    /// `query_timeout_ms` the workload's base query deadline (the latency a
    /// timed-out query counts as under suspicion).
    pub fn new(router: Router, watch: Watch, gate: Option<Gate>, cpus: f64, query_timeout_ms: f64) -> Controller {
        let k = router.config().replicas;
        Controller {
            answers: watch.answers(query_timeout_ms),
            router,
            watch,
            gate,
            cpus,
            failed_s: vec![f64::NEG_INFINITY; k],
            confirming: vec![None; k],
            last_cpu: (0.0, vec![None; k]),
            events: Vec::new(),
            tier: None,
        }
    }

    /// Routes through a tier of routers (simulated, [`crate::core::tier`]):
    /// this controller's router leads, followers route on snapshots. Not
    /// with an admission gate (the gate admits through the leader alone).
    pub fn with_tier(mut self, cfg: TierConfig) -> Controller {
        debug_assert!(self.gate.is_none(), "a tier routes without a gate");
        let tier = Tier::new(cfg, &self.router);
        tier.reserve_all(&mut self.router);
        self.tier = Some(tier);
        self
    }

    /// What routing on stale counts did, with a tier.
    pub fn tier_books(&self) -> Option<TierBooks> {
        self.tier.as_ref().map(|t| t.books().clone())
    }

    /// Takes the tier's snapshots due by `now_s`, before the router changes.
    fn catch_up(&mut self, now_s: f64) {
        if let Some(t) = &mut self.tier {
            t.catch_up(now_s, &self.router);
        }
    }

    /// Counts a session of `class` on `r` that another member of a proxy
    /// tier routed (`proxy::tier`): no choice, no role change.
    pub fn place(&mut self, r: ReplicaId, class: Class) {
        self.router.place(r, class);
    }

    /// Uncounts such a session (its member left) with no role change.
    pub fn unplace(&mut self, r: ReplicaId, class: Class) {
        self.router.unplace(r, class);
    }

    /// Goes on from `held` (`Router::restore`): a proxy tier's new leader
    /// takes the roles it last followed and the rebuilt counts.
    pub fn restore(&mut self, held: &[super::router::restore::Held]) -> Result<(), String> {
        self.router = Router::restore(self.router.config().clone(), held)?;
        Ok(())
    }

    /// Takes the events accumulated since the last call, oldest first.
    pub fn drain_events(&mut self) -> Vec<ControlEvent> {
        std::mem::take(&mut self.events)
    }

    /// Number of replicas K.
    pub fn replicas(&self) -> usize {
        self.router.config().replicas
    }

    /// The router, read-only (for samples and live metrics).
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The admission gate, read-only, if there is one.
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }

    /// `r`'s role in the router.
    pub fn role(&self, r: ReplicaId) -> Role {
        self.router.role(r)
    }

    /// Sessions `[P, F]` the router counts on `r`.
    pub fn active(&self, r: ReplicaId) -> [u32; 2] {
        self.router.active(r)
    }

    /// Whether the router thinks `r` healthy.
    pub fn is_healthy(&self, r: ReplicaId) -> bool {
        self.router.is_healthy(r)
    }

    /// Replicas the router thinks healthy.
    pub fn survivors(&self) -> usize {
        self.router.survivors()
    }

    /// The degradation mode, with a gate.
    pub fn mode(&self) -> Option<Mode> {
        self.gate.as_ref().map(Gate::mode)
    }

    /// What the gate's signals did while the mode was degraded, with a gate.
    pub fn mode_books(&self) -> Option<super::degradation::ModeBooks> {
        self.gate.as_ref().map(Gate::books)
    }

    /// Sessions waiting for admission per class, with a gate.
    pub fn waiting(&self) -> Option<[u64; 2]> {
        self.gate.as_ref().map(Gate::waiting)
    }

    /// The query deadline now for a base deadline of `base_s` (the gate's
    /// mode may lengthen it).
    pub fn query_deadline_s(&self, base_s: f64) -> f64 {
        match &self.gate {
            Some(g) => g.query_timeout_s(base_s),
            None => base_s,
        }
    }

    /// Client `client`'s new session of `class` asks to start at `now_s`:
    /// through the gate if there is one, else straight to the router.
    pub fn request(&mut self, client: u32, class: Class, now_s: f64) -> Admission {
        self.catch_up(now_s);
        let admission = match &mut self.gate {
            None => match &mut self.tier {
                Some(t) => t.admit(client, class, &mut self.router),
                None => self.router.admit(class),
            }
            .map_or(Admission::NoRoute, Admission::Route),
            Some(gate) => match gate.request(&mut self.router, client, class, now_s) {
                Decision::Admit(r) => {
                    self.events.push(admitted(class, now_s, 0.0, false, None));
                    Admission::Route(r)
                }
                Decision::Queued => {
                    self.events.push(ControlEvent::Queued(class));
                    Admission::Queued { deadline_s: now_s + gate.deadline_s() }
                }
                Decision::Rejected(why) => {
                    self.events.push(admitted(class, now_s, 0.0, false, Some(why)));
                    Admission::Rejected(why)
                }
                Decision::NoRoute => Admission::NoRoute,
            },
        };
        if admission == Admission::NoRoute {
            self.events.push(ControlEvent::NoRoute(class, now_s));
        }
        self.roles(now_s);
        admission
    }

    /// A session of `class` on `r` ended (completed, broken, or never
    /// started after all); returns the waiting sessions the freed capacity
    /// lets start.
    pub fn session_ended(&mut self, r: ReplicaId, class: Class, now_s: f64) -> Vec<Admitted> {
        self.catch_up(now_s);
        self.router.release(r, class);
        self.roles(now_s);
        self.admit_waiting(now_s)
    }

    /// [`Self::session_ended`] for client `client`'s session: with a tier,
    /// the router that admitted it forgets it too.
    pub fn client_session_ended(&mut self, client: u32, r: ReplicaId, class: Class, now_s: f64) -> Vec<Admitted> {
        if let Some(t) = &mut self.tier {
            t.catch_up(now_s, &self.router);
            t.ended(client, r, class, &mut self.router);
        }
        self.session_ended(r, class, now_s)
    }

    /// Starts the waiting sessions the gate now admits, in queue order.
    pub fn admit_waiting(&mut self, now_s: f64) -> Vec<Admitted> {
        let Some(gate) = &mut self.gate else { return Vec::new() };
        let mut started = Vec::new();
        for (w, replica) in gate.drain(&mut self.router) {
            self.events.push(admitted(w.class, now_s, now_s - w.since_s, true, None));
            started.push(Admitted { client: w.client, class: w.class, replica });
        }
        self.roles(now_s);
        started
    }

    /// Rejects the waiting sessions whose deadline has passed at `now_s`.
    pub fn expire_waiting(&mut self, now_s: f64) -> Vec<Waiting> {
        let Some(gate) = &mut self.gate else { return Vec::new() };
        let gone = gate.expire(now_s);
        for w in &gone {
            let why = Some(super::admission::REJECT_DEADLINE);
            self.events.push(admitted(w.class, now_s, now_s - w.since_s, true, why));
        }
        gone
    }

    /// One piece of evidence about `r` from a check that began at
    /// `began_s`, seen at `now_s`. A success is ignored when a failure of
    /// `r` was observed after the check began (pass `began_s = now_s` for
    /// an instantaneous check).
    fn evidence(&mut self, r: ReplicaId, ev: Evidence, source: Source, began_s: f64, now_s: f64) {
        self.catch_up(now_s);
        let failure = matches!(ev, Evidence::Refused | Evidence::ProbeTimeout | Evidence::ConnError);
        if failure {
            self.failed_s[r.idx()] = now_s;
        } else if began_s < self.failed_s[r.idx()] {
            return;
        }
        let notes = self.watch.evidence(&mut self.router, r, ev, now_s, source.name());
        self.log(notes, now_s);
    }

    /// A health probe of `r` begun at `began_s` saw `seen` (an answer, a
    /// refusal or a timeout).
    pub fn probed(&mut self, r: ReplicaId, seen: Evidence, began_s: f64, now_s: f64) {
        self.evidence(r, seen, Source::Probe, began_s, now_s);
    }

    /// A client could not connect to `r`. A refusal makes `r` suspect (the
    /// returned [`Confirm`] asks for a probe); a timeout, or a live server
    /// at its connection limit, is overload (a connection error, never
    /// isolation on its own). Returns why the session aborts.
    pub fn connect_failed(&mut self, r: ReplicaId, err: ConnectError, now_s: f64) -> (AbortReason, Option<Confirm>) {
        let confirm = match err {
            ConnectError::Refused => self.suspect(r, Source::ConfirmRefused, now_s),
            ConnectError::Timeout => {
                self.evidence(r, Evidence::ConnError, Source::ConnectTimeout, now_s, now_s);
                None
            }
            ConnectError::Full => {
                self.evidence(r, Evidence::ConnError, Source::ServerFull, now_s, now_s);
                None
            }
        };
        (AbortReason::Connect(err), confirm)
    }

    /// A query on `r` sent at `began_s` returned at `now_s`: `Ok(took_ms)`
    /// or its error. A connection lost with no word from the server makes
    /// `r` suspect (the returned [`Confirm`] asks for a probe); an error the
    /// server answered (`Failed`: a session it ended with its own FATAL, a
    /// cancel) says nothing about `r`; under suspicion an answer or a
    /// timeout is latency evidence.
    pub fn query_answered(
        &mut self,
        r: ReplicaId,
        answer: Result<f64, QueryError>,
        began_s: f64,
        now_s: f64,
    ) -> Option<Confirm> {
        match answer {
            Err(QueryError::ConnectionLost) => return self.suspect(r, Source::ConfirmLost, now_s),
            Err(QueryError::Failed) => {}
            Ok(_) | Err(QueryError::Timeout) => {
                if let Some(a) = self.answers {
                    self.evidence(r, a.evidence(answer.ok()), Source::Query, began_s, now_s);
                }
            }
        }
        None
    }

    /// A client saw `r` fail (`why`: how, as the confirmation will be
    /// named). A success of a check begun before now is stale from here
    /// on; a probe is asked unless one is under way or no detector reads
    /// evidence (the oracle).
    fn suspect(&mut self, r: ReplicaId, why: Source, now_s: f64) -> Option<Confirm> {
        self.failed_s[r.idx()] = self.failed_s[r.idx()].max(now_s);
        if self.watch.is_oracle() || self.confirming[r.idx()].is_some() {
            return None;
        }
        self.confirming[r.idx()] = Some(why);
        Some(Confirm(r))
    }

    /// The confirming probe of `r` that [`Confirm`] asked for, begun at
    /// `began_s`, saw `seen`: a refusal or a timeout is evidence as a
    /// periodic probe's would be, named for what the client saw; an answer
    /// clears the suspicion and changes nothing.
    pub fn confirmed(&mut self, r: ReplicaId, seen: Evidence, began_s: f64, now_s: f64) {
        let Some(why) = self.confirming[r.idx()].take() else { return };
        self.evidence(r, seen, why, began_s, now_s);
    }

    /// Whether a confirming probe of `r` is under way.
    pub fn confirming(&self, r: ReplicaId) -> bool {
        self.confirming[r.idx()].is_some()
    }

    /// The oracle tells the router that `r` is up or down (ignored by the
    /// other detectors).
    pub fn told(&mut self, r: ReplicaId, up: bool, now_s: f64) {
        self.catch_up(now_s);
        let notes = self.watch.told(&mut self.router, r, up, now_s, "oracle");
        self.log(notes, now_s);
    }

    /// Logs a fault action applied to `r` at `t_s` (`detail` says what).
    pub fn fault(&mut self, r: ReplicaId, detail: String, t_s: f64) {
        self.push_log(t_s, EventKind::Fault, Some(r), detail);
    }

    /// Whether [`Self::tick`] may change anything now (see `Watch::timed`).
    pub fn timed(&self) -> bool {
        self.watch.timed()
    }

    /// Lets time pass for the watch: probation windows end, ramps advance.
    pub fn tick(&mut self, now_s: f64) {
        self.catch_up(now_s);
        let notes = self.watch.tick(&mut self.router, now_s);
        self.log(notes, now_s);
    }

    /// A once-per-second reading of every replica's cumulative CPU seconds
    /// (`None` where it was not measured). The router is told each
    /// replica's utilisation since the last reading (PLB's `pressure`
    /// borrowing reads it). With a gate, the mean utilisation of the top
    /// class's own healthy replicas and `memory_pct` (the highest
    /// replica's memory in use, percent, where the backend reads it) are
    /// its load; a mode change is logged and returned. A reading with no
    /// CPU at all does not replace the last one.
    pub fn sample(&mut self, now_s: f64, cpu_s: &[Option<f64>], memory_pct: Option<f64>) -> Option<Transition> {
        let (t0, before) = &self.last_cpu;
        let dt_s = now_s - t0;
        let utilisation = super::admission::utilisation(before, cpu_s, dt_s, self.cpus);
        if cpu_s.iter().any(Option::is_some) {
            self.catch_up(now_s);
            self.router.observe_cpu(&utilisation);
            self.last_cpu = (now_s, cpu_s.to_vec());
        }
        let roles = self.gate.is_some().then(|| self.roles_now())?;
        let gate = self.gate.as_mut()?;
        let own = gate.own_replicas(&roles);
        let cpu_pct = super::admission::cpu_pct(&utilisation, &own, gate.knobs().saturation);
        let load = Load { cpu_pct, memory_pct, ..Load::default() };
        let tr = gate.observe(now_s, load)?;
        self.push_log(now_s, EventKind::Mode, None, format!("{}->{}", tr.from, tr.to));
        Some(tr)
    }

    /// Each healthy replica's role in the router's view (`None`: unhealthy).
    fn roles_now(&self) -> Vec<Option<Role>> {
        (0..self.replicas()).map(ReplicaId).map(|r| self.router.is_healthy(r).then(|| self.router.role(r))).collect()
    }

    /// A query of `class` answered `ms` after it was meant to be sent (its
    /// latency as the run records it): the gate's wait signal.
    pub fn served(&mut self, class: Class, ms: f64) {
        if let Some(g) = &mut self.gate {
            g.served(class, ms);
        }
    }

    /// A statement of `class` asks to run on `r`: `true` when it may (end
    /// it with [`Self::statement_ended`]), `false` when the gate holds it
    /// (ask again when [`Self::statement_ended`] says so or the mode
    /// changes). Always `true` without a gate.
    pub fn statement(&mut self, class: Class, r: ReplicaId) -> bool {
        let at = self.at(r);
        self.gate.as_mut().is_none_or(|g| g.begin_statement(class, r, at))
    }

    /// Replica `r`'s role and sessions, as the gate reads them.
    fn at(&self, r: ReplicaId) -> super::admission::Place {
        super::admission::Place { role: self.router.role(r), active: self.router.active(r) }
    }

    /// A statement [`Self::statement`] let run on `r` ended; `true` when a
    /// held statement of `class` may now be asked again.
    pub fn statement_ended(&mut self, class: Class, r: ReplicaId) -> bool {
        let at = self.at(r);
        self.gate.as_mut().is_some_and(|g| {
            g.end_statement(class, r);
            g.statement_limit(class, at).is_some()
        })
    }

    fn push_log(&mut self, t_s: f64, kind: EventKind, replica: Option<ReplicaId>, detail: String) {
        self.events.push(ControlEvent::Log { t_s, kind, replica, detail });
    }

    /// Logs the watch's notes, then the role changes they caused.
    fn log(&mut self, notes: Vec<Note>, now_s: f64) {
        for (kind, r, detail) in notes {
            self.push_log(now_s, kind, Some(r), detail);
        }
        self.roles(now_s);
    }

    /// Logs the router's role changes since the last call.
    fn roles(&mut self, now_s: f64) {
        for ch in self.router.drain_changes() {
            let detail = format!("{}->{} {}", ch.from, ch.to, ch.reason);
            self.push_log(now_s, EventKind::Role, Some(ch.replica), detail);
        }
    }
}

fn admitted(class: Class, t_s: f64, waited_s: f64, from_queue: bool, rejected: Option<&'static str>) -> ControlEvent {
    ControlEvent::Admission { class, t_s, waited_s, from_queue, rejected }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::admission::REJECT_DEADLINE;
    use crate::core::degradation::DegradationKnobs;
    use crate::core::health::HealthConfig;
    use crate::core::router::{RouterConfig, Strategy};
    use crate::core::watch::Recovery;

    const CPUS: f64 = 2.0;

    /// PLB over (2, 1, 2) with the probe detector and no gate.
    fn probed() -> Controller {
        let router = Router::new(RouterConfig::for_tests(Strategy::Plb, [2, 1, 2]));
        Controller::new(router, Watch::probe(5, Recovery::None, HealthConfig::default()), None, CPUS, 1000.0)
    }

    /// Least connections over two replicas, a gate allowing one session
    /// per replica in Normal mode (queue of 3, 2 s deadline), the oracle.
    fn gated() -> Controller {
        let router = Router::new(RouterConfig::for_tests(Strategy::Lc, [1, 0, 1]));
        let knobs = DegradationKnobs {
            queue_capacity: 3,
            queue_deadline_ms: 2000,
            min_mode_duration_s: Some(0.0),
            ..Default::default()
        };
        let watch = Watch::oracle(2, Recovery::None, HealthConfig::default());
        let sizing = crate::core::admission::Sizing { replicas: 2, replica_sessions: 1, service_ms: 1.0 };
        Controller::new(router, watch, Some(Gate::new(knobs, 1.0, sizing)), CPUS, 1000.0)
    }

    fn logs(c: &mut Controller) -> Vec<(EventKind, Option<ReplicaId>, String)> {
        c.drain_events()
            .into_iter()
            .filter_map(|e| match e {
                ControlEvent::Log { kind, replica, detail, .. } => Some((kind, replica, detail)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_success_that_began_before_the_last_failure_is_stale() {
        // (check began, seen at, healthy after): r1 was refused at 10 s.
        for (began, at, healthy) in [(9.0, 10.5, false), (10.0, 10.5, true), (10.2, 11.0, true)] {
            let mut c = probed();
            c.probed(ReplicaId(0), Evidence::Refused, 10.0, 10.0);
            assert!(!c.is_healthy(ReplicaId(0)));
            c.probed(ReplicaId(0), Evidence::ProbeOk { ms: 1.0 }, began, at);
            assert_eq!(c.is_healthy(ReplicaId(0)), healthy, "began {began}");
        }
    }

    fn suspicion() -> Controller {
        let router = Router::new(RouterConfig::for_tests(Strategy::Rr, [1, 0, 1]));
        let watch = Watch::suspicion(2, Recovery::None, HealthConfig::default());
        Controller::new(router, watch, None, CPUS, 1000.0)
    }

    #[test]
    fn a_lost_connection_asks_for_a_probe_and_only_its_failure_removes_the_replica() {
        // (detector, what the confirming probe saw, healthy after, first event)
        type Case = (fn() -> Controller, Evidence, bool, Option<&'static str>);
        let cases: [Case; 5] = [
            (probed, Evidence::Refused, false, Some("down (probe after connection error)")),
            (probed, Evidence::ProbeOk { ms: 1.0 }, true, None),
            (probed, Evidence::ProbeTimeout, true, None),
            (suspicion, Evidence::Refused, false, Some("HEALTHY->ISOLATED (connection refused)")),
            (suspicion, Evidence::ProbeOk { ms: 1.0 }, true, None),
        ];
        for (i, (make, seen, healthy, first)) in cases.into_iter().enumerate() {
            let mut c = make();
            let asked = c.query_answered(ReplicaId(1), Err(QueryError::ConnectionLost), 1.0, 2.0);
            assert_eq!(asked, Some(Confirm(ReplicaId(1))), "case {i}");
            assert!(
                c.is_healthy(ReplicaId(1)) && logs(&mut c).is_empty(),
                "case {i}: a suspicion alone changes nothing"
            );
            let again = c.query_answered(ReplicaId(1), Err(QueryError::ConnectionLost), 1.0, 2.0);
            assert_eq!(again, None, "case {i}: one probe at a time per replica");
            c.confirmed(ReplicaId(1), seen, 2.0, 2.001);
            assert_eq!(c.is_healthy(ReplicaId(1)), healthy, "case {i}");
            assert_eq!(logs(&mut c).first().map(|l| l.2.as_str()), first, "case {i}");
            assert!(!c.confirming(ReplicaId(1)));
        }
    }

    #[test]
    fn a_server_error_is_no_evidence_and_other_answers_are_latency_under_suspicion() {
        // (detector, answer, healthy after one answer, first event)
        type Case = (fn() -> Controller, Result<f64, QueryError>, bool, Option<&'static str>);
        let cases: [Case; 6] = [
            (probed, Err(QueryError::Failed), true, None),
            (probed, Err(QueryError::Timeout), true, None),
            (probed, Ok(5.0), true, None),
            (suspicion, Err(QueryError::Failed), true, None),
            (suspicion, Err(QueryError::Timeout), true, Some("HEALTHY->SUSPECT (slow answer)")),
            (suspicion, Ok(5.0), true, None),
        ];
        for (i, (make, answer, healthy, first)) in cases.into_iter().enumerate() {
            let mut c = make();
            assert_eq!(c.query_answered(ReplicaId(1), answer, 1.0, 2.0), None, "case {i}");
            assert_eq!(c.is_healthy(ReplicaId(1)), healthy, "case {i}");
            assert_eq!(logs(&mut c).first().map(|l| l.2.as_str()), first, "case {i}");
        }
        let mut oracle = gated();
        assert_eq!(
            oracle.query_answered(ReplicaId(0), Err(QueryError::ConnectionLost), 1.0, 2.0),
            None,
            "the oracle reads no evidence"
        );
    }

    #[test]
    fn connect_failures_abort_the_session_and_a_refusal_is_confirmed() {
        let mut c = probed();
        assert_eq!(
            c.connect_failed(ReplicaId(2), ConnectError::Timeout, 1.0),
            (AbortReason::Connect(ConnectError::Timeout), None)
        );
        assert!(c.is_healthy(ReplicaId(2)), "a connect timeout is not proof of death for the probe detector");
        assert_eq!(c.connect_failed(ReplicaId(2), ConnectError::Full, 1.5).0.to_string(), "too many clients");
        assert!(c.is_healthy(ReplicaId(2)), "a full server is alive");
        let (why, asked) = c.connect_failed(ReplicaId(2), ConnectError::Refused, 2.0);
        assert_eq!((why.to_string(), asked), ("connect refused".to_string(), Some(Confirm(ReplicaId(2)))));
        assert!(c.is_healthy(ReplicaId(2)), "not before the probe");
        c.confirmed(ReplicaId(2), Evidence::Refused, 2.0, 2.001);
        assert!(!c.is_healthy(ReplicaId(2)));
        let want = (EventKind::Detect, Some(ReplicaId(2)), "down (probe after connection refused)".to_string());
        assert_eq!(logs(&mut c)[0], want);
        c.confirmed(ReplicaId(2), Evidence::Refused, 3.0, 3.0);
        assert!(logs(&mut c).is_empty(), "an answer nobody asked for is ignored");
    }

    #[test]
    fn a_success_begun_before_a_suspicion_is_stale() {
        let mut c = probed();
        c.probed(ReplicaId(0), Evidence::Refused, 1.0, 1.0);
        let _ = c.query_answered(ReplicaId(0), Err(QueryError::ConnectionLost), 2.0, 5.0);
        c.probed(ReplicaId(0), Evidence::ProbeOk { ms: 1.0 }, 4.0, 6.0);
        assert!(!c.is_healthy(ReplicaId(0)), "the probe began before the lost connection was seen");
        c.confirmed(ReplicaId(0), Evidence::ProbeOk { ms: 1.0 }, 5.0, 5.1);
        assert!(c.is_healthy(ReplicaId(0)), "the confirming probe began after it");
    }

    #[test]
    fn role_changes_are_logged_after_the_notes_that_caused_them() {
        let mut c = probed();
        c.probed(ReplicaId(0), Evidence::Refused, 1.0, 1.0);
        let kinds: Vec<EventKind> = logs(&mut c).iter().map(|l| l.0).collect();
        assert_eq!(kinds[0], EventKind::Detect);
        assert!(kinds.len() > 1 && kinds[1..].iter().all(|k| *k == EventKind::Role), "{kinds:?}");
    }

    #[test]
    fn a_queued_session_starts_when_another_ends_and_an_expired_one_is_rejected() {
        let mut c = gated();
        assert!(matches!(c.request(0, Class::F, 0.0), Admission::Route(_)));
        assert!(matches!(c.request(1, Class::F, 0.0), Admission::Route(_)));
        assert_eq!(
            c.request(2, Class::F, 1.0),
            Admission::Queued { deadline_s: 3.0 },
            "one Freemium session per replica"
        );
        assert_eq!(c.request(3, Class::F, 1.5), Admission::Queued { deadline_s: 3.5 });
        assert_eq!(c.waiting(), Some([0, 2]));
        let started = c.session_ended(ReplicaId(0), Class::F, 2.0);
        assert_eq!(started, [Admitted { client: 2, class: Class::F, replica: ReplicaId(0) }], "queue order");
        assert!(c.expire_waiting(3.4).is_empty());
        let gone = c.expire_waiting(3.5);
        assert_eq!((gone.len(), gone[0].client), (1, 3));
        let books: Vec<_> = c.drain_events().into_iter().filter(|e| !matches!(e, ControlEvent::Log { .. })).collect();
        let adm = |class, t_s, waited_s, from_queue, rejected| ControlEvent::Admission {
            class,
            t_s,
            waited_s,
            from_queue,
            rejected,
        };
        assert_eq!(
            books,
            [
                adm(Class::F, 0.0, 0.0, false, None),
                adm(Class::F, 0.0, 0.0, false, None),
                ControlEvent::Queued(Class::F),
                ControlEvent::Queued(Class::F),
                adm(Class::F, 2.0, 1.0, true, None),
                adm(Class::F, 3.5, 2.0, true, Some(REJECT_DEADLINE)),
            ]
        );
    }

    #[test]
    fn a_mode_change_is_one_event_and_a_skipped_reading_is_not_the_last() {
        let mut c = gated();
        let busy = |s: f64| [Some(s * 0.99 * CPUS); 2];
        // (time, reading, mode after, mode events)
        let steps: [(f64, [Option<f64>; 2], Mode, usize); 4] = [
            (1.0, busy(0.0), Mode::Normal, 0),
            (2.0, [None; 2], Mode::Normal, 0),
            (3.0, busy(2.0), Mode::Survival, 1),
            (4.0, busy(3.0), Mode::Survival, 0),
        ];
        for (t, reading, mode, events) in steps {
            let changed = c.sample(t, &reading, None);
            assert_eq!((c.mode(), changed.is_some()), (Some(mode), events == 1), "t {t}");
            let logged = logs(&mut c);
            assert_eq!(logged.len(), events, "t {t}");
            if events == 1 {
                assert_eq!(logged[0], (EventKind::Mode, None, "normal->survival".to_string()));
            }
        }
        assert_eq!(c.query_deadline_s(30.0), 30.0 * Mode::Survival.timeout_multiplier());
        assert_eq!(probed().query_deadline_s(30.0), 30.0, "no gate, no change");
    }

    #[test]
    fn the_oracle_is_told_and_faults_are_logged_at_their_time() {
        let router = Router::new(RouterConfig::for_tests(Strategy::Rr, [1, 0, 1]));
        let mut c = Controller::new(router, Watch::oracle(2, Recovery::None, HealthConfig::default()), None, CPUS, 1e3);
        c.fault(ReplicaId(1), "Down".into(), 5.0);
        c.told(ReplicaId(1), false, 5.25);
        c.probed(ReplicaId(1), Evidence::ProbeOk { ms: 1.0 }, 6.0, 6.0);
        assert_eq!(c.survivors(), 1, "the oracle ignores probes");
        let e = c.drain_events();
        assert_eq!(e.len(), 2);
        assert!(matches!(&e[0], ControlEvent::Log { t_s, kind: EventKind::Fault, .. } if *t_s == 5.0));
        assert!(matches!(&e[1], ControlEvent::Log { t_s, kind: EventKind::Detect, .. } if *t_s == 5.25));
    }
}
