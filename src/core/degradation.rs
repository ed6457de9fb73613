//! Graceful degradation ([admission
//! modes](docs/resilience.md#graceful-degradation-admission-modes), after
//! the HeliosDB seed): four modes entered by the worst of the signals,
//! left only when every signal is below threshold x hysteresis, and never
//! changed before a minimum time in the mode. Each mode fixes the lowest
//! admitted priority, the lower classes' share of a replica and the
//! statement timeout multiplier. Pure: the caller passes the time.
//!
//! The signals measure overload for the class being protected (revised
//! 2026-12-07), not a mean that a lower class's designed load fills: the
//! CPU of the top class's own replicas against their saturation point,
//! the top class's own wait read as the utilisation it implies, replica
//! memory, and the top class's sessions waiting for admission. A window in
//! which the gate held lower-class work back is no evidence that the
//! overload is gone (the shedding, not the demand, cleared it), so the mode
//! is not left then: that is what keeps an exit from flooding the load
//! back in and re-entering.

use super::model::Class;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A degradation mode, least to most degraded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Full capacity.
    Normal,
    /// Slightly restricted.
    Cautious,
    /// Significantly limited.
    Restricted,
    /// Minimal operations only.
    Survival,
}

impl Mode {
    /// Every mode in order (index = gauge value 0..3, as in the seed).
    pub const ALL: [Mode; 4] = [Mode::Normal, Mode::Cautious, Mode::Restricted, Mode::Survival];

    /// Gauge value: 0 = Normal .. 3 = Survival.
    pub fn idx(self) -> usize {
        self as usize
    }

    /// Lower-case name used in files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Cautious => "cautious",
            Mode::Restricted => "restricted",
            Mode::Survival => "survival",
        }
    }

    /// The lowest priority admitted in this mode (seed: all, all,
    /// Normal and above, Critical only).
    pub fn min_priority(self) -> Priority {
        match self {
            Mode::Normal | Mode::Cautious => Priority::Background,
            Mode::Restricted => Priority::Normal,
            Mode::Survival => Priority::Critical,
        }
    }

    /// Share of each replica's session limit usable in this mode (seed's
    /// resource allocation: 100/80/50/30 %).
    pub fn concurrency_share(self) -> f64 {
        [1.0, 0.8, 0.5, 0.3][self.idx()]
    }

    /// Statement timeout multiplier (seed: 1x/1.5x/2x/3x).
    pub fn timeout_multiplier(self) -> f64 {
        [1.0, 1.5, 2.0, 3.0][self.idx()]
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A session priority, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Analytics, reports, maintenance.
    Background,
    /// Standard workload.
    Normal,
    /// User-facing queries.
    High,
    /// Health checks and essential operations.
    Critical,
}

/// A threshold preset from the seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// CPU 80/90/95 %, memory 85/92/97 %, hysteresis 0.85, 30 s.
    Default,
    /// CPU 70/85/93 %, memory 75/88/95 %, hysteresis 0.90, 60 s.
    Conservative,
    /// CPU 85/93/97 %, memory 90/95/98 %, hysteresis 0.80, 15 s.
    Aggressive,
}

/// Thresholds of one metric for Cautious, Restricted and Survival.
pub type Levels = [f64; 3];

