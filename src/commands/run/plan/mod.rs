//! One conversion from the raw flags of `plbbench run` into a validated
//! plan of final values (design.md §8.2): the domain's own enums, the
//! workload, the scaled fault schedule, the phases, the router, the watch
//! and the gate, and the cluster to run on. Every bad input is refused
//! here, once, before any server starts or any file is written; nothing
//! reads the flags after the plan is built.

use super::args::{CommonArgs, ExternalArgs, RunArgs};
use crate::cluster::external::DatasetStep;
use crate::core::admission::{Gate, Sizing};
use crate::core::faults::{self, Timeline};
use crate::core::model::{Action, FaultEvent};
use crate::core::phases::{self, Phase};
use crate::core::proxy_tier::{self, ProxyFault};
use crate::core::roles::RoleVector;
use crate::core::router::{RouterConfig, Strategy};
use crate::core::settings::{Admission, Checks, ClusterKind, Detection, GeneratorsOn, Named};
use crate::core::tier::{TierConfig, MAX_ROUTERS};
use crate::core::watch::{Recovery, Watch};
use crate::core::workload::Workload;
use crate::error::{input, Error};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The built-in default workload: the paper's regime
/// (`workloads/paper.toml`, design.md §3 as revised 2026-12-03), so the
/// main job `plbbench run --strategy plb --mix 25:75 --T 1000` is the
/// paper's experiment.
pub const DEFAULT_WORKLOAD: &str = "paper";

use super::workloads::built_in;
pub use super::workloads::{built_in_workload, BUILT_IN_WORKLOADS};

/// The steady open workload (`workloads/analytics.toml`), the home of the
/// load axis: `--load` without `--workload` runs it, and `calibrate` and
/// `cluster up` default to its templates and dataset (the paper's are the
/// same).
pub const STEADY_WORKLOAD: &str = "analytics";

/// Where the sessions run.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterSpec {
    /// The discrete-event simulator.
    Sim,
    /// A cluster of PostgreSQL servers on this machine.
    Local,
    /// A cluster of containers through the Docker Engine API.
    Docker,
    /// An existing cluster.
    External(ExternalSpec),
}

/// `--cluster external`: where the replicas are.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalSpec {
    /// One DSN per replica, in order (before the cluster file's).
    pub dsns: Vec<String>,
    /// Cluster file with DSNs and fault commands.
    pub cluster_file: Option<PathBuf>,
    /// What opening the cluster does with the dataset.
    pub dataset: DatasetStep,
}

impl ClusterSpec {
    /// The backend's kind.
    pub fn kind(&self) -> ClusterKind {
        match self {
            ClusterSpec::Sim => ClusterKind::Sim,
            ClusterSpec::Local => ClusterKind::Local,
            ClusterSpec::Docker => ClusterKind::Docker,
            ClusterSpec::External(_) => ClusterKind::External,
        }
    }
}

