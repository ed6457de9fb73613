//! `plbbench cluster up|status|down|fault|cpu`, `plbbench image build` and
//! `plbbench calibrate`: the user-facing commands over the local and docker
//! backends. `up` leaves the cluster running for later runs; `fault` and
//! `cpu` act on it (they also serve as an external cluster file's
//! commands); `calibrate` measures each query template's CPU cost on one
//! replica, which is what the simulator's `cpu_ms` and the workload's think
//! time are calibrated from, and then the replica's throughput under its CPU
//! quota with the `bench` machinery (a check of the first method: at
//! saturation, qps x cost should be about the quota). The flags of all
//! three are declared here, beside the code that reads them.

use super::run::plan::load_workload;
use super::signals::catch_signals;
use crate::backend::driver::{execute, prepare};
use crate::cluster::docker::{self, DockerCluster, DockerOptions};
use crate::cluster::local::{default_state_dir, LocalCluster, LocalOptions};
use crate::cluster::{Cluster, Fault};
use crate::core::model::{parse_replica, Class, ReplicaId};
use crate::core::settings::{ClusterKind, Named};
use crate::error::{input, Error};
use anyhow::Context;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Instant;

/// `plbbench image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// What to do with the image.
    #[command(subcommand)]
    pub action: ImageAction,
}

/// Image actions.
#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build plbbench/postgres:15 (debootstrap + import through the Engine API) unless it is current.
    Build {
        /// Rebuild even when a current image exists.
        #[arg(long)]
        force: bool,
    },
}

/// `plbbench calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Workload whose templates to measure [default: built-in analytics].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// Queries per template.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub queries: u32,
    /// CPU quota (cores) under which throughput is also measured with `bench` machinery (0 skips that part).
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// Connections of each throughput measurement under the quota.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub connections: u32,
    /// Seconds of each throughput measurement under the quota.
    #[arg(long, default_value_t = 5.0, value_name = "S")]
    pub seconds: f64,
}

/// `plbbench cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// up, status or down.
    #[command(subcommand)]
    pub action: ClusterAction,
}

/// Cluster actions.
#[derive(Debug, Subcommand)]
pub enum ClusterAction {
    /// Start K replicas, load the dataset, print one DSN per line, and leave them running.
    Up(ClusterUpArgs),
    /// Show each replica's port, pid, health and CPU budget.
    Status(ClusterSelect),
    /// Stop and remove everything the cluster used.
    Down(ClusterDownArgs),
    /// Apply one fault to one replica of the running cluster (down, rejoin, pause, resume, slow=C, partition, heal).
    Fault(ClusterFaultArgs),
    /// Print one replica's cumulative CPU seconds (a sampler for external cluster files).
    Cpu(ClusterReplicaArgs),
}

/// `plbbench cluster down`.
#[derive(Debug, Args)]
pub struct ClusterDownArgs {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
    /// docker: remove every container, network, volume and data image with plbbench's labels, not only this cluster's.
    #[arg(long)]
    pub all: bool,
}

/// `plbbench cluster fault`.
#[derive(Debug, Args)]
pub struct ClusterFaultArgs {
    /// The fault: down, rejoin, pause, resume, slow=CORES, partition, heal.
    #[arg(value_name = "FAULT")]
    pub fault: String,
    /// Replica r1..rK.
    #[arg(value_name = "REPLICA")]
    pub replica: String,
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}

/// `plbbench cluster cpu`.
#[derive(Debug, Args)]
pub struct ClusterReplicaArgs {
    /// Replica r1..rK.
    #[arg(value_name = "REPLICA")]
    pub replica: String,
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}

/// `plbbench cluster up`.
#[derive(Debug, Args)]
pub struct ClusterUpArgs {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
    /// Number of replicas K.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub replicas: usize,
    /// CPU budget per replica in cores.
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// docker: memory limit per container in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pub memory_mib: u64,
    /// Workload whose dataset to load [default: built-in analytics].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
}

/// Which cluster `status`/`down` act on.
#[derive(Debug, Args)]
pub struct ClusterSelect {
    /// Backend.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: ClusterKind,
}