/// The `[degradation]` section of a workload file: a preset, optionally
/// overridden field by field. CPU and memory are in percent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DegradationKnobs {
    /// Threshold preset (default `default`).
    pub preset: Preset,
    /// CPU thresholds in percent [default: the preset's].
    pub cpu_pct: Option<Levels>,
    /// Memory thresholds in percent [default: the preset's].
    pub memory_pct: Option<Levels>,
    /// Admission queue depth thresholds [default 100, 500, 1000; the seed's
    /// presets leave them unchanged].
    pub queue: Option<Levels>,
    /// Leave a mode only below threshold x factor [default: the preset's].
    pub hysteresis_factor: Option<f64>,
    /// Minimum time in a mode, seconds before `--time-scale` [default: the preset's].
    pub min_mode_duration_s: Option<f64>,
    /// Priority of Premium sessions (default high).
    pub premium: Priority,
    /// Priority of Freemium sessions (default normal).
    pub freemium: Priority,
    /// Most sessions waiting for admission (default 1000).
    pub queue_capacity: usize,
    /// How long a session may wait for admission before it is rejected, ms
    /// (default 5000; a client deadline, so not time-scaled).
    pub queue_deadline_ms: u64,
    /// Sessions per replica at 100 % share; 0 = ceil(T / K) (default 0).
    pub replica_sessions: u32,
    /// Statements a replica runs at once at 100 % share (default 4): the
    /// concurrency at which `plbbench calibrate` measures a replica's
    /// costs (workloads/calibration-local.toml `connections`); one
    /// statement already saturates a 0.3-core quota, so a lower class held
    /// to a share of these keeps the replica busy and the top class's
    /// statements meet a short queue. PgBouncer's pool on the replica.
    pub statement_slots: u32,
    /// A replica's CPU at saturation, as a fraction of its budget (default
    /// 1.0: a CPU-bound replica in a cgroup saturates at its quota, and the
    /// simulator's server likewise). The CPU signal is read against it.
    pub saturation: f64,
    /// The top class's query service time, ms, the base of its wait
    /// signal; 0 = the workload's mean top-class query cost, its
    /// calibrated CPU time (default 0).
    pub service_ms: f64,
}

impl Default for DegradationKnobs {
    fn default() -> Self {
        DegradationKnobs {
            preset: Preset::Default,
            cpu_pct: None,
            memory_pct: None,
            queue: None,
            hysteresis_factor: None,
            min_mode_duration_s: None,
            premium: Priority::High,
            freemium: Priority::Normal,
            queue_capacity: 1000,
            queue_deadline_ms: 5000,
            replica_sessions: 0,
            statement_slots: 4,
            saturation: 1.0,
            service_ms: 0.0,
        }
    }
}

/// Resolved thresholds and timing of a manager.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// CPU percent per level.
    pub cpu_pct: Levels,
    /// Memory percent per level.
    pub memory_pct: Levels,
    /// Queue depth per level.
    pub queue: Levels,
    /// Hysteresis factor.
    pub hysteresis_factor: f64,
    /// Minimum time in a mode, seconds (already time-scaled).
    pub min_mode_duration_s: f64,
}

impl Thresholds {
    /// A seed preset, unscaled.
    pub fn preset(p: Preset) -> Thresholds {
        let (cpu_pct, memory_pct, hysteresis_factor, min_mode_duration_s) = match p {
            Preset::Default => ([80.0, 90.0, 95.0], [85.0, 92.0, 97.0], 0.85, 30.0),
            Preset::Conservative => ([70.0, 85.0, 93.0], [75.0, 88.0, 95.0], 0.90, 60.0),
            Preset::Aggressive => ([85.0, 93.0, 97.0], [90.0, 95.0, 98.0], 0.80, 15.0),
        };
        Thresholds { cpu_pct, memory_pct, queue: [100.0, 500.0, 1000.0], hysteresis_factor, min_mode_duration_s }
    }
}

impl DegradationKnobs {
    /// The thresholds after overrides, with the minimum duration scaled by
    /// `time_scale`.
    pub fn thresholds(&self, time_scale: f64) -> Thresholds {
        let mut t = Thresholds::preset(self.preset);
        t.cpu_pct = self.cpu_pct.unwrap_or(t.cpu_pct);
        t.memory_pct = self.memory_pct.unwrap_or(t.memory_pct);
        t.queue = self.queue.unwrap_or(t.queue);
        t.hysteresis_factor = self.hysteresis_factor.unwrap_or(t.hysteresis_factor);
        t.min_mode_duration_s = self.min_mode_duration_s.unwrap_or(t.min_mode_duration_s) * time_scale;
        t
    }