/// A validated run: final values only.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Routing strategy (also in `router`).
    pub strategy: Strategy,
    /// How the router learns of faults.
    pub detection: Detection,
    /// What plb does with a returning replica.
    pub recovery: Recovery,
    /// What stands in front of the strategy.
    pub admission: Admission,
    /// Premium percentage of the mix.
    pub premium_pct: u32,
    /// Number of clients T.
    pub clients: u32,
    /// `--load`: the offered load the workload was set to, if given.
    pub load: Option<f64>,
    /// `--calibration`: the file whose costs the workload took, with when
    /// it was measured and the pause its operating point came to.
    pub calibration: Option<String>,
    /// Number of replicas K (also in `router`).
    pub replicas: usize,
    /// `max_connections` of every replica of a cluster the run starts and
    /// the simulator's limit.
    pub max_connections: u32,
    /// Seed of the client schedule.
    pub seed: u64,
    /// Timeline multiplier.
    pub time_scale: f64,
    /// CPU budget per replica C, cores.
    pub cpus: f64,
    /// Health probe interval; `None` under oracle detection (no probes).
    pub probe_interval: Option<Duration>,
    /// The workload, with `--calibration`, theta (resolved) and `--mixed-unbounded` applied.
    pub workload: Workload,
    /// Fault preset name or file path.
    pub faults_name: String,
    /// Fault schedule, scaled.
    pub faults: Vec<FaultEvent>,
    /// Phases of the run.
    pub phases: Vec<Phase>,
    /// Router settings.
    pub router: RouterConfig,
    /// The router's watch, fresh: the detector, the recovery policy and the
    /// workload's health thresholds with the stability window scaled.
    pub watch: Watch,
    /// `--admission modes`: the admission gate, fresh.
    pub gate: Option<Gate>,
    /// Scaled ramp.
    pub ramp_s: f64,
    /// Scaled run length.
    pub duration_s: f64,
    /// Where the sessions run.
    pub cluster: ClusterSpec,
    /// Serve Prometheus metrics here during a real run.
    pub metrics_addr: Option<SocketAddr>,
    /// Also write queries.csv.
    pub raw: bool,
    /// `--stream`: write each second here while the run goes on.
    pub stream: Option<PathBuf>,
    /// What progress to show.
    pub progress: crate::progress::Shown,
    /// Replace an existing run folder.
    pub force: bool,
    /// Where the run folder goes.
    pub out: PathBuf,
    /// What a failed run validity check does.
    pub checks: Checks,
    /// `--via-proxy`: the routing flags of the proxy child (see
    /// `via_proxy::flags`); `None`: the clients route themselves.
    pub via_proxy: Option<Vec<String>>,
    /// `--proxies`: the proxy processes the clients go through (a tier
    /// when more than one).
    pub proxies: u32,
    /// `--proxy-faults`, scaled.
    pub proxy_faults: Vec<ProxyFault>,
    /// `--generators`: how many generator processes drive the clients.
    pub generators: u32,
    /// `--generators-on`: where they run.
    pub generators_on: GeneratorsOn,
    /// The files the run's flags name (workload, faults, calibration,
    /// cluster file), absolute: what a generator container is given.
    pub inputs: Vec<PathBuf>,
    /// `--generator-child`: this process is that generator of a
    /// `--generators` run.
    pub generator_child: Option<u32>,
    /// `--routers N` above 1: the simulated tier of routers.
    pub tier: Option<TierConfig>,
}

/// `--routers`, `--refresh-ms` and `--quotas`: the simulated tier, if any.
fn tier(args: &RunArgs) -> Result<Option<TierConfig>, Error> {
    let c = &args.common;
    if c.routers == 0 || c.routers > MAX_ROUTERS {
        return Err(input("--routers", format!("must be from 1 to {MAX_ROUTERS}, got {}", c.routers)));
    }
    if !(1..=600_000).contains(&c.refresh_ms) {
        return Err(input("--refresh-ms", format!("must be from 1 to 600000, got {}", c.refresh_ms)));
    }
    if c.routers == 1 {
        return match c.quotas {
            true => Err(input("--quotas", "needs a tier: --routers 2 or more")),
            false => Ok(None),
        };
    }
    if c.cluster != ClusterKind::Sim {
        return Err(input(
            "--routers",
            "a tier of routers is simulated only (--cluster sim); a real tier of proxies is not built (docs/scale.md)",
        ));
    }
    if args.admission != Admission::None {
        return Err(input("--routers", "not with --admission modes: the gate admits through one router"));
    }
    Ok(Some(TierConfig { routers: c.routers, refresh_s: c.refresh_ms as f64 / 1e3, quotas: c.quotas }))
}

/// Parses `P:F` percentages summing to 100; returns P.
pub fn parse_mix(s: &str) -> Result<u32, Error> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || input("--mix", format!("`{s}` is not P:F with two whole percentages summing to 100 (e.g. 25:75)"));
    if parts.len() != 2 {
        return Err(bad());
    }
    let p: i64 = parts[0].trim().parse().map_err(|_| bad())?;
    let f: i64 = parts[1].trim().parse().map_err(|_| bad())?;
    if p < 0 || f < 0 {
        return Err(input("--mix", format!("`{s}` has a negative part")));
    }
    if p + f != 100 {
        return Err(input("--mix", format!("`{s}` sums to {}, not 100", p + f)));
    }
    Ok(p as u32)
}

