//! What `plbbench compare` compares, as plain data: the metrics it knows and
//! which way is better, the folders it read (one cell per strategy, mix,
//! fault preset, phase and class), and the side-by-side table with deltas
//! against the baseline folder. Pure: the folders are read in `load.rs`,
//! the table is rendered in `render.rs`.

use crate::core::metrics::PhaseRow;
use crate::core::model::Class;
use crate::core::phases::WARMUP;
use serde::Serialize;
use std::fmt;

/// A figure `compare` shows and gates on (design.md §4, phases.csv columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Goodput, queries/s (higher is better).
    GoodputQps,
    /// Goodput relative to the class's baseline phase (higher is better).
    Retention,
    /// Median latency, ms (lower is better).
    P50Ms,
    /// p95 latency, ms (lower is better).
    P95Ms,
    /// p99 latency, ms (lower is better).
    P99Ms,
    /// p95 relative to the class's baseline phase (lower is better).
    InflationP95,
    /// Mean observed session lifetime, s (lower is better: sessions finish sooner).
    LifetimeMeanS,
    /// p95 observed session lifetime, s (lower is better).
    LifetimeP95S,
    /// Failed queries (lower is better).
    Errors,
    /// Aborted sessions (lower is better).
    AbortedSessions,
    /// u_mean over available replicas (neither: it is how busy, not how good).
    CpuMean,
    /// CV of u over available replicas (lower is better: load is more even).
    CpuCv,
}

/// Which way a metric improves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Higher values are better.
    Higher,
    /// Lower values are better.
    Lower,
    /// Neither direction is better (informational).
    Neither,
}

impl Metric {
    /// Every metric, in table order.
    pub const ALL: [Metric; 12] = [
        Metric::GoodputQps,
        Metric::Retention,
        Metric::P50Ms,
        Metric::P95Ms,
        Metric::P99Ms,
        Metric::InflationP95,
        Metric::LifetimeMeanS,
        Metric::LifetimeP95S,
        Metric::Errors,
        Metric::AbortedSessions,
        Metric::CpuMean,
        Metric::CpuCv,
    ];

    /// The metrics shown when `--metrics` is not given.
    pub const DEFAULT: [Metric; 8] = [
        Metric::GoodputQps,
        Metric::Retention,
        Metric::P95Ms,
        Metric::InflationP95,
        Metric::LifetimeMeanS,
        Metric::AbortedSessions,
        Metric::CpuMean,
        Metric::CpuCv,
    ];

    /// Metrics an experiment folder holds (medians and quartiles across repeats).
    pub const EXPERIMENT: [Metric; 7] = [
        Metric::GoodputQps,
        Metric::Retention,
        Metric::P95Ms,
        Metric::InflationP95,
        Metric::LifetimeMeanS,
        Metric::CpuMean,
        Metric::CpuCv,
    ];

