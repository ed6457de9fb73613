//! `plbbench calibrate`: measures what a replica spends, inside the
//! cluster and under its CPU quota (design.md §3, "Operating point"), and
//! writes the calibration file the workload's costs and the simulator are
//! taken from. Every point loads all `--replicas` replicas at once (the
//! cluster's own load on the host) through the `bench` machinery and reads
//! their cgroup CPU over the measured window: closed-loop at each of
//! `--connections` per replica (how the cost grows with concurrency under
//! the quota), then the paced point, the workload's figure: `--paced`
//! connections per replica (a run's concurrency), open-loop at the rate
//! that offers `--paced-load` of the quota (the operating point). With
//! hundreds of mostly idle backends a query costs about 1.3x what it costs
//! closed-loop on a few busy ones (measured 2026-12-02), and that is what a
//! run's replicas spend. Each point is measured `--repeat` times; the
//! median is the figure and the range is kept. Connection set-up
//! (connect, SCRAM authentication, a prepare and one query) is measured
//! one connection after another, apart from the backend's exit at close,
//! which no client waits for. An unthrottled one-at-a-time
//! cost, which the workload was first sized from, understates all of these.

use super::bench::{self, BenchSpec};
use super::lists::parse_list;
use super::run::plan::{load_workload, STEADY_WORKLOAD};
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
    /// Workload whose templates to measure: a file or a built-in name [default: analytics; paper has the same templates].
    #[arg(long, value_name = "FILE|NAME")]
    pub workload: Option<PathBuf>,
    /// CPU quota of the measured replica, cores (C; the run's --cpus).
    #[arg(long, default_value_t = 0.3, value_name = "C")]
    pub cpus: f64,
    /// Replicas started and loaded at once (the cluster's K); 1 measures a
    /// replica alone on an idle host.
    #[arg(long, default_value_t = 5, value_name = "K")]
    pub replicas: usize,
    /// Measurements of each point; the median is the figure, the range is kept.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: u32,
    /// Closed-loop connections per replica of each template's measurements, a comma list.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16", value_name = "LIST")]
    pub connections: Vec<String>,
    /// The closed-loop concurrency whose cost per query the workload uses
    /// (one of --connections) when --paced is 0; the paced rate is sized from it.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub at: u32,
    /// Connections per replica of the paced point, a run's concurrency
    /// (T/K at the main job); its cost is the workload's figure. 0 leaves it out.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub paced: u32,
    /// Offered CPU of the paced point, fraction of each replica's quota
    /// (the operating point of design.md §3).
    #[arg(long, default_value_t = 0.7, value_name = "U")]
    pub paced_load: f64,
    /// Length of each measurement: seconds, or 30s, 1m (`--seconds` is its old name).
    #[arg(long, alias = "seconds", default_value = "10", value_name = "S", value_parser = super::seconds)]
    pub duration: f64,
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
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 3600.0) {
            return Err(input("--duration", format!("must be in (0, 3600] seconds, got {}", self.duration)));
        }
        if self.connects == 0 {
            return Err(input("--connects", "must be at least 1"));
        }
        if !(1..=16).contains(&self.replicas) {
            return Err(input("--replicas", format!("must be from 1 to 16, got {}", self.replicas)));
        }
        if self.paced > 280 {
            return Err(input(
                "--paced",
                format!("{} connections per replica exceed max_connections (300) less headroom", self.paced),
            ));
        }
        if !(self.paced_load.is_finite() && self.paced_load > 0.0 && self.paced_load <= 1.0) {
            return Err(input("--paced-load", format!("must be in (0, 1], got {}", self.paced_load)));
        }
        if !(1..=20).contains(&self.repeat) {
            return Err(input("--repeat", format!("must be from 1 to 20, got {}", self.repeat)));
        }
        Ok(levels)
    }
}