/// Parses `n1<sep>n2...` into exactly `count` whole numbers summing to `k`.
fn parse_parts(field: &str, s: &str, sep: char, count: usize, k: usize) -> Result<Vec<usize>, Error> {
    let parts: Result<Vec<usize>, _> = s.split(sep).map(|p| p.trim().parse::<usize>()).collect();
    let parts = parts.map_err(|_| input(field, format!("`{s}` is not {count} whole numbers separated by `{sep}`")))?;
    if parts.len() != count {
        return Err(input(field, format!("`{s}` has {} parts, expected {count}", parts.len())));
    }
    let sum: usize = parts.iter().sum();
    if sum != k {
        return Err(input(field, format!("`{s}` sums to {sum}, but there are {k} replicas")));
    }
    Ok(parts)
}

/// Parses a `P,M,F` reference split whose sum is `k`.
pub fn parse_reference(s: &str, k: usize) -> Result<RoleVector, Error> {
    let v = parse_parts("--reference", s, ',', 3, k)?;
    Ok([v[0], v[1], v[2]])
}

/// Parses a reference split whose sum defines K (for `plbbench roles`).
pub fn parse_reference_any(s: &str) -> Result<RoleVector, Error> {
    let sum = s.split(',').filter_map(|p| p.trim().parse::<usize>().ok()).sum();
    let v = parse_reference(s, sum)?;
    if sum == 0 {
        return Err(input("--reference", "the split must name at least one replica"));
    }
    Ok(v)
}

