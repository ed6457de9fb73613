//! Glue between a plan and the cluster backends: builds the client scripts
//! and router, runs the sessions on the simulator or a real cluster, and
//! returns the filled collector with what the backend observed. Part of the
//! run command: no backend imports it; they return a [`BackendOutcome`]
//! from the core.

use super::plan::{ClusterSpec, ExternalSpec, Plan};
use crate::backend::driver::{self, DriverInput};
use crate::backend::sim::{self, SimInput};
use crate::cluster::external::{ClusterFile, ExternalCluster};
use crate::cluster::local::{default_state_dir, LocalCluster, LocalOptions};
use crate::cluster::{docker, Cluster, DockerCluster, DockerOptions, Fault};
use crate::commands::signals::catch_signals;
use crate::core::control::Controller;
use crate::core::metrics::Collector;
use crate::core::outcome::{BackendOutcome, Verdict};
use crate::core::router::Router;
use crate::core::saturation::GeneratorReport;
use crate::core::schedule;
use crate::core::settings::{ClusterKind, GeneratorsOn, Named};
use crate::error::Error;
use anyhow::Context;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Every client's script, from the plan's seed.
pub fn clients(plan: &Plan) -> Vec<schedule::Client> {
    schedule::clients(plan.clients, plan.premium_pct, plan.ramp_s, plan.seed)
}

/// The run controller for the plan: a fresh router, its watch and gate.
pub fn control(plan: &Plan) -> Controller {
    let timeout_ms = plan.workload.client.query_timeout_ms as f64;
    let c =
        Controller::new(Router::new(plan.router.clone()), plan.watch.clone(), plan.gate.clone(), plan.cpus, timeout_ms);
    match plan.tier {
        Some(tier) => c.with_tier(tier),
        None => c,
    }
}

/// The verdict of a simulator run whose clock stopped advancing: the run
/// stops there, its folder is written as a partial run's, and the command
/// fails whatever `--checks` says.
pub const SIM_PROGRESS: &str = "simulator progress";

/// Runs the plan on the simulator.
pub fn run_sim(plan: &Plan, mut collector: Collector) -> (Collector, BackendOutcome) {
    let out = sim::run(
        SimInput {
            workload: &plan.workload,
            clients: clients(plan),
            control: control(plan),
            faults: &plan.faults,
            cpus: plan.cpus,
            duration_s: plan.duration_s,
            probe_interval_s: plan.probe_interval.map_or(0.0, |d| d.as_secs_f64()),
            max_connections: plan.max_connections,
        },
        &mut collector,
    );
    let outcome = BackendOutcome {
        in_flight: out.in_flight,
        partial: out.stalled.is_some(),
        cpu_budget_enforced: false,
        max_connections: Some(plan.max_connections),
        tier: out.tier,
        modes: out.modes,
        verdicts: out
            .stalled
            .map(|why| Verdict { name: SIM_PROGRESS.into(), ok: false, detail: why })
            .into_iter()
            .collect(),
        ..Default::default()
    };
    (collector, outcome)
}

/// The cluster that `plbbench cluster up --backend KIND` left running, if
/// any, checked to have K replicas.
fn reuse_running(plan: &Plan, kind: ClusterKind) -> Result<Option<Cluster>, Error> {
    let k = plan.replicas;
    let Some(c) = crate::cluster::left_running(kind)? else { return Ok(None) };
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
    let (k, cpus, w) = (plan.replicas, plan.cpus, &plan.workload.dataset);
    eprintln!("plbbench: starting a {k}-replica {} PostgreSQL cluster (dataset scale {})", kind.name(), w.scale);
    if kind == ClusterKind::Docker {
        let state_dir = docker::default_state_dir().with_file_name("docker-run");
        let opts = DockerOptions {
            replicas: k,
            cpus,
            scale: w.scale,
            seed: w.seed,
            state_dir,
            max_connections: plan.max_connections,
            ..DockerOptions::default()
        };
        return DockerCluster::up(&opts)
            .context("starting the docker cluster")
            .map(Cluster::Docker)
            .map_err(Error::Run);
    }
    let state_dir = default_state_dir().with_file_name("run");
    let opts = LocalOptions {
        replicas: k,
        cpus,
        state_dir,
        scale: w.scale,
        seed: w.seed,
        max_connections: plan.max_connections,
        ..LocalOptions::default()
    };
    LocalCluster::up(&opts).context("starting the local cluster").map(Cluster::Local).map_err(Error::Run)
}

/// The external cluster of `--dsn`/`--cluster-file`, its dataset checked.
fn external_cluster(plan: &Plan, x: &ExternalSpec) -> Result<ExternalCluster, Error> {
    let file = match &x.cluster_file {
        Some(p) => Some(ClusterFile::read(p).map_err(|e| Error::Input(format!("--cluster-file: {e}")))?),
        None => None,
    };
    let w = &plan.workload.dataset;
    let c = ExternalCluster::open(&x.dsns, file, w.scale, w.seed, x.dataset).map_err(|e| match e {
        crate::cluster::ExternalError::Input(m) => Error::Input(m),
        other => Error::Run(anyhow::Error::new(other).context("opening the external cluster")),
    })?;
    if c.replicas() != plan.replicas {
        return Err(Error::Input(format!(
            "--replicas: the external cluster has {} replicas, not {}",
            c.replicas(),
            plan.replicas
        )));
    }
    Ok(c)
}

