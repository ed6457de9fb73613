//! One replica as the simulator models it (design.md §6): a
//! processor-sharing server under a CFS bandwidth quota, with its jobs in
//! service (clients' queries and connection set-ups, backends' exits) and
//! its connection count. Pure state and arithmetic; `sim` decides when it
//! runs.

use super::prefetch::prefetch_line;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};

/// The CFS bandwidth period, seconds (the local backend writes 100 ms).
pub const PERIOD_S: f64 = 0.1;
/// The most cores one replica's processes use at once in the model: the
/// host's cores are shared by every replica and the generator.
pub const BURST_CORES: f64 = 1.0;
/// CPU seconds below which a period's quota counts as spent.
pub const SPENT: f64 = 1e-12;
/// The client index of a job no client waits for (a backend's exit).
pub const BACKGROUND: u32 = u32::MAX;

/// A replica as a processor-sharing server.
pub struct Server {
    pub up: bool,
    pub paused: bool,
    /// Partitioned: alive, but its connections hang (modelled as no progress).
    pub partitioned: bool,
    /// Fraction of the budget C the server has (1 unless Slow).
    share: f64,
    /// Virtual time: the CPU seconds each job in service has received.
    pub v: f64,
    last_t: f64,
    pub cpu_s: f64,
    /// The clients' jobs `(virtual finish, client, job)`, first to finish
    /// on top. A job that times out is only marked in `gone` and leaves
    /// when it reaches the top: time-outs are rare, and a heap with
    /// positions (to take a job out of the middle) cost a hash-map write
    /// per move, a tenth of a fleet run's time.
    jobs: BinaryHeap<Reverse<Job>>,
    /// The jobs in `jobs` that timed out.
    gone: HashSet<(u32, u64)>,
    /// Backends' exits (no client waits for them), by virtual finish time.
    background: BinaryHeap<Reverse<u64>>,
    /// CPU seconds left of this period's quota.
    pub budget: f64,
    /// When the current quota period ends.
    pub period_end: f64,
    /// Client connections open on it (being set up or in a session).
    pub connections: u32,
    /// Logins waiting for the postmaster's fork, first come first served;
    /// the first is in service (its job is among `jobs`).
    pub postmaster: VecDeque<(u32, u64)>,
}

impl Server {
    pub fn new() -> Server {
        Server {
            up: true,
            paused: false,
            partitioned: false,
            share: 1.0,
            v: 0.0,
            last_t: 0.0,
            cpu_s: 0.0,
            jobs: BinaryHeap::new(),
            gone: HashSet::new(),
            background: BinaryHeap::new(),
            budget: 0.0,
            period_end: 0.0,
            connections: 0,
            postmaster: VecDeque::new(),
        }
    }

    /// Whether its clients see no progress (paused or partitioned).
    pub fn stalled(&self) -> bool {
        self.paused || self.partitioned
    }

    /// Per-job rate: the jobs share up to [`BURST_CORES`] (at most one
    /// core each) while the period's quota lasts, nothing once it is spent.
    pub fn rate(&self) -> f64 {
        if self.stalled() || self.n() == 0 || self.budget <= SPENT {
            0.0
        } else {
            (BURST_CORES / self.n() as f64).min(1.0)
        }
    }

    /// A new quota (`share` of C), in force at once: writing `cpu.max`
    /// gives the current period the new quota, as the kernel does.
    pub fn requota(&mut self, share: f64, cpus: f64) {
        self.share = share;
        self.budget = cpus * share * PERIOD_S;
    }

    /// Cores in use now.
    pub fn speed(&self) -> f64 {
        self.rate() * self.n() as f64
    }

    /// Runs the jobs from `last_t` to `t` (no period boundary or spent
    /// quota lies in between: `Sim::reschedule` puts an event there),
    /// then starts a new period with a full quota if `t` is past the
    /// current one's end (`cpus` x share x period).
    pub fn advance(&mut self, t: f64, cpus: f64) {
        let dt = t - self.last_t;
        if dt > 0.0 {
            let used = (dt * self.speed()).min(self.budget.max(0.0));
            self.v += dt * self.rate();
            self.cpu_s += used;
            self.budget -= used;
        }
        self.last_t = t;
        if t >= self.period_end - SPENT {
            self.budget = cpus * self.share * PERIOD_S;
            self.period_end = ((t + SPENT) / PERIOD_S).floor() * PERIOD_S + PERIOD_S;
        }
    }

    /// Starts loading the ends of its job heap: where a push lands and
    /// where a pop starts.
    pub fn prefetch_jobs(&self) {
        let jobs = self.jobs.as_slice();
        prefetch_line(jobs.as_ptr().cast());
        prefetch_line(jobs.as_ptr().wrapping_add(jobs.len()).cast());
    }

    /// Jobs in service.
    pub fn n(&self) -> usize {
        self.jobs.len() - self.gone.len() + self.background.len()
    }

    /// Puts job `q` of client `c` (or a [`BACKGROUND`] job) needing
    /// `demand_s` CPU seconds in service; call [`Server::advance`] first.
    pub fn push(&mut self, c: u32, q: u64, demand_s: f64) {
        let finish = key(self.v + demand_s);
        if c == BACKGROUND {
            self.background.push(Reverse(finish));
        } else {
            self.jobs.push(Reverse((finish, c, q)));
        }
    }

    /// The next job to finish: its virtual finish time and client (a
    /// client's job before a background one finishing at the same time).
    pub fn next(&self) -> Option<(f64, u32)> {
        let job = self.jobs.peek().map(|&Reverse((fv, c, _))| (fv, c));
        let bg = self.background.peek().map(|&Reverse(fv)| (fv, BACKGROUND));
        let first = match (job, bg) {
            (Some(j), Some(b)) => j.min(b),
            (j, b) => j.or(b)?,
        };
        Some((f64::from_bits(first.0), first.1))
    }

    /// Takes the next job to finish out of service; returns its client.
    pub fn pop(&mut self) -> Option<u32> {
        let (_, c) = self.next()?;
        if c == BACKGROUND {
            self.background.pop();
        } else {
            self.jobs.pop();
            self.skip_gone();
        }
        Some(c)
    }

    /// Takes job `q` of client `c`, which is in service, out of it (it
    /// timed out).
    pub fn cancel(&mut self, c: u32, q: u64) {
        self.gone.insert((c, q));
        self.skip_gone();
    }

    /// Drops the timed-out jobs from the top, so the top is a job in service.
    fn skip_gone(&mut self) {
        while let Some(&Reverse((_, c, q))) = self.jobs.peek().filter(|_| !self.gone.is_empty()) {
            if !self.gone.remove(&(c, q)) {
                return;
            }
            self.jobs.pop();
        }
    }

    /// Empties the server (it died): the clients' jobs, first to finish first.
    pub fn drain(&mut self) -> Vec<(u32, u64)> {
        self.background.clear();
        let gone = std::mem::take(&mut self.gone);
        let jobs = std::mem::take(&mut self.jobs).into_sorted_vec();
        jobs.into_iter().rev().map(|Reverse((_, c, q))| (c, q)).filter(|job| !gone.contains(job)).collect()
    }
}

/// A job in service: `(virtual finish time as bits, client, job number)`.
type Job = (u64, u32, u64);

/// A time or virtual time as a heap key (times are never negative).
pub fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}
