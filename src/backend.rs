//! Glue between a plan and the cluster backends: builds the client scripts
//! and router, runs the sessions on the simulator or a real cluster, and
//! returns the filled collector with what the backend observed.

use crate::cli::{Admission, ClusterKind, Detection};
use crate::cluster::external::{ClusterFile, ExternalCluster};
use crate::cluster::local::{default_state_dir, LocalCluster, LocalOptions};
use crate::cluster::{docker, Cluster, DockerCluster, DockerOptions, Fault};
use crate::core::admission::Gate;
use crate::core::control::Controller;
use crate::core::metrics::Collector;
use crate::core::router::Router;
use crate::core::saturation::GeneratorReport;
use crate::core::schedule;
use crate::core::watch::Watch;
use crate::driver::{self, DriverInput};
use crate::error::Error;
use crate::plan::Plan;
use crate::report::summary::Verdict;
use crate::run::BackendOutcome;
use crate::sim::{self, SimInput};
use anyhow::Context;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn clients(plan: &Plan) -> Vec<schedule::Client> {
    schedule::clients(plan.args.common.clients, plan.premium_pct, plan.ramp_s, plan.args.common.seed)
}

/// The router's watch: the detector `--detection` names, `--recovery`'s
/// policy, and the workload's `[health]` thresholds with the stability
/// window scaled like the rest of the timeline.
pub fn watch(plan: &Plan) -> Watch {
    let mut cfg = plan.workload.health;
    cfg.stability_window_s *= plan.args.common.time_scale;
    let (k, recovery) = (plan.args.common.replicas, plan.args.recovery);
    match plan.args.common.detection {
        Detection::Oracle => Watch::oracle(k, recovery, cfg),
        Detection::Probe => Watch::probe(k, recovery, cfg),
        Detection::Suspicion => Watch::suspicion(k, recovery, cfg),
    }
}

fn probe_interval(plan: &Plan) -> Option<Duration> {
    match plan.args.common.detection {
        Detection::Oracle => None,
        Detection::Probe | Detection::Suspicion => Some(Duration::from_millis(plan.args.common.probe_interval_ms)),
    }
}

/// The admission gate of `--admission modes`, if any.
pub fn gate(plan: &Plan) -> Option<Gate> {
    let d = &plan.workload.degradation;
    let per_replica = match d.replica_sessions {
        0 => plan.args.common.clients.div_ceil(plan.args.common.replicas as u32),
        n => n,
    };
    (plan.args.admission == Admission::Modes).then(|| Gate::new(d.clone(), plan.args.common.time_scale, per_replica))
}

/// The run controller for the plan: a fresh router, its watch and gate.
pub fn control(plan: &Plan) -> Controller {
    let timeout_ms = plan.workload.client.query_timeout_ms as f64;
    Controller::new(Router::new(plan.router.clone()), watch(plan), gate(plan), plan.args.common.cpus, timeout_ms)
}

/// Runs the plan on the simulator.
pub fn run_sim(plan: &Plan, mut collector: Collector) -> (Collector, BackendOutcome) {
    let out = sim::run(
        SimInput {
            workload: &plan.workload,
            clients: clients(plan),
            control: control(plan),
            faults: &plan.faults,
            cpus: plan.args.common.cpus,
            duration_s: plan.duration_s,
            probe_interval_s: probe_interval(plan).map_or(0.0, |d| d.as_secs_f64()),
        },
        &mut collector,
    );
    (collector, BackendOutcome { in_flight: out.in_flight, cpu_budget_enforced: false, ..Default::default() })
}

/// The cluster that `plbbench cluster up --backend KIND` left running, if
/// any, checked to have K replicas.
fn running(plan: &Plan, kind: ClusterKind) -> Result<Option<Cluster>, Error> {
    let k = plan.args.common.replicas;
    let Some(c) = crate::cluster_cmd::running(kind)? else { return Ok(None) };
    if c.replicas() != k {
        return Err(Error::Input(format!(
            "--replicas: the running {} cluster has {} replicas, not {k} (run `plbbench cluster down --backend {}` first)",
            kind.name(),
            c.replicas(),
            kind.name()
        )));
    }
    eprintln!("plbbench: using the running {} cluster ({k} replicas)", kind.name());
    Ok(Some(c))
}

/// Starts a cluster for this run alone (removed at the end). Its state
/// directory has a fixed name, so a cluster orphaned by a killed run is
/// removed by the next.
fn start(plan: &Plan, kind: ClusterKind) -> Result<Cluster, Error> {
    let (k, cpus, w) = (plan.args.common.replicas, plan.args.common.cpus, &plan.workload.dataset);
    eprintln!("plbbench: starting a {k}-replica {} PostgreSQL cluster (dataset scale {})", kind.name(), w.scale);
    if kind == ClusterKind::Docker {
        let state_dir = docker::default_state_dir().with_file_name("docker-run");
        let opts =
            DockerOptions { replicas: k, cpus, scale: w.scale, seed: w.seed, state_dir, ..DockerOptions::default() };
        return DockerCluster::up(&opts)
            .context("starting the docker cluster")
            .map(Cluster::Docker)
            .map_err(Error::Run);
    }
    let state_dir = default_state_dir().with_file_name("run");
    let opts = LocalOptions { replicas: k, cpus, state_dir, scale: w.scale, seed: w.seed, ..LocalOptions::default() };
    LocalCluster::up(&opts).context("starting the local cluster").map(Cluster::Local).map_err(Error::Run)
}