/// The plan's real cluster: the external one it names, the one `cluster
/// up` left running, or one started for this command alone (removed when
/// dropped); with the max_connections it was started with, if it was.
pub fn open_cluster(plan: &Plan) -> Result<(Cluster, Option<u32>), Error> {
    Ok(match &plan.cluster {
        ClusterSpec::External(x) => (Cluster::External(external_cluster(plan, x)?), None),
        ClusterSpec::Sim => return Err(Error::Input("--cluster: sim has no servers; name a real cluster".into())),
        spec => match reuse_running(plan, spec.kind())? {
            Some(c) => (c, None),
            None => (start(plan, spec.kind())?, Some(plan.max_connections)),
        },
    })
}

/// Runs the plan on a real cluster of the plan's backend (local, docker or
/// external).
pub fn run_real(plan: &Plan, collector: Collector) -> Result<(Collector, BackendOutcome), Error> {
    let interrupted = catch_signals();
    let metrics = match plan.metrics_addr.filter(|_| plan.via_proxy.is_none()) {
        Some(addr) => Some(
            crate::backend::live_metrics::bind(addr)
                .map_err(|e| Error::Input(format!("--metrics-addr: cannot listen on {addr}: {e}")))?,
        ),
        None => None,
    };
    let (cluster, max_connections) = open_cluster(plan)?;
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
    let proxy = match &plan.via_proxy {
        Some(flags) => Some(super::proxies::start(
            &cluster,
            flags,
            &plan.workload,
            proxy_ip(plan)?,
            plan.proxies,
            plan.proxy_faults.clone(),
        )?),
        None => None,
    };
    let (mut proxy, link) = proxy.map_or((None, None), |(p, l)| (Some(p), Some(l)));
    let mut children = match (plan.generators > 1, &proxy) {
        (true, Some(p)) => Some((super::generators::spawn(plan)?, p.addrs.clone(), p.password.clone())),
        _ => None,
    };
    let wall_minus_mono_s = crate::backend::generator_feed::wall_minus_mono_s();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the tokio runtime")?;
    let (start, remotes) = match &mut children {
        Some((c, addrs, password)) => c.go(addrs, password.as_deref(), &cluster),
        None => (std::time::Instant::now(), Vec::new()),
    };
    let start_unix_s = crate::backend::proxy_feed::unix_now() - start.elapsed().as_secs_f64();
    if let Some(p) = &mut proxy {
        p.inject(start);
    }
    let cluster = Arc::new(Mutex::new(cluster));
    let input = DriverInput {
        workload: Arc::new(plan.workload.clone()),
        clients: if remotes.is_empty() { clients(plan) } else { Vec::new() },
        control: control(plan),
        faults: plan.faults.clone(),
        duration_s: plan.duration_s,
        probe_interval: plan.probe_interval.filter(|_| link.is_none()),
        progress: plan.progress,
        cpus: plan.cpus,
        metrics,
        proxy: link,
        start: Some(start),
        tap: None,
        remotes,
    };
    let (mut collector, out) = runtime.block_on(driver::run(input, cluster.clone(), collector));
    let planned_end = out.interrupted_s.map_or(plan.duration_s, |t| t + driver::DRAIN.as_secs_f64());
    let overrun_s = (out.ended_s - planned_end).max(0.0);
    if let Some(t) = out.interrupted_s {
        collector.truncate(t);
    }
    drop(runtime);
    let generators_verdict = match children {
        Some((c, _, _)) => Some(c.finish(&out.remotes, wall_minus_mono_s)?),
        None => None,
    };
    let via_proxy = proxy.as_ref().map(|p| p.describe());
    let (proxy_verdicts, proxy_tier) = match proxy {
        Some(p) => p.stop(start_unix_s, out.ended_s.min(planned_end), &out.through),
        None => (Vec::new(), None),
    };
    let mut cluster = Arc::try_unwrap(cluster).expect("no task holds the cluster").into_inner().expect("lock");
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
            .chain(proxy_verdicts)
            .chain(generators_verdict)
            .collect(),
        interrupted_by: out.signal,
        stop_overrun_s: Some(overrun_s),
        generator: out.generator,
        max_connections,
        via_proxy,
        tier: None,
        proxy_tier,
        modes: out.modes,
    };
    Ok((collector, outcome))
}

/// Where the run's proxy listens: 127.0.0.1, unless generator containers
/// on a remote engine must reach it.
fn proxy_ip(plan: &Plan) -> Result<std::net::IpAddr, Error> {
    match plan.generators_on {
        GeneratorsOn::Docker => {
            docker::generators::proxy_ip().map_err(|e| Error::Run(anyhow::anyhow!("--generators-on docker: {e}")))
        }
        GeneratorsOn::Host => Ok(std::net::IpAddr::from([127, 0, 0, 1])),
    }
}

/// Longest a real run may take to stop after its planned end (docs/manual.md,
/// "Run validity checks": stop deadline): the connect and query deadlines bound
/// it even when a replica hangs.
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
    for (r, a) in crate::core::faults::undo(&applied, plan.replicas) {
        if let Err(e) = cluster.apply(r.idx(), Fault::of(a, plan.cpus)) {
            eprintln!("plbbench: warning: could not restore {r} ({a}): {e}");
        }
    }
}