fn provisioned(kind: ClusterKind) -> Result<(), Error> {
    match kind {
        ClusterKind::Local | ClusterKind::Docker => Ok(()),
        other => Err(input(
            "--backend",
            format!("`{}` clusters are not provisioned by plbbench; use local or docker", other.name()),
        )),
    }
}

/// The cluster that `cluster up --backend KIND` left running, if any.
fn running(kind: ClusterKind) -> Result<Option<Cluster>, Error> {
    provisioned(kind)?;
    Ok(crate::cluster::left_running(kind)?)
}

/// `plbbench image build`.
pub fn image(args: ImageArgs) -> Result<(), Error> {
    let ImageAction::Build { force } = args.action;
    let b = docker::build_image(force).context("image build")?;
    let mib = b.size as f64 / (1u64 << 20) as f64;
    if b.reused {
        eprintln!("plbbench: {} is current ({mib:.0} MiB); --force rebuilds it", docker::image::IMAGE);
    } else {
        eprintln!("plbbench: built {} in {:.0} s ({mib:.0} MiB)", docker::image::IMAGE, b.seconds);
    }
    println!("{}", b.id);
    Ok(())
}

fn up(a: ClusterUpArgs) -> Result<(), Error> {
    provisioned(a.backend)?;
    if a.replicas == 0 {
        return Err(input("--replicas", "must be at least 1"));
    }
    if !(a.cpus.is_finite() && a.cpus > 0.0) {
        return Err(input("--cpus", format!("must be a positive number of cores, got {}", a.cpus)));
    }
    let w = load_workload(a.workload.as_deref())?;
    let started = Instant::now();
    let interrupted = catch_signals();
    let mut c = match a.backend {
        ClusterKind::Docker => {
            let opts = DockerOptions {
                replicas: a.replicas,
                cpus: a.cpus,
                memory_mib: a.memory_mib,
                scale: w.dataset.scale,
                seed: w.dataset.seed,
                ..DockerOptions::default()
            };
            let c = DockerCluster::up(&opts).context("cluster up")?;
            let t: Vec<String> = c.up_timings().iter().map(|(k, v)| format!("{k} {v:.1} s")).collect();
            eprintln!("plbbench: docker cluster {} ({})", c.id(), t.join(", "));
            Cluster::Docker(c)
        }
        _ => {
            let opts = LocalOptions {
                replicas: a.replicas,
                cpus: a.cpus,
                state_dir: default_state_dir(),
                scale: w.dataset.scale,
                seed: w.dataset.seed,
                ..LocalOptions::default()
            };
            Cluster::Local(LocalCluster::up(&opts).context("cluster up")?)
        }
    };
    if !interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        c.set_persistent(true).context("saving the cluster state")?;
    }
    if interrupted.load(std::sync::atomic::Ordering::SeqCst) {
        drop(c);
        return Err(Error::Run(anyhow::anyhow!("interrupted while the cluster was starting; it was removed")));
    }
    if !c.cpu_budget_enforced() {
        eprintln!("plbbench: warning: cgroups are not writable here; the CPU budget is not enforced");
    }
    eprintln!(
        "plbbench: {} replicas up in {:.1} s ({})",
        c.replicas(),
        started.elapsed().as_secs_f64(),
        c.pg_version()
    );
    for r in 0..c.replicas() {
        match &c {
            Cluster::Docker(d) => println!("{}", d.dsn(r)),
            Cluster::Local(l) => println!("{}", l.dsn(r)),
            Cluster::External(_) => {}
        }
    }
    Ok(())
}

fn status(kind: ClusterKind) -> Result<(), Error> {
    let Some(c) = running(kind)? else {
        println!("no {} cluster is running", kind.name());
        return Ok(());
    };
    match c {
        Cluster::Docker(d) => {
            println!("replica  port   container                  state    cpus");
            for (r, st) in d.states().into_iter().enumerate() {
                println!(
                    "{:<8} {:<6} {:<26} {:<8} {:.2}",
                    ReplicaId(r).to_string(),
                    d.port(r),
                    d.container(r),
                    st,
                    d.cpus(r)
                );
            }
        }
        Cluster::Local(c) => {
            println!("replica  port   pid      health   cpu_budget");
            for s in c.status() {
                let health = if s.paused {
                    "paused"
                } else if s.healthy {
                    "healthy"
                } else {
                    "down"
                };
                let pid = s.pid.map_or("-".into(), |p| p.to_string());
                let cpus = if c.cpu_budget_enforced() { format!("{:.2}", s.cpus) } else { "unenforced".into() };
                println!("{:<8} {:<6} {:<8} {:<8} {}", s.name, s.port, pid, health, cpus);
            }
        }
        Cluster::External(_) => {}
    }
    Ok(())
}

