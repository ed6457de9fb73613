//! `plbbench calibrate`: measures what one replica spends, inside the
//! cluster and under its CPU quota (design.md §3, "Operating point"), and
//! writes the calibration file the workload's costs and the simulator are
//! taken from. For each query template, closed-loop load at each of
//! `--connections` (the `bench` machinery) gives queries/s and, from the
//! replica's cgroup CPU over the window, CPU per query; how that cost grows
//! with concurrency under the quota is part of the file. Connection set-up
//! (connect, SCRAM authentication, a prepare and one query) is measured
//! one connection after another, apart from the backend's exit at close,
//! which no client waits for. An unthrottled one-at-a-time
//! cost, which the workload was first sized from, understates all of these.

use super::bench::{self, BenchSpec};
use super::lists::parse_list;
use super::run::plan::load_workload;
use crate::cluster::local::{default_state_dir, LocalCluster, LocalOptions};
use crate::core::calibration::{Calibration, ConnectCost, Machine, Point, TemplateCost};
use crate::core::workload::{QueryTemplate, Workload};
use crate::error::{input, Error};
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `plbbench calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Workload whose templates to measure [default: built-in analytics].
    #[arg(long, value_name = "FILE")]
    pub workload: Option<PathBuf>,
    /// CPU quota of the measured replica, cores (C; the run's --cpus).
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// Closed-loop connections of each template's measurements, a comma list.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16", value_name = "LIST")]
    pub connections: Vec<String>,
    /// The concurrency whose cost per query the workload uses (one of --connections).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub at: u32,
    /// Seconds of each closed-loop measurement.
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    pub seconds: f64,
    /// Connections opened one after another to measure set-up cost.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub connects: u32,
    /// Where to write the calibration file.
    #[arg(long, default_value = "calibration.toml", value_name = "FILE")]
    pub out: PathBuf,
}

impl CalibrateArgs {
    /// The concurrency levels, checked (one line naming the flag, exit 2).
    fn levels(&self) -> Result<Vec<u32>, Error> {
        let levels =
            parse_list("--connections", &self.connections, |s| {
                s.trim().parse::<u32>().ok().filter(|n| (1..=256).contains(n)).ok_or_else(|| {
                    input("--connections", format!("`{s}` is not a number of connections from 1 to 256"))
                })
            })?;
        if !(self.cpus.is_finite() && self.cpus > 0.0) {
            return Err(input("--cpus", format!("must be a positive number of cores, got {}", self.cpus)));
        }
        if !levels.contains(&self.at) {
            return Err(input("--at", format!("{} is not one of --connections", self.at)));
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= 3600.0) {
            return Err(input("--seconds", format!("must be in (0, 3600], got {}", self.seconds)));
        }
        if self.connects == 0 {
            return Err(input("--connects", "must be at least 1"));
        }
        Ok(levels)
    }
}

/// Runs the calibration and writes its file.
pub fn calibrate(args: CalibrateArgs) -> Result<(), Error> {
    let levels = args.levels()?;
    let w = load_workload(args.workload.as_deref())?;
    let machine = machine();
    let opts = LocalOptions {
        replicas: 1,
        cpus: args.cpus,
        state_dir: default_state_dir().with_file_name("calibrate"),
        scale: w.dataset.scale,
        seed: w.dataset.seed,
        ..LocalOptions::default()
    };
    eprintln!("plbbench: starting one replica at {} cores (dataset scale {})", args.cpus, opts.scale);
    let c = LocalCluster::up(&opts).context("starting the calibration replica")?;
    if !c.cpu_budget_enforced() {
        eprintln!("plbbench: warning: cgroups are not writable here: the replica runs without its quota");
    }
    let connect = connect_cost(&c, &w.query[0], args.connects)?;
    eprintln!(
        "plbbench: connection {:.2} ms CPU ({:.2} ms of it at close), set-up {:.2} ms wall one after another, {:.2} ms on an idle replica ({:.2} ms outside its CPU)",
        connect.cpu_ms,
        connect.close_cpu_ms,
        connect.wall_ms,
        connect.idle_wall_ms,
        connect.latency_ms()
    );
    println!("template,class,connections,queries,qps,cpu_ms,cpu_fraction,p50_ms,p99_ms");
    let mut template = Vec::new();
    for q in &w.query {
        let mut at = Vec::new();
        for &n in &levels {
            let p = point(&c, q, n, args.seconds, args.cpus)?;
            println!(
                "{},{},{},{},{:.2},{:.2},{:.3},{:.2},{:.2}",
                q.name, q.class, n, p.queries, p.qps, p.cpu_ms, p.cpu_fraction, p.p50_ms, p.p99_ms
            );
            at.push(p);
        }
        let cpu_ms = at.iter().find(|p| p.connections == args.at).map_or(0.0, |p| p.cpu_ms);
        template.push(TemplateCost {
            name: q.name.clone(),
            class: q.class,
            cpu_ms,
            capacity_qps: round2(args.cpus * 1000.0 / cpu_ms),
            at,
        });
    }
    let cal = Calibration {
        schema_version: 1,
        measured_utc: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        plbbench_version: env!("CARGO_PKG_VERSION").into(),
        machine,
        postgres_version: c.pg_version(),
        cpus: args.cpus,
        cpu_budget_enforced: c.cpu_budget_enforced(),
        workload: w.name.clone(),
        dataset_scale: w.dataset.scale,
        connections: args.at,
        connect,
        template,
    };
    drop(c);
    crate::fsutil::write_atomic(&args.out, cal.to_toml(), 0o644)
        .with_context(|| format!("writing {}", args.out.display()))?;
    report(&cal, &w);
    eprintln!("wrote {}", args.out.display());
    Ok(())
}

/// What the calibrated costs mean for the workload's offered load at the
/// main job's settings (T=1000, 25:75, K=5, rr-split 3:2), and the
/// `between_ms` that sizes it by the stated principle: the busier class
/// partition at 70% of its CPU budget in the baseline.
fn report(cal: &Calibration, w: &Workload) {
    let mut sized = w.clone();
    if cal.apply(&mut sized).is_err() {
        return;
    }
    let partition = |w: &Workload| w.partition_utilisation(1000, 25, (3, 2), cal.cpus);
    eprintln!(
        "plbbench: at T=1000, 25:75 the workload offers {:.0}% of a 5-replica cluster's CPU, {:.0}% of the busier rr-split 3:2 partition",
        sized.offered_utilisation(1000, 25, 5, cal.cpus) * 100.0,
        partition(&sized) * 100.0
    );
    eprintln!("plbbench: session.between_ms = {:.0} puts that partition at 70%", sized.between_for(0.70, partition));
}

/// The machine the calibration runs on.
fn machine() -> Machine {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    sys.refresh_cpu_all();
    let cpu_model = sys.cpus().first().map_or(String::new(), |c| c.brand().trim().to_string());
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib: (sys.total_memory() as f64 / (1u64 << 30) as f64 * 10.0).round() / 10.0,
        cpu_model,
        load_average: round2(sysinfo::System::load_average().one),
    }
}

/// One template driven closed-loop by `n` connections for `seconds`.
fn point(c: &LocalCluster, q: &QueryTemplate, n: u32, seconds: f64, cpus: f64) -> Result<Point, Error> {
    let spec = BenchSpec {
        servers: vec![c.config(0)],
        query: q.clone(),
        connections: n,
        duration: Duration::from_secs_f64(seconds),
        prepared: true,
        rate: None,
        seed: 1,
    };
    let cpu0 = cpu(c)?;
    let t0 = Instant::now();
    let r = bench::measure(&spec, 2)?;
    let wall = t0.elapsed().as_secs_f64();
    let used = cpu(c)? - cpu0;
    if r.queries == 0 {
        return Err(Error::Run(anyhow::anyhow!("{}: no query completed at {n} connections", q.name)));
    }
    Ok(Point {
        connections: n,
        queries: r.queries,
        qps: round2(r.qps),
        cpu_ms: round2(used * 1000.0 / r.queries as f64),
        cpu_fraction: (used / wall / cpus * 1000.0).round() / 1000.0,
        p50_ms: round2(r.p50_ms),
        p99_ms: round2(r.p99_ms),
    })
}

/// Connections opened at once while measuring set-up apart from close.
const CONNECT_BATCH: u32 = 50;

/// `n` connections one after another, in batches held open: each connects,
/// authenticates, prepares the first template and runs `SELECT 1`; the
/// replica's CPU is read once the batch is open (set-up) and again once it
/// is closed and its backends have exited (close). Wall time is the
/// set-up's, as a client waits for it.
fn connect_cost(c: &LocalCluster, q: &QueryTemplate, n: u32) -> Result<ConnectCost, Error> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("tokio")?;
    let cfg = c.config(0);
    let (mut setup_s, mut close_s, mut wall) = (0.0, 0.0, Duration::ZERO);
    let mut left = n;
    while left > 0 {
        let batch = left.min(CONNECT_BATCH);
        left -= batch;
        let cpu0 = cpu(c)?;
        let t0 = Instant::now();
        let open = rt.block_on(async {
            let mut open = Vec::new();
            for _ in 0..batch {
                open.push(set_up(&cfg, q).await?);
            }
            Ok::<_, anyhow::Error>(open)
        })?;
        wall += t0.elapsed();
        let cpu1 = cpu(c)?;
        rt.block_on(async {
            for (client, task) in open {
                drop(client);
                let _ = task.await;
            }
            // The backends exit after their sockets close.
            tokio::time::sleep(Duration::from_millis(300)).await;
        });
        setup_s += cpu1 - cpu0;
        close_s += cpu(c)? - cpu1;
    }
    let per = |s: f64| round2(s * 1000.0 / f64::from(n));
    Ok(ConnectCost {
        connections: n,
        cpu_ms: per(setup_s + close_s),
        close_cpu_ms: per(close_s),
        wall_ms: per(wall.as_secs_f64()),
        idle_wall_ms: round2(idle_connect_ms(&rt, c, q)?),
    })
}

/// One connection's set-up as calibrate measures it: connect, SCRAM, a
/// prepare of `q` and `SELECT 1`; returns the client and its connection task.
async fn set_up(
    cfg: &tokio_postgres::Config,
    q: &QueryTemplate,
) -> anyhow::Result<(tokio_postgres::Client, tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>)> {
    let (client, conn) = cfg.connect(tokio_postgres::NoTls).await.context("connecting to r1")?;
    let task = tokio::spawn(conn);
    crate::backend::driver::prepare(&client, q).await.with_context(|| format!("preparing {}", q.name))?;
    client.simple_query("SELECT 1").await.context("SELECT 1")?;
    Ok((client, task))
}

/// Connections timed on an idle replica.
const IDLE_CONNECTS: usize = 21;
/// The pause before each of them: the previous backend has exited and the
/// quota period has rolled over, so the set-up runs at full speed.
const IDLE_GAP: Duration = Duration::from_millis(250);

/// The median wall time of a set-up (connect, SCRAM, prepare, `SELECT 1`)
/// on an idle replica whose quota is unspent, ms: what a session's first
/// query waits beyond the set-up's CPU when nothing queues.
fn idle_connect_ms(rt: &tokio::runtime::Runtime, c: &LocalCluster, q: &QueryTemplate) -> Result<f64, Error> {
    let cfg = c.config(0);
    let mut walls = rt.block_on(async {
        let mut walls = Vec::new();
        for _ in 0..IDLE_CONNECTS {
            tokio::time::sleep(IDLE_GAP).await;
            let t0 = Instant::now();
            let (client, task) = set_up(&cfg, q).await?;
            walls.push(t0.elapsed().as_secs_f64() * 1000.0);
            drop(client);
            let _ = task.await;
        }
        Ok::<_, anyhow::Error>(walls)
    })?;
    walls.sort_by(f64::total_cmp);
    Ok(walls[walls.len() / 2])
}

fn cpu(c: &LocalCluster) -> Result<f64, Error> {
    c.cpu_seconds(0).ok_or_else(|| Error::Run(anyhow::anyhow!("no CPU accounting for r1 (cgroups)")))
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