/// Reads a file as UTF-8 text, naming the field on failure.
pub fn read_text(field: &str, path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|e| input(field, format!("cannot read {}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|_| input(field, format!("{} is not UTF-8 text", path.display())))
}

/// Lays the calibration file at `path` over the workload's costs; returns
/// the line the run's settings record.
fn calibrate(w: &mut Workload, path: &Path) -> Result<String, Error> {
    let bad =
        |e: crate::core::calibration::CalibrationError| input("--calibration", format!("{}: {e}", path.display()));
    let cal = crate::core::calibration::Calibration::parse(&read_text("--calibration", path)?).map_err(bad)?;
    cal.apply(w).map_err(bad)?;
    Ok(format!("{} (measured {})", path.display(), cal.measured_utc))
}

/// Re-sizes the workload's pause to offer its operating point at the costs
/// it holds now and, for a point that holds at every mix, at the run's mix
/// `pct`; returns the clause the settings record. `field` is the flag
/// blamed when the point is out of reach.
fn size_pause(w: &mut Workload, field: &str, pct: u32, c: &CommonArgs, split: (usize, usize)) -> Result<String, Error> {
    let Some(op) = w.operating_point else { return Ok(String::new()) };
    let budget = op.basis.name();
    match w.between_at_operating_point(c.replicas, c.cpus, split, pct).expect("the workload states a point") {
        Ok(between) => {
            // Not rounded: the same pause as `--load` sets, so the default
            // runs exactly the map's cell it was picked from.
            w.session.between_ms = between;
            Ok(format!(
                "operating point {:.2} of the {budget} budget at T={}: between_ms {:.0}",
                op.utilisation, op.clients, w.session.between_ms
            ))
        }
        Err(most) => Err(input(
            field,
            format!(
                "at these costs {} clients offer at most {most:.2} of the {budget} budget, below the workload's operating point {:.2}",
                op.clients, op.utilisation
            ),
        )),
    }
}

/// Sets `session.between_ms` so that the workload offers `load` of the
/// cluster's CPU budget (`--load`); refused when `clients` cannot offer
/// that much even without a pause between sessions.
fn set_load(w: &mut Workload, load: f64, clients: u32, pct: u32, replicas: usize, cpus: f64) -> Result<(), Error> {
    if !(load.is_finite() && load > 0.0) {
        return Err(input("--load", format!("must be a positive fraction of the cluster's capacity, got {load}")));
    }
    if w.session.between_ms == 0.0 {
        return Err(input(
            "--load",
            format!(
                "the workload `{}` is a closed population (no pause between sessions), whose load is set by --T; the load axis is the steady workload's (--workload analytics)",
                w.name
            ),
        ));
    }
    let offered = |w: &Workload| w.offered_utilisation(clients, pct, replicas, cpus);
    w.session.between_ms = w.between_reaching(load, offered).map_err(|most| {
        input("--load", format!("{clients} clients offer at most {most:.2} of the cluster's capacity; raise --T"))
    })?;
    Ok(())
}

/// Loads the workload `--workload` names (a file, or a built-in by name),
/// or the built-in `default` when it names none.
pub fn load_workload(path: Option<&Path>, default: &str) -> Result<Workload, Error> {
    let (name, text) = match path {
        Some(p) => match built_in_workload(p) {
            Some(text) => (p.display().to_string(), text.to_string()),
            None if !p.exists() && p.extension().is_none() => {
                let names: Vec<&str> = BUILT_IN_WORKLOADS.iter().map(|(n, _)| *n).collect();
                return Err(input(
                    "--workload",
                    format!("`{}` is neither a file nor a built-in workload ({})", p.display(), names.join(", ")),
                ));
            }
            None => (p.display().to_string(), read_text("--workload", p)?),
        },
        None => (default.to_string(), built_in(default).to_string()),
    };
    Workload::parse(&text).map_err(|e| input("--workload", format!("{name}: {e}")))
}

/// The time scale: `--duration` over the workload's run length when given,
/// else `--time-scale`.
fn time_scale(duration: Option<Duration>, time_scale: f64, w: &Workload) -> Result<f64, Error> {
    match duration {
        None => Ok(time_scale),
        Some(d) if d.as_secs_f64() >= 1.0 => Ok(d.as_secs_f64() / w.run.duration_s),
        Some(d) => Err(input("--duration", format!("must be at least 1s, got {}", humantime::format_duration(d)))),
    }
}

impl Plan {
    /// Validates `args` into a plan.
    pub fn new(mut args: RunArgs) -> Result<Plan, Error> {
        args.via_proxy |= super::proxy_args::check_generators(&args)?;
        let c = &args.common;
        let premium_pct = parse_mix(&args.mix)?;
        let (reference, split) = check_numbers(c, args.strategy)?;
        if args.recovery != Recovery::None && args.strategy != Strategy::Plb {
            return Err(input(
                "--recovery",
                format!("{} is a plb policy; --strategy is {}", args.recovery.name(), args.strategy),
            ));
        }
        if c.detection != Detection::Oracle && c.probe_interval_ms == 0 {
            return Err(input("--probe-interval-ms", "must be at least 1"));
        }
        let default = if c.load.is_some() { STEADY_WORKLOAD } else { DEFAULT_WORKLOAD };
        let mut workload = load_workload(c.workload.as_deref(), default)?;
        let calibration = match &c.calibration {
            Some(path) => {
                let line = calibrate(&mut workload, path)?;
                let sized = size_pause(&mut workload, "--calibration", premium_pct, c, split)?;
                Some(if sized.is_empty() { line } else { format!("{line}; {sized}") })
            }
            None => {
                if workload.operating_point.is_some_and(|op| op.per_mix()) {
                    size_pause(&mut workload, "--workload", premium_pct, c, split)?;
                }
                None
            }
        };
        if let Some(load) = c.load {
            set_load(&mut workload, load, c.clients, premium_pct, c.replicas, c.cpus)?;
        }
        if c.max_connections.is_some_and(|n| n < 5) {
            return Err(input("--max-connections", "must be at least 5 (PostgreSQL keeps 3 for superusers)"));
        }
        let derived = || workload.derived_theta(c.clients, premium_pct, c.replicas, c.cpus);
        let theta = c.theta.or(workload.router.theta).unwrap_or_else(derived);
        workload.router.theta = Some(theta);
        if c.mixed_unbounded {
            workload.router.mixed_bounded = false;
        }
        if let Some(rule) = c.freemium_borrow {
            workload.router.freemium_borrow = rule;
        }
        let faults_name = args.faults.clone().unwrap_or_else(|| workload.run.faults.clone());
        let events = fault_events(&faults_name, &workload, c.replicas)?;
        if c.cluster == ClusterKind::Local {
            refuse_partition_on_local(&faults_name, &events)?;
        }
        let x = time_scale(args.duration, c.time_scale, &workload)?;
        let proxy_faults = super::proxy_args::check_proxies(&mut args, workload.run.duration_s)?;
        let c = &args.common;
        let via_proxy = super::proxy_args::flags(&args, x)?;
        let faults = faults::scaled(&events, x);
        let (ramp_s, duration_s) = (workload.arrival.ramp_s * x, workload.run.duration_s * x);
        let phases = phases::cut(&faults, c.replicas, ramp_s, workload.run.baseline_s * x, duration_s);
        let router = RouterConfig {
            strategy: args.strategy,
            replicas: c.replicas,
            reference,
            split,
            theta,
            alpha: workload.router.alpha,
            mixed_bounded: workload.router.mixed_bounded,
            freemium_borrow: workload.router.freemium_borrow,
        };
        let out = out_dir(&args)?;
        if args.generator_child.is_none() {
            // A child never writes the stream (in a container, its folder
            // need not even exist).
            check_stream(args.stream.as_deref())?;
        }
        // Only a generator container is given the run's files.
        let inputs = match args.generators_on {
            GeneratorsOn::Docker => inputs(&args, &faults_name),
            GeneratorsOn::Host => Vec::new(),
        };
        let cluster = cluster_spec(&args)?;
        let tier = tier(&args)?;
        Ok(Plan {
            strategy: args.strategy,
            detection: c.detection,
            recovery: args.recovery,
            admission: args.admission,
            premium_pct,
            clients: c.clients,
            load: c.load,
            calibration,
            replicas: c.replicas,
            max_connections: c.max_connections.unwrap_or_else(|| crate::core::model::max_connections_for(c.clients)),
            seed: c.seed,
            time_scale: x,
            cpus: c.cpus,
            probe_interval: (c.detection != Detection::Oracle).then(|| Duration::from_millis(c.probe_interval_ms)),
            watch: watch(&workload, c.detection, c.replicas, args.recovery, x),
            gate: gate(&workload, args.admission, c.clients, c.replicas, x),
            faults_name,
            faults,
            phases,
            router,
            ramp_s,
            duration_s,
            workload,
            cluster,
            metrics_addr: args.metrics_addr,
            raw: c.raw,
            stream: args.stream.clone(),
            progress: c.progress.resolve(c.quiet),
            force: args.force,
            out,
            checks: c.checks,
            via_proxy,
            proxies: args.proxies,
            proxy_faults: proxy_tier::scaled(&proxy_faults, x),
            generators: args.generators,
            generators_on: args.generators_on,
            inputs,
            generator_child: args.generator_child,
            tier,
        })
    }

    /// Whether replica `r` is up throughout a phase per the fault schedule
    /// (a slow replica is up; a down, paused or partitioned one is not).
    /// The schedule is replayed once per phase, not once per replica and
    /// phase (K^2 at fleet scale).
    pub fn up_during_fn(&self) -> impl Fn(&Phase, usize) -> bool + '_ {
        let cache: RefCell<HashMap<u64, Vec<bool>>> = RefCell::default();
        move |phase, r| {
            let mut cache = cache.borrow_mut();
            let up = cache.entry(phase.start_s.to_bits()).or_insert_with(|| self.up_at(phase.start_s));
            up.get(r).copied().unwrap_or(true)
        }
    }

    /// Per replica, whether the faults up to `t_s` leave it a survivor.
    fn up_at(&self, t_s: f64) -> Vec<bool> {
        let before: Vec<FaultEvent> = self.faults.iter().filter(|e| e.t_s <= t_s).copied().collect();
        faults::replay(&before, self.replicas).iter().map(|o| o.survivor()).collect()
    }

    /// The strategy with the layers that change it (see [`variant`]).
    pub fn variant(&self) -> String {
        variant(self.strategy, self.detection, self.recovery, self.admission)
    }
}

/// The strategy with the layers that change it, as cells and folders name it:
/// `plb`, `plb+suspicion`, `plb+probation`, `plb+suspicion+probation+modes`, ...
pub fn variant(strategy: Strategy, detection: Detection, recovery: Recovery, admission: Admission) -> String {
    let mut name = strategy.to_string();
    if detection == Detection::Suspicion {
        name.push_str("+suspicion");
    }
    if recovery != Recovery::None {
        name = format!("{name}+{}", recovery.name());
    }
    if admission != Admission::None {
        name = format!("{name}+{}", admission.name());
    }
    name
}

/// PLB's reference split at `k` replicas when `--reference` is not given:
/// the paper's 2,1,2 at K=5 scaled to `k` by the target-vector formula
/// (design.md §2), so K=5 keeps 2,1,2 and K=7 gets 3,1,3.
pub fn default_reference(k: usize) -> RoleVector {
    crate::core::roles::target(k, [2, 1, 2], 5)
}

/// rr-split's partitions at `k` replicas when `--split` is not given: the
/// 3:2 of K=5 in the same proportion (Premium round(3K/5), at least one
/// replica each when K allows): 4:3 at K=7.
pub fn default_split(k: usize) -> (usize, usize) {
    let p = ((6 * k + 5) / 10).clamp(1, k.saturating_sub(1).max(1));
    (p, k - p)
}

/// A flag only some strategies read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyFlag {
    /// `--reference`: PLB's reference split.
    Reference,
    /// `--split`: rr-split's partitions.
    Split,
    /// `--theta`: PLB's admission threshold.
    Theta,
    /// `--mixed-unbounded` (the hidden `--mixed-bounded` changes nothing).
    MixedUnbounded,
    /// `--freemium-borrow`: PLB's borrowing rule.
    FreemiumBorrow,
}