fn down(kind: ClusterKind, all: bool) -> Result<(), Error> {
    provisioned(kind)?;
    if kind == ClusterKind::Docker {
        let dir = docker::default_state_dir();
        if all {
            let n = docker::remove_all().context("cluster down --all")?;
            crate::cluster::DockerCluster::cleanup_stale(&dir).context("cleaning the docker state")?;
            eprintln!("plbbench: removed {n} docker objects with plbbench's labels");
            return Ok(());
        }
        match DockerCluster::load(&dir).context("reading the docker cluster state")? {
            Some(c) => c.down().context("cluster down")?,
            None => {
                DockerCluster::cleanup_stale(&dir).context("cleaning a stale docker cluster")?;
            }
        }
        eprintln!("plbbench: docker cluster removed");
        return Ok(());
    }
    if all {
        return Err(input("--all", "only the docker backend has objects outside plbbench's state directory"));
    }
    let dir = default_state_dir();
    match LocalCluster::load(&dir).context("reading the cluster state")? {
        Some(c) => c.down().context("cluster down")?,
        None => {
            LocalCluster::cleanup_stale(&dir).context("cleaning a stale cluster")?;
        }
    }
    eprintln!("plbbench: local cluster removed");
    Ok(())
}

/// Runs a `cluster` action.
pub fn cluster(args: ClusterArgs) -> Result<(), Error> {
    match args.action {
        ClusterAction::Up(a) => up(a),
        ClusterAction::Status(s) => status(s.backend),
        ClusterAction::Down(s) => down(s.backend, s.all),
        ClusterAction::Fault(a) => {
            let fault = Fault::parse(&a.fault).map_err(|e| input("FAULT", e))?;
            let mut c = running(a.backend)?
                .ok_or_else(|| input("--backend", format!("no {} cluster is running", a.backend.name())))?;
            let r = parse_replica(&a.replica, c.replicas()).map_err(|e| input("REPLICA", e))?;
            let t0 = Instant::now();
            c.apply(r.idx(), fault).with_context(|| format!("{fault} of {r}"))?;
            eprintln!("plbbench: {fault} of {r} applied in {:.2} s", t0.elapsed().as_secs_f64());
            Ok(())
        }
        ClusterAction::Cpu(a) => {
            let c = running(a.backend)?
                .ok_or_else(|| input("--backend", format!("no {} cluster is running", a.backend.name())))?;
            let r = parse_replica(&a.replica, c.replicas()).map_err(|e| input("REPLICA", e))?;
            let secs = match &c {
                Cluster::Docker(d) => {
                    // A fresh reading, not the poller's (which has only just started).
                    d.cpu_now(r.idx()).context("reading the stats")?.map(|ns| ns as f64 / 1e9)
                }
                other => other.cpu_seconds(r.idx()),
            };
            let secs = secs.ok_or_else(|| Error::Run(anyhow::anyhow!("no CPU accounting for {r}")))?;
            println!("{secs:.3}");
            Ok(())
        }
    }
}

