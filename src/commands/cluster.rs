//! `plbbench cluster up|status|down|fault|cpu` and `plbbench image build`:
//! the user-facing commands over the local and docker backends. `up` leaves
//! the cluster running for later runs; `fault` and `cpu` act on it (they
//! also serve as an external cluster file's commands). The flags are
//! declared here, beside the code that reads them.

use super::run::plan::{load_workload, STEADY_WORKLOAD};
use super::signals::catch_signals;
use crate::cluster::docker::{self, DockerCluster, DockerOptions};
use crate::cluster::local::{default_state_dir, LocalCluster, LocalOptions};
use crate::cluster::{Cluster, Fault};
use crate::core::model::{parse_replica, ReplicaId};
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
    /// Workload whose dataset to load: a file or a built-in name [default: analytics; every built-in has the same dataset].
    #[arg(long, value_name = "FILE|NAME")]
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
    let w = load_workload(a.workload.as_deref(), STEADY_WORKLOAD)?;
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