    /// The phases.csv column name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::GoodputQps => "goodput_qps",
            Metric::Retention => "retention",
            Metric::P50Ms => "p50_ms",
            Metric::P95Ms => "p95_ms",
            Metric::P99Ms => "p99_ms",
            Metric::InflationP95 => "inflation_p95",
            Metric::LifetimeMeanS => "lifetime_mean_s",
            Metric::LifetimeP95S => "lifetime_p95_s",
            Metric::Errors => "errors",
            Metric::AbortedSessions => "aborted_sessions",
            Metric::CpuMean => "cpu_mean",
            Metric::CpuCv => "cpu_cv",
        }
    }

    /// A metric by column name or short alias (`goodput`, `p95`, `inflation`,
    /// `lifetime`, `aborted`, `u_mean`, `cv`), case-insensitive.
    pub fn parse(s: &str) -> Option<Metric> {
        let s = s.trim().to_ascii_lowercase();
        let alias = match s.as_str() {
            "goodput" => Some(Metric::GoodputQps),
            "p50" => Some(Metric::P50Ms),
            "p95" => Some(Metric::P95Ms),
            "p99" => Some(Metric::P99Ms),
            "inflation" => Some(Metric::InflationP95),
            "lifetime" => Some(Metric::LifetimeMeanS),
            "aborted" => Some(Metric::AbortedSessions),
            "u_mean" => Some(Metric::CpuMean),
            "cv" => Some(Metric::CpuCv),
            _ => None,
        };
        alias.or_else(|| Metric::ALL.into_iter().find(|m| m.name() == s))
    }

    /// Which way the metric improves.
    pub fn better(self) -> Better {
        match self {
            Metric::GoodputQps | Metric::Retention => Better::Higher,
            Metric::CpuMean => Better::Neither,
            _ => Better::Lower,
        }
    }

    /// True for figures of the whole phase (the same for both classes).
    pub fn per_phase(self) -> bool {
        matches!(self, Metric::CpuMean | Metric::CpuCv)
    }

    /// True when tables show the change in percent; false for an absolute
    /// change (ratios, fractions and counts).
    pub fn relative(self) -> bool {
        matches!(
            self,
            Metric::GoodputQps
                | Metric::P50Ms
                | Metric::P95Ms
                | Metric::P99Ms
                | Metric::LifetimeMeanS
                | Metric::LifetimeP95S
        )
    }

    /// True for counts (shown as whole numbers).
    pub fn count(self) -> bool {
        matches!(self, Metric::Errors | Metric::AbortedSessions)
    }

    /// A value of this metric for tables: whole numbers for counts, else
    /// three significant digits.
    pub fn format(self, v: f64) -> String {
        if self.count() && v.fract() == 0.0 && v.abs() < 1e15 {
            format!("{v:.0}")
        } else {
            crate::report::charts::sig3(v)
        }
    }

    /// The metric's value in a phases.csv row.
    pub fn of_row(self, r: &PhaseRow) -> Option<f64> {
        match self {
            Metric::GoodputQps => Some(r.goodput_qps),
            Metric::Retention => r.retention,
            Metric::P50Ms => r.p50_ms,
            Metric::P95Ms => r.p95_ms,
            Metric::P99Ms => r.p99_ms,
            Metric::InflationP95 => r.inflation_p95,
            Metric::LifetimeMeanS => r.lifetime_mean_s,
            Metric::LifetimeP95S => r.lifetime_p95_s,
            Metric::Errors => Some(r.errors as f64),
            Metric::AbortedSessions => Some(r.aborted_sessions as f64),
            Metric::CpuMean => r.cpu_mean,
            Metric::CpuCv => r.cpu_cv,
        }
    }

    fn idx(self) -> usize {
        Metric::ALL.iter().position(|m| *m == self).expect("every metric is in ALL")
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A run folder or an experiment folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One run (summary.json, phases.csv).
    Run,
    /// A grid of runs summarised as medians (experiment.json, experiment.csv).
    Experiment,
}

/// Which cell of a grid: strategy, mix and fault preset.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Selection {
    /// Strategy.
    pub strategy: String,
    /// Mix `P:F`.
    pub mix: String,
    /// Fault preset or schedule file.
    pub faults: String,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.strategy, self.mix, self.faults)
    }
}

/// One figure: a run's value, or an experiment's median with its quartiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Value {
    /// The value (median for experiments); `None` when there is none.
    pub value: Option<f64>,
    /// First quartile across repeats (experiments only).
    pub q1: Option<f64>,
    /// Third quartile across repeats (experiments only).
    pub q3: Option<f64>,
    /// Runs that had a value (1 for a run).
    pub n: usize,
}

impl Value {
    /// A single run's value.
    pub fn single(v: Option<f64>) -> Value {
        Value { value: v, q1: None, q3: None, n: usize::from(v.is_some()) }
    }
}

/// Every figure of one (selection, phase, class).
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Strategy, mix, faults.
    pub sel: Selection,
    /// Phase name.
    pub phase: String,
    /// Survivors K+ in the phase.
    pub survivors: usize,
    /// Class.
    pub class: Class,
    /// One value per [`Metric::ALL`] entry.
    pub values: [Value; 12],
}

impl Cell {
    /// The value of `m`.
    pub fn get(&self, m: Metric) -> Value {
        self.values[m.idx()]
    }

    /// The cell of a phases.csv row.
    pub fn of_row(sel: &Selection, r: &PhaseRow) -> Cell {
        Cell {
            sel: sel.clone(),
            phase: r.phase.clone(),
            survivors: r.survivors,
            class: r.class,
            values: Metric::ALL.map(|m| Value::single(m.of_row(r))),
        }
    }
}