impl StrategyFlag {
    /// Every strategy-specific flag, in `--help`'s order.
    pub const ALL: [StrategyFlag; 5] = [
        StrategyFlag::Reference,
        StrategyFlag::Split,
        StrategyFlag::Theta,
        StrategyFlag::MixedUnbounded,
        StrategyFlag::FreemiumBorrow,
    ];

    /// The flag as the user types it.
    pub fn flag(self) -> &'static str {
        match self {
            StrategyFlag::Reference => "--reference",
            StrategyFlag::Split => "--split",
            StrategyFlag::Theta => "--theta",
            StrategyFlag::MixedUnbounded => "--mixed-unbounded",
            StrategyFlag::FreemiumBorrow => "--freemium-borrow",
        }
    }

    /// The one strategy that reads it.
    pub fn reader(self) -> Strategy {
        match self {
            StrategyFlag::Split => Strategy::RrSplit,
            _ => Strategy::Plb,
        }
    }

    /// Whether the user gave it (a default is never "given": the values are
    /// `Option`s and the switches default to off).
    pub fn given(self, c: &CommonArgs) -> bool {
        match self {
            StrategyFlag::Reference => c.reference.is_some(),
            StrategyFlag::Split => c.split.is_some(),
            StrategyFlag::Theta => c.theta.is_some(),
            StrategyFlag::MixedUnbounded => c.mixed_unbounded,
            StrategyFlag::FreemiumBorrow => c.freemium_borrow.is_some(),
        }
    }

    /// Forgets the flag, for a grid's runs of a strategy that does not read it.
    pub fn clear(self, c: &mut CommonArgs) {
        match self {
            StrategyFlag::Reference => c.reference = None,
            StrategyFlag::Split => c.split = None,
            StrategyFlag::Theta => c.theta = None,
            StrategyFlag::MixedUnbounded => c.mixed_unbounded = false,
            StrategyFlag::FreemiumBorrow => c.freemium_borrow = None,
        }
    }
}