/// Runs the calibration and writes its file.
pub fn calibrate(args: CalibrateArgs) -> Result<(), Error> {
    let levels = args.levels()?;
    let w = load_workload(args.workload.as_deref(), STEADY_WORKLOAD)?;
    let machine = machine();
    let busy = host_cpu_in_use();
    if busy > BUSY_HOST {
        eprintln!(
            "plbbench: warning: {:.0}% of this host's CPU is in use before the replicas start: costs measured beside other work read high (25-43% beside a build, docs/measurement.md); calibrate on a quiet machine",
            busy * 100.0
        );
    }
    let opts = LocalOptions {
        replicas: args.replicas,
        cpus: args.cpus,
        state_dir: default_state_dir().with_file_name("calibrate"),
        scale: w.dataset.scale,
        seed: w.dataset.seed,
        ..LocalOptions::default()
    };
    eprintln!(
        "plbbench: starting {} replica(s) at {} cores each (dataset scale {}); each point is {} x {} s on all of them at once",
        args.replicas, args.cpus, opts.scale, args.repeat, args.duration
    );
    let c = LocalCluster::up(&opts).context("starting the calibration replicas")?;
    if !c.cpu_budget_enforced() {
        eprintln!("plbbench: warning: cgroups are not writable here: the replicas run without their quota");
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
    println!("template,class,connections,rate_qps,queries,qps,cpu_ms,cpu_ms_min,cpu_ms_max,cpu_fraction,p50_ms,p99_ms");
    let mut template = Vec::new();
    for q in &w.query {
        let mut at = Vec::new();
        for &n in &levels {
            let p = repeated(args.repeat, || point(&c, q, n, None, args.duration, args.cpus))?;
            print_point(q, &p);
            at.push(p);
        }
        let closed = at.iter().find(|p| p.connections == args.at).map_or(0.0, |p| p.cpu_ms);
        let mut cpu_ms = closed;
        if args.paced > 0 {
            let p = paced(&c, q, closed, &args)?;
            print_point(q, &p);
            cpu_ms = p.cpu_ms;
            at.push(p);
        }
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
        replicas: args.replicas as u32,
        repeats: args.repeat,
        cpu_budget_enforced: c.cpu_budget_enforced(),
        workload: w.name.clone(),
        dataset_scale: w.dataset.scale,
        connections: if args.paced > 0 { args.paced } else { args.at },
        paced_load: if args.paced > 0 { args.paced_load } else { 0.0 },
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

/// The paced point: `--paced` connections per replica, open loop at the
/// rate that offers `--paced-load` of the quota. The cost per query at that
/// concurrency exceeds the closed-loop one the first rate is sized from,
/// so the rate is sized once more from the first measurement's cost and
/// the second measurement is the figure.
fn paced(c: &LocalCluster, q: &QueryTemplate, closed_ms: f64, args: &CalibrateArgs) -> Result<Point, Error> {
    let rate = |cpu_ms: f64| args.paced_load * args.cpus * 1000.0 / cpu_ms;
    let first = point(c, q, args.paced, Some(rate(closed_ms)), args.duration, args.cpus)?;
    repeated(args.repeat, || point(c, q, args.paced, Some(rate(first.cpu_ms)), args.duration, args.cpus))
}

/// One CSV line of a measured point.
fn print_point(q: &QueryTemplate, p: &Point) {
    println!(
        "{},{},{},{},{},{:.2},{:.2},{:.2},{:.2},{:.3},{:.2},{:.2}",
        q.name,
        q.class,
        p.connections,
        p.rate_qps.map_or(String::new(), |r| format!("{r:.1}")),
        p.queries,
        p.qps,
        p.cpu_ms,
        p.cpu_ms_min,
        p.cpu_ms_max,
        p.cpu_fraction,
        p.p50_ms,
        p.p99_ms
    );
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
    if w.session.between_ms > 0.0 {
        eprintln!(
            "plbbench: session.between_ms = {:.0} puts that partition at 70%",
            sized.between_for(0.70, partition)
        );
    }
}

/// The machine the calibration runs on.
/// The share of the host's CPU in use above which a calibration warns that
/// its costs will read high: a quarter, about what a terminal, an editor and
/// a browser leave on a 2-core machine; a build takes it all.
const BUSY_HOST: f32 = 0.25;

/// The share of the host's CPU in use over the next second, 0..1.
fn host_cpu_in_use() -> f32 {
    let mut sys = sysinfo::System::new();
    sys.refresh_cpu_usage();
    std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL.max(Duration::from_secs(1)));
    sys.refresh_cpu_usage();
    sys.global_cpu_usage() / 100.0
}

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

/// A point measured `n` times: the one with the median CPU per query, with
/// the range of all of them.
fn repeated(n: u32, mut measure: impl FnMut() -> Result<Point, Error>) -> Result<Point, Error> {
    let mut all = (0..n).map(|_| measure()).collect::<Result<Vec<_>, _>>()?;
    all.sort_by(|a, b| a.cpu_ms.total_cmp(&b.cpu_ms));
    let (min, max) = (all[0].cpu_ms, all[all.len() - 1].cpu_ms);
    let mut p = all.swap_remove(all.len() / 2);
    (p.cpu_ms_min, p.cpu_ms_max) = (min, max);
    Ok(p)
}

/// One template driven by `n` connections on each replica at once for
/// `seconds`, closed-loop or open-loop at `rate` queries/s per replica;
/// CPU is the replicas' together.
fn point(
    c: &LocalCluster,
    q: &QueryTemplate,
    n: u32,
    rate: Option<f64>,
    seconds: f64,
    cpus: f64,
) -> Result<Point, Error> {
    let k = c.replicas();
    let spec = BenchSpec {
        servers: (0..k).map(|i| c.config(i)).collect(),
        query: q.clone(),
        connections: n * k as u32,
        duration: Duration::from_secs_f64(seconds),
        prepared: true,
        rate: rate.map(|r| r * k as f64),
        seed: 1,
    };
    cpu_all(c)?; // no CPU accounting: fail before the measurement
    let (r, used) = bench::measure_probed(&spec, 2, &|| cpu_all(c).unwrap_or(f64::NAN))?;
    if !used.is_finite() {
        return Err(Error::Run(anyhow::anyhow!("the replicas' CPU could not be read during {}", q.name)));
    }
    if r.queries == 0 {
        return Err(Error::Run(anyhow::anyhow!("{}: no query completed at {n} connections", q.name)));
    }
    Ok(Point {
        connections: n,
        rate_qps: rate.map(round2),
        queries: r.queries,
        qps: round2(r.queries as f64 / seconds / k as f64),
        cpu_ms: round2(used * 1000.0 / r.queries as f64),
        cpu_ms_min: 0.0,
        cpu_ms_max: 0.0,
        cpu_fraction: (used / seconds / (cpus * k as f64) * 1000.0).round() / 1000.0,
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
    let postmaster0 = postmaster_cpu(c)?;
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
    let postmaster_s = postmaster_cpu(c)? - postmaster0;
    let per = |s: f64| round2(s * 1000.0 / f64::from(n));
    Ok(ConnectCost {
        connections: n,
        cpu_ms: per(setup_s + close_s),
        close_cpu_ms: per(close_s),
        postmaster_cpu_ms: per(postmaster_s),
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

/// r1's CPU seconds (connection set-up is timed on r1 alone).
fn cpu(c: &LocalCluster) -> Result<f64, Error> {
    c.cpu_seconds(0).ok_or_else(|| Error::Run(anyhow::anyhow!("no CPU accounting for r1 (cgroups)")))
}

/// r1's postmaster's own CPU seconds (`/proc/<pid>/schedstat`, in
/// nanoseconds): it forks every backend and reaps it, one at a time.
fn postmaster_cpu(c: &LocalCluster) -> Result<f64, Error> {
    let pid = c.pid(0).ok_or_else(|| Error::Run(anyhow::anyhow!("r1 has no postmaster")))?;
    let path = format!("/proc/{pid}/schedstat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let ns: f64 = text
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::Run(anyhow::anyhow!("{path}: no CPU time in {text:?}")))?;
    Ok(ns / 1e9)
}

/// Every replica's CPU seconds together.
fn cpu_all(c: &LocalCluster) -> Result<f64, Error> {
    (0..c.replicas())
        .map(|i| {
            c.cpu_seconds(i).ok_or_else(|| Error::Run(anyhow::anyhow!("no CPU accounting for r{} (cgroups)", i + 1)))
        })
        .sum()
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(cpu_ms: f64) -> Point {
        Point {
            connections: 4,
            rate_qps: None,
            queries: 1,
            qps: 1.0,
            cpu_ms,
            cpu_ms_min: 0.0,
            cpu_ms_max: 0.0,
            cpu_fraction: 1.0,
            p50_ms: 1.0,
            p99_ms: 1.0,
        }
    }

    #[test]
    fn a_repeated_point_is_the_median_with_the_range() {
        let mut costs = [2.0, 1.5, 3.0].into_iter();
        let p = repeated(3, || Ok(at(costs.next().unwrap()))).unwrap();
        assert_eq!((p.cpu_ms, p.cpu_ms_min, p.cpu_ms_max), (2.0, 1.5, 3.0));
        let p = repeated(1, || Ok(at(1.25))).unwrap();
        assert_eq!((p.cpu_ms, p.cpu_ms_min, p.cpu_ms_max), (1.25, 1.25, 1.25));
    }
}