/// What the folder says about itself, for headers and the archive.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Info {
    /// Strategies (one for a run).
    pub strategies: Vec<String>,
    /// Mixes.
    pub mixes: Vec<String>,
    /// Fault presets or files.
    pub faults: Vec<String>,
    /// Clients T.
    pub clients: Option<u32>,
    /// Replicas K.
    pub replicas: Option<usize>,
    /// Cluster backend.
    pub cluster: String,
    /// Time scale.
    pub time_scale: Option<f64>,
    /// Seed (of the first run for experiments).
    pub seed: Option<u64>,
    /// Repeats per cell (experiments).
    pub repeat: Option<u32>,
    /// Runs in the folder (1 for a run).
    pub runs: usize,
    /// When it started, UTC RFC 3339, if recorded.
    pub started_utc: Option<String>,
    /// True when the run was interrupted.
    pub partial: bool,
    /// The file the figures were read from.
    pub source: String,
}

/// A folder read for comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Folder {
    /// The folder as given on the command line.
    pub dir: String,
    /// Run or experiment.
    pub kind: Kind,
    /// Settings and provenance.
    pub info: Info,
    /// The metrics the folder holds.
    pub metrics: Vec<Metric>,
    /// Every (selection, phase, class), warm-up left out, in file order.
    pub cells: Vec<Cell>,
}

impl Folder {
    /// Selections in order of first appearance.
    pub fn selections(&self) -> Vec<&Selection> {
        let mut out: Vec<&Selection> = Vec::new();
        for c in &self.cells {
            if !out.contains(&&c.sel) {
                out.push(&c.sel);
            }
        }
        out
    }

    /// Phases of `sel` in order, with their survivors.
    pub fn phases(&self, sel: &Selection) -> Vec<(&str, usize)> {
        let mut out: Vec<(&str, usize)> = Vec::new();
        for c in self.cells.iter().filter(|c| &c.sel == sel) {
            if !out.iter().any(|p| p.0 == c.phase) {
                out.push((&c.phase, c.survivors));
            }
        }
        out
    }

    /// The cell of `sel`, `phase` and `class`.
    pub fn cell(&self, sel: &Selection, phase: &str, class: Class) -> Option<&Cell> {
        self.cells.iter().find(|c| &c.sel == sel && c.phase == phase && c.class == class)
    }

    /// True when the folder holds metric `m`.
    pub fn has(&self, m: Metric) -> bool {
        self.metrics.contains(&m)
    }
}

/// The selection of `other` that is compared with `base`'s selection `sel`:
/// two run folders are compared as they are, whatever their settings; with
/// an experiment on either side, cells are matched by strategy, mix and faults.
pub fn partner<'a>(base: &Folder, sel: &Selection, other: &'a Folder) -> Option<&'a Selection> {
    if base.kind == Kind::Run && other.kind == Kind::Run {
        return other.cells.first().map(|c| &c.sel);
    }
    other.cells.iter().map(|c| &c.sel).find(|s| *s == sel)
}

/// How a value compares with the baseline's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Better in the metric's direction.
    Good,
    /// Worse in the metric's direction.
    Bad,
    /// Equal to the baseline.
    Same,
    /// Different, but inside the noise band ([`NOISE_PCT`] for single
    /// values; overlapping interquartile ranges across repeats).
    Noise,
    /// Changed, but the metric has no better direction.
    Changed,
    /// One side has no value.
    Unknown,
}

/// The change of one value against the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Delta {
    /// `new - base`.
    pub abs: Option<f64>,
    /// `(new / base - 1) * 100`; infinite when the base is 0 and the new value is not.
    pub pct: Option<f64>,
    /// Good or bad, in the metric's direction.
    pub verdict: Verdict,
}

/// A relative change below this, %, is noise between two single values:
/// run-to-run spread of a real cluster's goodput is about 1%, and a
/// simulator's figures change only with the seed.
pub const NOISE_PCT: f64 = 2.0;

/// The change of `new` against `base` for metric `m`: between medians of
/// repeats it counts (good or bad) only when the interquartile ranges do
/// not overlap; between single values only beyond [`NOISE_PCT`].
pub fn delta_of(m: Metric, base: Option<Value>, new: Option<Value>) -> Delta {
    let d = delta(m, base.and_then(|v| v.value), new.and_then(|v| v.value));
    let iqr = |v: Option<Value>| v.and_then(|v| v.q1.zip(v.q3).filter(|_| v.n >= 2));
    match (iqr(base), iqr(new), d.verdict) {
        (Some((b1, b3)), Some((n1, n3)), Verdict::Good | Verdict::Bad) if n1 <= b3 && b1 <= n3 => {
            Delta { verdict: Verdict::Noise, ..d }
        }
        (Some(_), Some(_), _) => d,
        (_, _, Verdict::Good | Verdict::Bad | Verdict::Changed) if d.pct.is_some_and(|p| p.abs() < NOISE_PCT) => {
            Delta { verdict: Verdict::Noise, ..d }
        }
        _ => d,
    }
}