/// Refuses a flag the user gave that `strategy` does not read, naming the
/// flag and the strategy that reads it (as pgbench refuses options that do
/// not go together).
pub fn refuse_unread(c: &CommonArgs, strategy: Strategy) -> Result<(), Error> {
    match StrategyFlag::ALL.into_iter().find(|f| f.given(c) && f.reader() != strategy) {
        Some(f) => Err(input(f.flag(), format!("read only by --strategy {}; --strategy is {strategy}", f.reader()))),
        None => Ok(()),
    }
}

/// The values of the strategy-specific flags checked against K whatever
/// the strategy: the reference split (if given) and rr-split's partitions
/// (given, or derived from K), each class at least one replica.
pub fn check_splits(c: &CommonArgs) -> Result<(RoleVector, (usize, usize)), Error> {
    if c.replicas == 0 {
        return Err(input("--replicas", "must be at least 1"));
    }
    let reference = match &c.reference {
        Some(s) => parse_reference(s, c.replicas)?,
        None => default_reference(c.replicas),
    };
    let split = match &c.split {
        Some(s) => {
            let v = parse_parts("--split", s, ':', 2, c.replicas)?;
            check_split((v[0], v[1]))?
        }
        None => default_split(c.replicas),
    };
    if c.theta == Some(0) {
        return Err(input("--theta", "must be at least 1"));
    }
    Ok((reference, split))
}