/// Measures the CPU milliseconds of each query template on replica r1
/// (sequential queries on one connection, cgroup CPU accounting), and the
/// `between_ms` that puts the default mix at 70% of the cluster budget.
pub fn calibrate(args: CalibrateArgs) -> Result<(), Error> {
    if args.queries == 0 {
        return Err(input("--queries", "must be at least 1"));
    }
    if !(args.cpus.is_finite() && args.cpus >= 0.0) {
        return Err(input("--cpus", format!("must be a non-negative number of cores, got {}", args.cpus)));
    }
    if args.connections == 0 {
        return Err(input("--connections", "must be at least 1"));
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err(input("--seconds", format!("must be a positive number of seconds, got {}", args.seconds)));
    }
    let mut w = load_workload(args.workload.as_deref())?;
    let opts = LocalOptions {
        replicas: 1,
        cpus: 0.0,
        state_dir: default_state_dir().with_file_name("calibrate"),
        scale: w.dataset.scale,
        seed: w.dataset.seed,
        ..LocalOptions::default()
    };
    eprintln!("plbbench: starting one unthrottled replica (dataset scale {})", opts.scale);
    let mut c = LocalCluster::up(&opts).context("starting the calibration replica")?;
    let cfg = c.config(0);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio")?;
    println!("template,class,queries,cpu_ms,wall_ms");
    for i in 0..w.query.len() {
        let (cpu_ms, wall_ms) = runtime.block_on(measure(&c, &cfg, &w.query[i], args.queries))?;
        let q = &w.query[i];
        println!("{},{},{},{:.2},{:.2}", q.name, q.class, args.queries, cpu_ms, wall_ms);
        w.query[i].cpu_ms = (cpu_ms * 100.0).round() / 100.0;
    }
    if args.cpus > 0.0 {
        throughput_under_quota(&mut c, &w, &args)?;
    }
    drop(c);
    let between = w.between_for_utilisation(0.70, 1000, 25, 5, 0.3);
    eprintln!(
        "plbbench: mean cpu_ms P {:.2}, F {:.2}; between_ms = {:.0} puts T=1000, 25:75, K=5, C=0.3 at 70% of the budget",
        w.mean_cpu_ms(Class::P),
        w.mean_cpu_ms(Class::F),
        between
    );
    Ok(())
}

/// The second method: r1 under a quota of `--cpus` cores, each template
/// driven closed-loop by `--connections` connections for `--seconds`; the
/// implied cost is quota / qps.
fn throughput_under_quota(
    c: &mut LocalCluster,
    w: &crate::core::workload::Workload,
    args: &CalibrateArgs,
) -> Result<(), Error> {
    if !c.cpu_budget_enforced() {
        eprintln!("plbbench: cgroups are not writable here: no quota to measure throughput under (skipped)");
        return Ok(());
    }
    c.set_cpus(0, args.cpus).context("setting r1's CPU quota")?;
    println!("template,class,cpus,connections,qps_at_quota,p50_ms,p99_ms,implied_cpu_ms,generator_cpu_cores");
    for q in &w.query {
        let spec = super::bench::BenchSpec {
            servers: vec![c.config(0)],
            query: q.clone(),
            connections: args.connections,
            duration: std::time::Duration::from_secs_f64(args.seconds),
            prepared: true,
            rate: None,
            seed: 1,
        };
        let r = super::bench::measure(&spec, 2)?;
        let implied = if r.qps > 0.0 { format!("{:.2}", args.cpus * 1000.0 / r.qps) } else { "-".into() };
        let cpu = r.generator_cpu_cores.map_or("-".into(), |c| format!("{c:.3}"));
        println!(
            "{},{},{},{},{:.2},{:.2},{:.2},{implied},{cpu}",
            q.name, q.class, args.cpus, args.connections, r.qps, r.p50_ms, r.p99_ms
        );
    }
    Ok(())
}

async fn measure(
    c: &LocalCluster,
    cfg: &tokio_postgres::Config,
    q: &crate::core::workload::QueryTemplate,
    n: u32,
) -> Result<(f64, f64), Error> {
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.context("connecting to r1")?;
    tokio::spawn(conn);
    let st = prepare(&client, q).await.with_context(|| format!("preparing {}", q.name))?;
    let run = |i: u32| execute(&client, &st, q, (i64::from(i) * 7919) % q.key_range.max(1) as i64 + 1);
    for i in 0..n.min(20) {
        run(i).await.with_context(|| format!("warming up {}", q.name))?;
    }
    let cpu0 = c.cpu_seconds(0).context("no CPU accounting for r1")?;
    let t0 = Instant::now();
    for i in 0..n {
        run(i).await.with_context(|| format!("running {}", q.name))?;
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = c.cpu_seconds(0).context("no CPU accounting for r1")? - cpu0;
    Ok((cpu * 1000.0 / f64::from(n), wall * 1000.0 / f64::from(n)))
}