    /// The class the modes protect: the one of higher priority (Premium
    /// on a tie).
    pub fn top_class(&self) -> Class {
        if self.premium >= self.freemium {
            Class::P
        } else {
            Class::F
        }
    }

    /// A class's priority.
    pub fn priority(&self, class: Class) -> Priority {
        match class {
            Class::P => self.premium,
            Class::F => self.freemium,
        }
    }

    /// Checks ranges; the error is `(field, reason)`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        let levels = |field: &str, v: &Option<Levels>, max: f64| match v {
            Some(l) if !(l.iter().all(|x| x.is_finite() && *x > 0.0 && *x <= max) && l[0] <= l[1] && l[1] <= l[2]) => {
                Err((format!("degradation.{field}"), format!("must be three ascending numbers in (0, {max}]")))
            }
            _ => Ok(()),
        };
        levels("cpu_pct", &self.cpu_pct, 100.0)?;
        levels("memory_pct", &self.memory_pct, 100.0)?;
        levels("queue", &self.queue, f64::MAX)?;
        if let Some(h) = self.hysteresis_factor {
            if !(h > 0.0 && h <= 1.0) {
                return Err(("degradation.hysteresis_factor".into(), "must be in (0, 1]".into()));
            }
        }
        if let Some(d) = self.min_mode_duration_s {
            if !(d.is_finite() && d >= 0.0) {
                return Err(("degradation.min_mode_duration_s".into(), "must be a number of seconds >= 0".into()));
            }
        }
        if self.queue_capacity == 0 {
            return Err(("degradation.queue_capacity".into(), "must be at least 1".into()));
        }
        if self.statement_slots == 0 {
            return Err(("degradation.statement_slots".into(), "must be at least 1".into()));
        }
        if !(self.saturation > 0.0 && self.saturation <= 1.0) {
            return Err(("degradation.saturation".into(), "must be a fraction of the budget in (0, 1]".into()));
        }
        if !(self.service_ms.is_finite() && self.service_ms >= 0.0) {
            return Err(("degradation.service_ms".into(), "must be a number of milliseconds >= 0".into()));
        }
        Ok(())
    }
}

/// One observation of the load. `None` = not measured (it cannot raise
/// the mode; the simulator has no memory model).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// CPU of the top class's own replicas, percent of their saturation
    /// point (read against the seed's CPU thresholds).
    pub cpu_pct: Option<f64>,
    /// Replica memory utilisation, percent (the highest replica's).
    pub memory_pct: Option<f64>,
    /// The utilisation the top class's own wait implies, percent
    /// ([`implied_utilisation_pct`]; read against the CPU thresholds).
    pub wait_pct: Option<f64>,
    /// Top-class sessions waiting for admission (fresh demand, not retries).
    pub queue: f64,
    /// The gate held lower-class work back (a statement or a session on
    /// the top class's replicas) since the last observation.
    pub held: bool,
}

/// The utilisation, percent, that a wait implies on a processor-sharing
/// server (a CPU-bound replica): there a job of service time `S` takes
/// `S / (1 - rho)`, so the least latency `t_min` seen over a window, which
/// is what a job meets when the standing queue is shortest (CoDel's rule),
/// gives `rho = 1 - S / t_min`. 0 when `t_min <= S`.
pub fn implied_utilisation_pct(t_min_ms: f64, service_ms: f64) -> f64 {
    if !(t_min_ms > service_ms && service_ms > 0.0) {
        return 0.0;
    }
    100.0 * (1.0 - service_ms / t_min_ms)
}

/// A mode change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    /// When.
    pub t_s: f64,
    /// Mode before.
    pub from: Mode,
    /// Mode after.
    pub to: Mode,
}