/// rr-split's partitions leave each class a replica.
fn check_split(split: (usize, usize)) -> Result<(usize, usize), Error> {
    match split {
        (0, _) | (_, 0) => {
            let class = if split.0 == 0 { "Premium" } else { "Freemium" };
            Err(input(
                "--split",
                format!("{}:{} leaves {class} no replica; rr-split needs at least one per class", split.0, split.1),
            ))
        }
        ok => Ok(ok),
    }
}

/// The counts and splits: T, K, the reference and rr-split partitions
/// (every given value checked against K; a flag the strategy does not read
/// refused), the time scale and the CPU budget.
fn check_numbers(c: &CommonArgs, strategy: Strategy) -> Result<(RoleVector, (usize, usize)), Error> {
    if c.clients == 0 {
        return Err(input("--T", "must be at least 1 client"));
    }
    let (reference, split) = check_splits(c)?;
    refuse_unread(c, strategy)?;
    if strategy == Strategy::RrSplit {
        check_split(split)?;
    }
    if !(c.time_scale.is_finite() && c.time_scale > 0.0) {
        return Err(input("--time-scale", format!("must be a positive number, got {}", c.time_scale)));
    }
    if !(c.cpus.is_finite() && c.cpus > 0.0) {
        return Err(input("--cpus", format!("must be a positive number of cores, got {}", c.cpus)));
    }
    Ok((reference, split))
}

/// The unscaled schedule of a preset or file.
fn fault_events(name: &str, workload: &Workload, replicas: usize) -> Result<Vec<FaultEvent>, Error> {
    let text = match faults::preset(name) {
        Some(t) => t.to_string(),
        None if Path::new(name).exists() => read_text("--faults", Path::new(name))?,
        None => {
            return Err(input(
                "--faults",
                format!(
                    "`{name}` is neither a preset nor a file{} (presets: {})",
                    crate::commands::lists::did_you_mean(name, &faults::PRESETS),
                    faults::PRESETS.join(", ")
                ),
            ))
        }
    };
    let timeline = Timeline {
        replicas,
        ramp_s: workload.arrival.ramp_s,
        baseline_s: workload.run.baseline_s,
        duration_s: workload.run.duration_s,
    };
    faults::parse(&text, timeline).map_err(|e| input("--faults", format!("{name}: {e}")))
}

/// `--stream`: a file in an existing folder (it is replaced, as k6 does).
/// The existing files among the workload, the faults, the calibration
/// and the cluster file, as absolute paths.
fn inputs(args: &RunArgs, faults_name: &str) -> Vec<PathBuf> {
    let named = [
        args.common.workload.clone(),
        Some(PathBuf::from(faults_name)),
        args.common.calibration.clone(),
        args.external.cluster_file.clone(),
    ];
    named.into_iter().flatten().filter(|p| p.is_file()).filter_map(|p| std::path::absolute(p).ok()).collect()
}