/// The external cluster of `--dsn`/`--cluster-file`, its dataset checked.
fn external_cluster(plan: &Plan) -> Result<ExternalCluster, Error> {
    let x = &plan.args.external;
    let file = match &x.cluster_file {
        Some(p) => Some(ClusterFile::read(p).map_err(|e| Error::Input(format!("--cluster-file: {e}")))?),
        None => None,
    };
    let w = &plan.workload.dataset;
    let c = ExternalCluster::open(&x.dsns, file, w.scale, w.seed, x.load_dataset).map_err(|e| match e {
        crate::cluster::ExternalError::Input(m) => Error::Input(m),
        other => Error::Run(anyhow::Error::new(other).context("opening the external cluster")),
    })?;
    if c.replicas() != plan.args.common.replicas {
        return Err(Error::Input(format!(
            "--replicas: the external cluster has {} replicas, not {}",
            c.replicas(),
            plan.args.common.replicas
        )));
    }
    Ok(c)
}

/// From now on SIGINT and SIGTERM set the returned flag instead of killing
/// plbbench, so a signal during cluster start-up still lets it tear the
/// cluster down (the driver then listens for signals itself).
pub fn catch_signals() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("plbbench: warning: cannot catch signal {sig}: {e}");
        }
    }
    flag
}

/// Runs the plan on a real cluster of the plan's backend (local, docker or
/// external).
pub fn run_real(plan: &Plan, collector: Collector) -> Result<(Collector, BackendOutcome), Error> {
    let interrupted = catch_signals();
    let metrics = match plan.args.metrics_addr {
        Some(addr) => Some(
            crate::live_metrics::bind(addr)
                .map_err(|e| Error::Input(format!("--metrics-addr: cannot listen on {addr}: {e}")))?,
        ),
        None => None,
    };
    let cluster = match plan.args.common.cluster {
        ClusterKind::External => Cluster::External(external_cluster(plan)?),
        kind => match running(plan, kind)? {
            Some(c) => c,
            None => start(plan, kind)?,
        },
    };
    if interrupted.load(Ordering::SeqCst) {
        drop(cluster);
        return Err(Error::Run(anyhow::anyhow!(
            "interrupted while the cluster was starting; it was removed and nothing was measured"
        )));
    }
    let postgres_version = Some(cluster.pg_version());
    let cpu_budget_enforced = cluster.cpu_budget_enforced();
    let cpu_verdict = (!cluster.cpu_available()).then(|| Verdict {
        name: "replica cpu".into(),
        ok: false,
        detail: "unavailable: the external cluster file gives no `cpu` sampler command, so CPU figures are empty"
            .into(),
    });
    let cluster = Arc::new(Mutex::new(cluster));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    let input = DriverInput {
        workload: Arc::new(plan.workload.clone()),
        clients: clients(plan),
        control: control(plan),
        faults: plan.faults.clone(),
        duration_s: plan.duration_s,
        probe_interval: probe_interval(plan),
        progress: !plan.args.common.quiet,
        cpus: plan.args.common.cpus,
        metrics,
    };
    let (mut collector, out) = runtime.block_on(driver::run(input, cluster.clone(), collector));
    let planned_end = out.interrupted_s.map_or(plan.duration_s, |t| t + driver::DRAIN.as_secs_f64());
    let overrun_s = (out.ended_s - planned_end).max(0.0);
    if let Some(t) = out.interrupted_s {
        collector.truncate(t);
    }
    drop(runtime);
    let mut cluster = Arc::try_unwrap(cluster).ok().expect("no task holds the cluster").into_inner().expect("lock");
    if cluster.is_persistent() {
        heal(&mut cluster, plan, out.interrupted_s);
    }
    drop(cluster);
    let outcome = BackendOutcome {
        in_flight: out.in_flight,
        partial: out.partial,
        postgres_version,
        cpu_budget_enforced,
        verdicts: std::iter::once(stop_verdict(overrun_s))
            .chain(out.generator.as_ref().map(generator_verdict))
            .chain(cpu_verdict)
            .collect(),
        interrupted_by: out.signal.map(String::from),
        stop_overrun_s: Some(overrun_s),
        generator: out.generator,
    };
    Ok((collector, outcome))
}

/// Longest a real run may take to stop after its planned end (issue 4): the
/// connect and query deadlines bound it even when a replica hangs.
pub const STOP_WITHIN_S: f64 = 2.0;

/// Whether every task stopped within [`STOP_WITHIN_S`] of the planned end.
fn stop_verdict(overrun_s: f64) -> Verdict {
    Verdict {
        name: "stopped on time".into(),
        ok: overrun_s <= STOP_WITHIN_S,
        detail: format!("every session, probe and fault task stopped {overrun_s:.2} s after the planned end (limit {STOP_WITHIN_S} s)"),
    }
}

/// The saturation guard's verdict: fails when plbbench itself was the bottleneck.
fn generator_verdict(g: &GeneratorReport) -> Verdict {
    Verdict { name: "generator not saturated".into(), ok: !g.saturated, detail: g.detail() }
}

/// Leaves a shared cluster as the run found it: every fault the schedule
/// left open (up to the signal, when interrupted) is ended, the latest first:
/// a down replica is started, a paused one resumed, a partitioned one healed
/// and a slow one given its full budget C back.
fn heal(cluster: &mut Cluster, plan: &Plan, until_s: Option<f64>) {
    let applied: Vec<_> = plan.faults.iter().filter(|e| until_s.is_none_or(|t| e.t_s <= t)).copied().collect();
    for (r, a) in crate::core::faults::undo(&applied, plan.args.common.replicas) {
        if let Err(e) = cluster.apply(r, Fault::of(a, plan.args.common.cpus)) {
            eprintln!("plbbench: warning: could not restore r{} ({a}): {e}", r + 1);
        }
    }
}