/// What the signals did while the mode was degraded, for the run's books:
/// a mode that outlives its signals is a defect the tests look for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModeBooks {
    /// The longest stretch, seconds, spent in a degraded mode while every
    /// signal (held work included) allowed a lower one: at most the
    /// minimum time in a mode, plus a sample's second, when the mode is
    /// left as it should be.
    pub longest_clear_s: f64,
    /// Seconds in a degraded mode that only held lower-class work kept
    /// there (every other signal allowed a lower mode).
    pub held_s: f64,
}

/// The degradation manager: current mode, when it began, counters.
#[derive(Clone, Debug)]
pub struct Manager {
    th: Thresholds,
    mode: Mode,
    since_s: f64,
    last_s: f64,
    transitions: u64,
    time_in_s: [f64; 4],
    /// Since when every signal has allowed a lower mode (in a degraded one).
    clear_since: Option<f64>,
    books: ModeBooks,
}

/// The highest level (1..=3) whose threshold x `factor` `v` reaches; 0 if none.
fn level(v: Option<f64>, th: &Levels, factor: f64) -> usize {
    v.map_or(0, |v| th.iter().filter(|t| v >= *t * factor).count())
}

impl Manager {
    /// A manager in Normal mode at time 0.
    pub fn new(th: Thresholds) -> Manager {
        Manager {
            th,
            mode: Mode::Normal,
            since_s: 0.0,
            last_s: 0.0,
            transitions: 0,
            time_in_s: [0.0; 4],
            clear_since: None,
            books: ModeBooks::default(),
        }
    }

    /// What the signals did while the mode was degraded.
    pub fn books(&self) -> ModeBooks {
        self.books
    }

    /// The current mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Mode changes so far.
    pub fn transitions(&self) -> u64 {
        self.transitions
    }

    /// Seconds spent in each mode up to the last observation.
    pub fn time_in_s(&self) -> [f64; 4] {
        self.time_in_s
    }

    /// The thresholds in use.
    pub fn thresholds(&self) -> &Thresholds {
        &self.th
    }

    /// The mode the load asks for, ignoring the minimum duration: up to the
    /// worst metric's level; down only to the worst level still reached at
    /// threshold x hysteresis.
    pub fn target(&self, load: &Load) -> Mode {
        let th = &self.th;
        let at = |f: f64| {
            let cpu = level(load.cpu_pct, &th.cpu_pct, f).max(level(load.wait_pct, &th.cpu_pct, f));
            cpu.max(level(load.memory_pct, &th.memory_pct, f)).max(level(Some(load.queue), &th.queue, f))
        };
        let up = at(1.0);
        let hold = if load.held { self.mode.idx() } else { at(th.hysteresis_factor).min(self.mode.idx()) };
        Mode::ALL[up.max(hold)]
    }

    /// Observes the load at `t_s`; returns the transition if the mode changed.
    pub fn observe(&mut self, t_s: f64, load: &Load) -> Option<Transition> {
        let dt = (t_s - self.last_s).max(0.0);
        self.time_in_s[self.mode.idx()] += dt;
        self.last_s = self.last_s.max(t_s);
        let to = self.target(load);
        self.keep_books(t_s, dt, load, to);
        if to == self.mode || t_s - self.since_s < self.th.min_mode_duration_s {
            return None;
        }
        let tr = Transition { t_s, from: self.mode, to };
        self.mode = to;
        self.since_s = t_s;
        self.transitions += 1;
        self.clear_since = None;
        Some(tr)
    }