/// Absolute and relative change of `new` against `base` for metric `m`,
/// with its direction and no noise band.
pub fn delta(m: Metric, base: Option<f64>, new: Option<f64>) -> Delta {
    let (Some(b), Some(n)) = (base, new) else {
        return Delta { abs: None, pct: None, verdict: Verdict::Unknown };
    };
    let abs = n - b;
    let pct = relative_change(b, n);
    let verdict = match (abs.partial_cmp(&0.0), m.better()) {
        (Some(std::cmp::Ordering::Equal), _) => Verdict::Same,
        (_, Better::Neither) => Verdict::Changed,
        (Some(std::cmp::Ordering::Greater), Better::Higher) | (Some(std::cmp::Ordering::Less), Better::Lower) => {
            Verdict::Good
        }
        (Some(_), _) => Verdict::Bad,
        (None, _) => Verdict::Unknown,
    };
    Delta { abs: Some(abs), pct: Some(pct), verdict }
}

/// `(new / base - 1) * 100`; 0 when both are 0, ±infinity when only the base is.
pub fn relative_change(base: f64, new: f64) -> f64 {
    if base == 0.0 {
        if new == 0.0 {
            0.0
        } else {
            f64::INFINITY.copysign(new)
        }
    } else {
        (new / base - 1.0) * 100.0
    }
}

/// One line of the side-by-side table.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Phase.
    pub phase: String,
    /// Survivors K+ in the phase (the first folder's that has it).
    pub survivors: usize,
    /// Class; `None` for figures of the whole phase (CPU).
    pub class: Option<Class>,
    /// Metric.
    pub metric: Metric,
    /// Which way is better.
    pub better: Better,
    /// One value per folder (`None`: the folder has no such cell or metric).
    pub values: Vec<Option<Value>>,
    /// One delta per folder against the baseline (`None` for the baseline itself).
    pub deltas: Vec<Option<Delta>>,
}

/// The table of one selection (or of all run folders together).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Group {
    /// `strategy/mix/faults`, or `None` when every folder is a run.
    pub selection: Option<String>,
    /// Each folder's selection in this group (`None`: the folder has none).
    pub columns: Vec<Option<String>>,
    /// Phases in order, warm-up left out.
    pub phases: Vec<(String, usize)>,
    /// Rows: per phase, the Premium metrics, the Freemium metrics, then the phase-wide ones.
    pub rows: Vec<Row>,
}

/// Builds the side-by-side groups of `folders` (the first is the baseline),
/// showing `metrics`.
pub fn groups(folders: &[Folder], metrics: &[Metric]) -> Vec<Group> {
    if folders.is_empty() {
        return Vec::new();
    }
    if folders.iter().all(|f| f.kind == Kind::Run) {
        let cols: Vec<Option<&Selection>> = folders.iter().map(|f| f.cells.first().map(|c| &c.sel)).collect();
        return vec![group(folders, &cols, None, metrics)];
    }
    let mut sels: Vec<&Selection> = Vec::new();
    for f in folders {
        for s in f.selections() {
            if !sels.contains(&s) {
                sels.push(s);
            }
        }
    }
    sels.into_iter()
        .map(|sel| {
            let cols: Vec<Option<&Selection>> =
                folders.iter().map(|f| f.selections().contains(&sel).then_some(sel)).collect();
            group(folders, &cols, Some(sel.to_string()), metrics)
        })
        .collect()
}