fn check_stream(path: Option<&Path>) -> Result<(), Error> {
    let Some(p) = path else { return Ok(()) };
    let folder = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if p.is_dir() {
        return Err(input("--stream", format!("{} is a folder; name a file", p.display())));
    }
    if !folder.is_dir() {
        return Err(input("--stream", format!("no folder {} to write {} in", folder.display(), p.display())));
    }
    Ok(())
}

/// `--out`, or `reports/<utc-timestamp>-<strategy>-<mix>-<cluster>`; an
/// existing folder only with `--force`.
fn out_dir(args: &RunArgs) -> Result<PathBuf, Error> {
    let out = match &args.out {
        Some(p) => p.clone(),
        None => PathBuf::from("reports").join(format!(
            "{}-{}-{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
            args.strategy,
            args.mix.replace(':', "-"),
            args.common.cluster.name()
        )),
    };
    if out.exists() && !args.force {
        return Err(input("--out", format!("{} already exists (use --force to replace it)", out.display())));
    }
    Ok(out)
}

/// The cluster to run on, with the flags only some backends take refused
/// on the others.
fn cluster_spec(args: &RunArgs) -> Result<ClusterSpec, Error> {
    let kind = args.common.cluster;
    if args.metrics_addr.is_some() && kind == ClusterKind::Sim {
        return Err(input("--metrics-addr", "the simulator runs in virtual time; serve metrics from a real run"));
    }
    let ExternalArgs { dsns, cluster_file, load_dataset, dataset_checked } = args.external.clone();
    let external = kind == ClusterKind::External;
    if external && dsns.is_empty() && cluster_file.is_none() {
        return Err(input("--dsn", "`--cluster external` needs --dsn (once per replica) or --cluster-file"));
    }
    if !external && (!dsns.is_empty() || cluster_file.is_some() || load_dataset) {
        return Err(input("--dsn", "--dsn, --cluster-file and --load-dataset need `--cluster external`"));
    }
    Ok(match kind {
        ClusterKind::Sim => ClusterSpec::Sim,
        ClusterKind::Local => ClusterSpec::Local,
        ClusterKind::Docker => ClusterSpec::Docker,
        ClusterKind::External => {
            let dataset = match (load_dataset, dataset_checked) {
                (true, _) => DatasetStep::Load,
                (false, true) => DatasetStep::Trust,
                (false, false) => DatasetStep::Check,
            };
            ClusterSpec::External(ExternalSpec { dsns, cluster_file, dataset })
        }
    })
}

/// The router's watch: the detector `--detection` names, `--recovery`'s
/// policy, and the workload's `[health]` thresholds with the stability
/// window scaled like the rest of the timeline.
fn watch(w: &Workload, detection: Detection, k: usize, recovery: Recovery, time_scale: f64) -> Watch {
    let mut cfg = w.health;
    cfg.stability_window_s *= time_scale;
    match detection {
        Detection::Oracle => Watch::oracle(k, recovery, cfg),
        Detection::Probe => Watch::probe(k, recovery, cfg),
        Detection::Suspicion => Watch::suspicion(k, recovery, cfg),
    }
}

/// The admission gate of `--admission modes`, if any.
fn gate(w: &Workload, admission: Admission, clients: u32, replicas: usize, time_scale: f64) -> Option<Gate> {
    let (sizing, _) = Sizing::of(&w.degradation, w, clients, replicas);
    (admission == Admission::Modes).then(|| Gate::new(w.degradation.clone(), time_scale, sizing))
}

/// The local backend has no network of its own to cut: a schedule that
/// partitions a replica is refused before anything starts.
fn refuse_partition_on_local(name: &str, events: &[FaultEvent]) -> Result<(), Error> {
    match events.iter().position(|e| matches!(e.action, Action::Partition | Action::Heal)) {
        Some(i) => Err(input(
            "--faults",
            format!("{name}: event[{i}]: the local backend cannot partition a replica (use --cluster docker, external or sim)"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