    /// Counts a degraded mode's clear stretches and its time held only by
    /// held work, given the mode the signals ask for (`to`).
    fn keep_books(&mut self, t_s: f64, dt: f64, load: &Load, to: Mode) {
        if self.mode == Mode::Normal || to >= self.mode {
            self.clear_since = None;
        } else {
            let since = *self.clear_since.get_or_insert(t_s);
            self.books.longest_clear_s = self.books.longest_clear_s.max(t_s - since);
        }
        if self.mode != Mode::Normal && load.held && self.target(&Load { held: false, ..*load }) < self.mode {
            self.books.held_s += dt;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(v: f64) -> Load {
        Load { cpu_pct: Some(v), ..Default::default() }
    }

    #[test]
    fn a_wait_reads_as_the_utilisation_it_implies() {
        assert_eq!(implied_utilisation_pct(1.0, 1.14), 0.0, "faster than the service time: no queue");
        assert!((implied_utilisation_pct(5.7, 1.14) - 80.0).abs() < 1e-9, "5x the service time: 80 %");
        let m = Manager::new(Thresholds::preset(Preset::Default));
        let wait = |t_ms| Load { wait_pct: Some(implied_utilisation_pct(t_ms, 1.0)), ..Default::default() };
        assert_eq!(m.target(&wait(4.0)), Mode::Normal);
        assert_eq!(m.target(&wait(5.0)), Mode::Cautious);
        assert_eq!(m.target(&wait(10.0)), Mode::Restricted);
        assert_eq!(m.target(&wait(20.0)), Mode::Survival);
    }

    #[test]
    fn held_work_is_no_evidence_the_overload_ended() {
        // Survival entered on the top class's wait; the gate then holds the
        // lower class back and the wait clears. While it holds, the clear
        // wait is the shedding's doing: the mode stays. Once nothing was
        // held for a window, the clear signals let it go (one transition).
        let mut m = Manager::new(Thresholds::preset(Preset::Default));
        let survival = Load { wait_pct: Some(99.0), ..Default::default() };
        assert_eq!(m.observe(30.0, &survival).map(|t| t.to), Some(Mode::Survival));
        let shed = Load { wait_pct: Some(0.0), cpu_pct: Some(20.0), held: true, ..Default::default() };
        for t in 61..200 {
            assert_eq!(m.observe(f64::from(t), &shed), None, "held at {t} s");
        }
        assert_eq!(m.books().held_s, 169.0, "30-199 s held only by shedding");
        let clear = Load { held: false, ..shed };
        assert_eq!(m.observe(200.0, &clear).map(|t| t.to), Some(Mode::Normal));
        assert_eq!(m.transitions(), 2);
        assert_eq!(m.books().longest_clear_s, 0.0, "left the first second it could");
    }

    #[test]
    fn hysteresis_and_min_duration_prevent_thrashing() {
        // CPU oscillates 82 % / 75 % every second for 10 minutes: above the
        // Cautious threshold, then below it but above 80 x 0.85 = 68 %.
        let mut m = Manager::new(Thresholds::preset(Preset::Default));
        let mut changes = 0;
        for t in 0..600 {
            let v = if t % 2 == 0 { 82.0 } else { 75.0 };
            changes += m.observe(f64::from(t), &cpu(v)).is_some() as u32;
        }
        assert_eq!((changes, m.mode()), (1, Mode::Cautious), "entered once, never left");
        // Without hysteresis (factor 1) but with the 30 s minimum, the mode
        // may flip at most once per 30 s.
        let mut th = Thresholds::preset(Preset::Default);
        th.hysteresis_factor = 1.0;
        let mut m = Manager::new(th.clone());
        let mut changes = 0;
        for t in 0..600 {
            let v = if t % 2 == 0 { 82.0 } else { 75.0 };
            changes += m.observe(f64::from(t), &cpu(v)).is_some() as u32;
        }
        assert!(changes <= 600 / 30 + 1, "{changes} changes");
        // With neither, it flips nearly every second: the test can fail.
        th.min_mode_duration_s = 0.0;
        let mut m = Manager::new(th);
        let changes: u32 = (0..600)
            .map(|t| m.observe(f64::from(t), &cpu(if t % 2 == 0 { 82.0 } else { 75.0 })).is_some() as u32)
            .sum();
        assert!(changes > 500, "{changes}");
    }

    #[test]
    fn leaves_only_below_threshold_times_factor_after_min_duration() {
        let mut m = Manager::new(Thresholds::preset(Preset::Default));
        assert_eq!(m.observe(31.0, &cpu(91.0)).map(|t| t.to), Some(Mode::Restricted));
        assert_eq!(m.observe(40.0, &cpu(10.0)), None, "too soon");
        assert_eq!(m.observe(70.0, &cpu(77.0)), None, "77 >= 90 x 0.85 = 76.5 holds Restricted");
        assert_eq!(m.observe(71.0, &cpu(76.0)).map(|t| t.to), Some(Mode::Cautious), "68 <= 76 < 76.5");
        assert_eq!(m.time_in_s()[Mode::Restricted.idx()], 40.0);
    }

    #[test]
    fn the_worst_metric_wins() {
        let mut m = Manager::new(Thresholds::preset(Preset::Default));
        let load = Load { cpu_pct: Some(81.0), memory_pct: Some(93.0), queue: 1000.0, ..Default::default() };
        assert_eq!(m.target(&load), Mode::Survival, "queue 1000 reaches Survival");
        let load = Load { cpu_pct: Some(81.0), memory_pct: Some(93.0), queue: 10.0, ..Default::default() };
        assert_eq!(m.target(&load), Mode::Restricted, "memory 93 % reaches Restricted");
        m.observe(30.0, &load);
        assert_eq!(m.mode(), Mode::Restricted);
    }

    #[test]
    fn each_preset_applies_its_thresholds() {
        let knobs = |p| DegradationKnobs { preset: p, ..Default::default() };
        for (p, cpu_t, mem_t, h, d) in [
            (Preset::Default, [80.0, 90.0, 95.0], [85.0, 92.0, 97.0], 0.85, 30.0),
            (Preset::Conservative, [70.0, 85.0, 93.0], [75.0, 88.0, 95.0], 0.90, 60.0),
            (Preset::Aggressive, [85.0, 93.0, 97.0], [90.0, 95.0, 98.0], 0.80, 15.0),
        ] {
            let th = knobs(p).thresholds(0.5);
            assert_eq!((th.hysteresis_factor, th.min_mode_duration_s), (h, d * 0.5), "{p:?}");
            let m = Manager::new(th);
            for (i, mode) in [Mode::Cautious, Mode::Restricted, Mode::Survival].into_iter().enumerate() {
                assert_eq!(m.target(&cpu(cpu_t[i])), mode, "{p:?} cpu {}", cpu_t[i]);
                assert_eq!(m.target(&cpu(cpu_t[i] - 0.5)), Mode::ALL[i], "{p:?} just below");
                let mem = Load { memory_pct: Some(mem_t[i]), ..Default::default() };
                assert_eq!(m.target(&mem), mode, "{p:?} memory {}", mem_t[i]);
            }
        }
    }

    #[test]
    fn overrides_and_bad_values_name_the_field() {
        let k = DegradationKnobs { cpu_pct: Some([50.0, 60.0, 70.0]), ..Default::default() };
        assert_eq!(k.thresholds(1.0).cpu_pct, [50.0, 60.0, 70.0]);
        let k = DegradationKnobs { cpu_pct: Some([90.0, 60.0, 70.0]), ..Default::default() };
        assert_eq!(k.validate().unwrap_err().0, "degradation.cpu_pct");
        let k = DegradationKnobs { hysteresis_factor: Some(1.5), ..Default::default() };
        assert_eq!(k.validate().unwrap_err().0, "degradation.hysteresis_factor");
    }

    #[test]
    fn mode_tables_follow_the_seed() {
        let p: Vec<_> = Mode::ALL.iter().map(|m| m.min_priority()).collect();
        assert_eq!(p, [Priority::Background, Priority::Background, Priority::Normal, Priority::Critical]);
        let s: Vec<_> = Mode::ALL.iter().map(|m| m.concurrency_share()).collect();
        assert_eq!(s, [1.0, 0.8, 0.5, 0.3]);
        let x: Vec<_> = Mode::ALL.iter().map(|m| m.timeout_multiplier()).collect();
        assert_eq!(x, [1.0, 1.5, 2.0, 3.0]);
    }
}