fn group(folders: &[Folder], cols: &[Option<&Selection>], label: Option<String>, metrics: &[Metric]) -> Group {
    let mut phases: Vec<(String, usize)> = Vec::new();
    for (f, sel) in folders.iter().zip(cols) {
        let Some(sel) = sel else { continue };
        for (p, k) in f.phases(sel) {
            if p != WARMUP && !phases.iter().any(|q| q.0 == p) {
                phases.push((p.to_string(), k));
            }
        }
    }
    let mut rows = Vec::new();
    for (phase, survivors) in &phases {
        let classes = Class::ALL.map(Some).into_iter().chain([None]);
        for class in classes {
            for &m in metrics.iter().filter(|m| m.per_phase() == class.is_none()) {
                let values: Vec<Option<Value>> = folders
                    .iter()
                    .zip(cols)
                    .map(|(f, sel)| {
                        let sel = (*sel)?;
                        let c =
                            f.cell(sel, phase, class.unwrap_or(Class::P)).or_else(|| f.cell(sel, phase, Class::F))?;
                        f.has(m).then(|| c.get(m))
                    })
                    .collect();
                let base = values.first().copied().flatten();
                let deltas = values.iter().enumerate().map(|(i, v)| (i > 0).then(|| delta_of(m, base, *v))).collect();
                rows.push(Row {
                    phase: phase.clone(),
                    survivors: *survivors,
                    class,
                    metric: m,
                    better: m.better(),
                    values,
                    deltas,
                });
            }
        }
    }
    Group { selection: label, columns: cols.iter().map(|s| s.map(|s| s.to_string())).collect(), phases, rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_and_aliases_round_trip() {
        for m in Metric::ALL {
            assert_eq!(Metric::parse(m.name()), Some(m));
        }
        for (alias, m) in [
            ("p95", Metric::P95Ms),
            ("GOODPUT", Metric::GoodputQps),
            ("cv", Metric::CpuCv),
            ("aborted", Metric::AbortedSessions),
        ] {
            assert_eq!(Metric::parse(alias), Some(m), "{alias}");
        }
        assert_eq!(Metric::parse("latency"), None);
    }

    #[test]
    fn deltas_follow_the_metric_direction() {
        let cases = [
            (Metric::GoodputQps, 100.0, 110.0, Verdict::Good, 10.0),
            (Metric::GoodputQps, 100.0, 90.0, Verdict::Bad, -10.0),
            (Metric::P95Ms, 100.0, 120.0, Verdict::Bad, 20.0),
            (Metric::P95Ms, 100.0, 80.0, Verdict::Good, -20.0),
            (Metric::AbortedSessions, 0.0, 3.0, Verdict::Bad, f64::INFINITY),
            (Metric::Retention, 0.9, 0.9, Verdict::Same, 0.0),
            (Metric::CpuMean, 0.5, 0.6, Verdict::Changed, 20.0),
            (Metric::CpuCv, 0.2, 0.1, Verdict::Good, -50.0),
        ];
        for (m, b, n, verdict, pct) in cases {
            let d = delta(m, Some(b), Some(n));
            assert_eq!(d.verdict, verdict, "{m} {b} -> {n}");
            let got = d.pct.unwrap();
            assert!(got == pct || (got - pct).abs() < 1e-9, "{m}: {got} != {pct}");
            assert!((d.abs.unwrap() - (n - b)).abs() < 1e-12);
        }
        assert_eq!(delta(Metric::P95Ms, None, Some(1.0)).verdict, Verdict::Unknown);
        assert_eq!(delta(Metric::P95Ms, Some(1.0), None).verdict, Verdict::Unknown);
    }

    #[test]
    fn changes_inside_the_noise_band_are_not_marked() {
        let one = |v: f64| Some(Value::single(Some(v)));
        let spread = |q1: f64, m: f64, q3: f64| Some(Value { value: Some(m), q1: Some(q1), q3: Some(q3), n: 3 });
        let v = |b, n| delta_of(Metric::Retention, b, n).verdict;
        assert_eq!(v(one(0.9), one(0.8998)), Verdict::Noise, "-0.02% between single runs");
        assert_eq!(v(one(0.9), one(0.85)), Verdict::Bad);
        assert_eq!(delta_of(Metric::CpuMean, one(0.5), one(0.501)).verdict, Verdict::Noise);
        assert_eq!(v(one(0.9), one(0.9)), Verdict::Same);
        assert_eq!(v(spread(0.80, 0.85, 0.90), spread(0.88, 0.95, 0.97)), Verdict::Noise, "IQRs overlap: noise at 12%");
        assert_eq!(v(spread(0.80, 0.85, 0.87), spread(0.88, 0.95, 0.97)), Verdict::Good, "apart: counts");
        assert_eq!(v(spread(0.90, 0.900, 0.90), spread(0.9001, 0.901, 0.9012)), Verdict::Good, "apart, however small");
        assert_eq!(delta_of(Metric::AbortedSessions, one(0.0), one(3.0)).verdict, Verdict::Bad, "from none");
    }
}
