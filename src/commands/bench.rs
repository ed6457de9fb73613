//! `plbbench bench`
//! ([performance](docs/performance.md#the-generator-against-pgbench)): the
//! raw speed of the load generator against given servers, without routing,
//! sessions or think times. Closed loop (N connections, each sending its
//! next query as soon as the last returned: maximum throughput, as
//! `pgbench`) or open loop (`--rate`: queries due at Poisson arrival times,
//! handed to whichever connection is free, latency from the intended start
//! so a stalled server or generator is not hidden). Latencies go into one
//! HdrHistogram per connection, merged at the end. Calibration uses
//! [`measure`] for a replica's throughput under its quota.

use crate::backend::closed_loop::{self, Statement, Tally};
use crate::backend::driver::own_cpu_seconds;
use crate::backend::wire::{Conn, WireError};
use crate::core::metrics::r4;
use crate::core::workload::QueryTemplate;
use crate::error::{input, Error};
use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::Serialize;
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::time::Duration;
use tokio::time::Instant;
use tokio_postgres::Config;

pub use super::Format;

/// `plbbench bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Server to connect to (libpq key=value or postgresql:// URI); repeat for several, connections are spread round robin.
    #[arg(long, required = true, value_name = "DSN")]
    pub dsn: Vec<String>,
    /// SQL to run; `$1`, when --key-range is set, is a random integer in 1..=N.
    #[arg(long, value_name = "SQL")]
    pub query: String,
    /// Range of the random parameter `$1` (0 = no parameter).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub key_range: u64,
    /// Concurrent connections.
    #[arg(long, short = 'c', default_value_t = 16, value_name = "N")]
    pub connections: u32,
    /// Measured time (after every connection is open): seconds as pgbench's -T, or 30s, 2m.
    #[arg(long, short = 'T', default_value = "10", value_name = "S", allow_hyphen_values = true, value_parser = super::seconds)]
    pub duration: f64,
    /// Prepare the query once per connection (extended protocol); otherwise the simple query protocol with the key inlined, as `pgbench -M simple`.
    #[arg(long)]
    pub prepared: bool,
    /// Open loop: queries arrive at this Poisson rate (queries per second) instead of back to back.
    #[arg(long, value_name = "QPS", allow_hyphen_values = true)]
    pub rate: Option<f64>,
    /// Worker threads of the generator [default: the machine's cores].
    #[arg(long, short = 'j', value_name = "N")]
    pub threads: Option<usize>,
    /// Seed of the keys and arrival times.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// A validated benchmark.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// One config per server.
    pub servers: Vec<Config>,
    /// The query (name, SQL and key range; cost and class are unused).
    pub query: QueryTemplate,
    /// Connections.
    pub connections: u32,
    /// Measured time.
    pub duration: Duration,
    /// Extended protocol with a prepared statement.
    pub prepared: bool,
    /// Open-loop Poisson rate, queries per second.
    pub rate: Option<f64>,
    /// Seed.
    pub seed: u64,
}

/// What a benchmark measured (`--format json` prints this).
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// `closed` or `open`.
    pub mode: &'static str,
    /// Connections.
    pub connections: u32,
    /// Queries that returned.
    pub queries: u64,
    /// Queries that failed.
    pub errors: u64,
    /// Rows the completed queries returned.
    pub rows: u64,
    /// Seconds from the start until the last connection stopped.
    pub elapsed_s: f64,
    /// Completed queries per second.
    pub qps: f64,
    /// The open-loop rate asked for.
    pub rate: Option<f64>,
    /// Latency percentiles, milliseconds (open loop: from the intended start).
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest.
    pub max_ms: f64,
    /// plbbench's own CPU use over the measurement, cores.
    pub generator_cpu_cores: Option<f64>,
}

impl BenchArgs {
    /// Checks the flags (one line naming the field, exit 2).
    pub fn spec(&self) -> Result<BenchSpec, Error> {
        let servers = self
            .dsn
            .iter()
            .map(|d| d.parse::<Config>().map_err(|e| input("--dsn", format!("cannot parse {d:?}: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        if self.query.trim().is_empty() {
            return Err(input("--query", "must not be empty"));
        }
        if self.connections == 0 {
            return Err(input("--connections", "must be at least 1"));
        }
        if !(self.duration.is_finite() && self.duration > 0.0 && self.duration <= 86_400.0) {
            return Err(input(
                "--duration",
                format!("must be a positive number of seconds up to a day, got {}", self.duration),
            ));
        }
        if let Some(r) = self.rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(input("--rate", format!("must be a positive number of queries per second, got {r}")));
            }
        }
        if self.threads == Some(0) {
            return Err(input("--threads", "must be at least 1"));
        }
        if self.key_range > 0 && !self.query.contains("$1") {
            return Err(input("--key-range", "the query has no $1 to bind"));
        }
        Ok(BenchSpec {
            servers,
            query: template(&self.query, self.key_range),
            connections: self.connections,
            duration: Duration::from_secs_f64(self.duration),
            prepared: self.prepared,
            rate: self.rate,
            seed: self.seed,
        })
    }
}

/// A bare query template for `sql` with `$1` in `1..=key_range`.
pub fn template(sql: &str, key_range: u64) -> QueryTemplate {
    QueryTemplate {
        name: "bench".into(),
        class: crate::core::model::Class::P,
        weight: 1.0,
        cpu_ms: 0.0,
        sql: sql.into(),
        key_range,
    }
}

/// `plbbench bench`: runs the benchmark and prints its result.
pub fn bench(args: BenchArgs) -> Result<(), Error> {
    let spec = args.spec()?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let r = measure(&spec, threads)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string_pretty(&r).context("json")?),
        Format::Text => {
            let rate = r.rate.map_or(String::new(), |q| format!(" at {q} qps offered"));
            println!(
                "{} loop, {} connections{rate}: {} queries, {} errors in {:.2} s",
                r.mode, r.connections, r.queries, r.errors, r.elapsed_s
            );
            println!("qps {:.1}", r.qps);
            println!(
                "latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
                r.p50_ms, r.p90_ms, r.p99_ms, r.p999_ms, r.max_ms
            );
            if let Some(c) = r.generator_cpu_cores {
                println!("plbbench CPU {c:.2} cores");
            }
        }
    }
    Ok(())
}

/// The open loop's shared arrival schedule: the next due time and the
/// generator of gaps; connections take due times in order.
struct Arrivals {
    next_s: f64,
    gaps: Exp<f64>,
    rng: ChaCha8Rng,
}

impl Arrivals {
    fn take(&mut self) -> f64 {
        let t = self.next_s;
        self.next_s += self.gaps.sample(&mut self.rng);
        t
    }
}

/// Runs the benchmark on `threads` OS threads, each a current-thread tokio
/// runtime owning every `threads`-th connection (as `pgbench -j`: no work
/// stealing and no cross-thread wake-ups between a connection and its
/// client). Every connection is opened (and prepared) before the clock
/// starts; fails when one cannot be.
pub fn measure(spec: &BenchSpec, threads: usize) -> Result<BenchResult, Error> {
    measure_probed(spec, threads, &|| 0.0).map(|(r, _)| r)
}

/// `measure`, also reading `probe` (a counter such as a server's CPU
/// seconds) when the clock starts and when the measured time ends, before
/// any connection closes; returns the difference with the result.
pub fn measure_probed(
    spec: &BenchSpec,
    threads: usize,
    probe: &(dyn Fn() -> f64 + Sync),
) -> Result<(BenchResult, f64), Error> {
    let threads = threads.clamp(1, spec.connections as usize);
    let arrivals = spec.rate.map(|r| {
        Arc::new(Mutex::new(Arrivals {
            next_s: 0.0,
            gaps: Exp::new(r).expect("positive rate"),
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
        }))
    });
    // Every thread and this one meet once all connections are open; this
    // one then sets the start, and they meet again.
    let (opened, go) = (Barrier::new(threads + 1), Barrier::new(threads + 1));
    let start: OnceLock<Instant> = OnceLock::new();
    let (tallies, cpu, elapsed_s, probed) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (opened, go, start, arrivals) = (&opened, &go, &start, arrivals.clone());
                scope.spawn(move || -> Result<Vec<Tally>, Error> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .context("starting a tokio runtime");
                    let mine: Vec<usize> = (t..spec.connections as usize).step_by(threads).collect();
                    let clients = match &rt {
                        Ok(rt) => rt.block_on(open(spec, &mine)),
                        Err(_) => Ok(Vec::new()),
                    };
                    opened.wait();
                    go.wait();
                    let (rt, clients) = (rt?, clients?);
                    let start = *start.get().expect("set before the second barrier");
                    let deadline = start + spec.duration;
                    let seeded = clients.into_iter().zip(&mine).map(|(conn, &i)| (conn, seed_of(spec, i)));
                    let Some(arrivals) = arrivals else {
                        // The closed loop leaves tokio: its sockets are taken out inside the runtime.
                        let _inside = rt.enter();
                        let st = Statement {
                            prepared: spec.prepared,
                            parts: spec.query.sql.split("$1").collect(),
                            key_range: spec.query.key_range,
                        };
                        return Ok(
                            closed_loop::run(seeded.collect(), &st, deadline.into_std()).context("the closed loop")?
                        );
                    };
                    rt.block_on(async {
                        let tasks: Vec<_> = seeded
                            .map(|(conn, seed)| {
                                let (q, arrivals) = (spec.query.clone(), arrivals.clone());
                                tokio::spawn(connection(conn, spec.prepared, q, arrivals, seed, start, deadline))
                            })
                            .collect();
                        let mut out = Vec::new();
                        for t in tasks {
                            out.push(t.await.context("a connection task panicked")?);
                        }
                        Ok(out)
                    })
                })
            })
            .collect();
        opened.wait();
        let cpu0 = own_cpu_seconds();
        let probed0 = probe();
        let _ = start.set(Instant::now());
        go.wait();
        std::thread::sleep(spec.duration);
        let probed = probe() - probed0;
        let tallies: Vec<_> =
            workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        let elapsed_s = start.get().expect("set").elapsed().as_secs_f64();
        let cpu = cpu0.zip(own_cpu_seconds()).map(|(a, b)| r4((b - a) / elapsed_s));
        (tallies, cpu, elapsed_s, probed)
    });
    let mut latency_us = Histogram::<u64>::new(3).expect("valid");
    let (mut ok, mut rows, mut errors) = (0, 0, 0);
    for tally in tallies.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().flatten() {
        latency_us.add(&tally.latency_us).expect("same precision");
        ok += tally.ok;
        rows += tally.rows;
        errors += tally.errors;
    }
    let q = |p: f64| r4(latency_us.value_at_quantile(p) as f64 / 1000.0);
    let result = BenchResult {
        mode: if spec.rate.is_some() { "open" } else { "closed" },
        connections: spec.connections,
        queries: ok,
        errors,
        rows,
        elapsed_s: r4(elapsed_s),
        qps: r4(ok as f64 / elapsed_s),
        rate: spec.rate,
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: r4(latency_us.max() as f64 / 1000.0),
        generator_cpu_cores: cpu,
    };
    Ok((result, probed))
}

/// Opens (and prepares on) the connections numbered `which`.
async fn open(spec: &BenchSpec, which: &[usize]) -> Result<Vec<Conn>, Error> {
    let mut conns = Vec::with_capacity(which.len());
    for &i in which {
        let cfg = &spec.servers[i % spec.servers.len()];
        let mut conn = Conn::connect(cfg, Duration::from_secs(10))
            .await
            .with_context(|| format!("opening connection {} of {}", i + 1, spec.connections))?;
        if spec.prepared {
            conn.prepare(&spec.query.sql).await.context("preparing the query")?;
        }
        conns.push(conn);
    }
    Ok(conns)
}

/// The seed of connection `i`'s key generator.
fn seed_of(spec: &BenchSpec, i: usize) -> u64 {
    spec.seed.wrapping_mul(1_000_003).wrapping_add(i as u64)
}

/// One connection's open loop until `deadline`: queries at the due times
/// it takes from `arrivals`, latency from the due time. Stops early if the
/// connection breaks; a statement's own error is counted and the loop goes
/// on. (The closed loop is [`closed_loop::run`].)
async fn connection(
    mut conn: Conn,
    prepared: bool,
    q: QueryTemplate,
    arrivals: Arc<Mutex<Arrivals>>,
    seed: u64,
    start: Instant,
    deadline: Instant,
) -> Tally {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tally = Tally::new();
    let parts: Vec<&str> = q.sql.split("$1").collect();
    loop {
        let due = start + Duration::from_secs_f64(arrivals.lock().expect("arrivals lock").take());
        tokio::time::sleep_until(due).await;
        if due >= deadline {
            return tally;
        }
        let key = (q.key_range > 0).then(|| rng.gen_range(1..=q.key_range as i64));
        let result = if prepared { conn.execute(key).await } else { conn.simple(&parts, key).await };
        match result {
            Ok(rows) => tally.completed(rows, due.elapsed().as_micros() as u64),
            Err(e) => {
                tally.errors += 1;
                if !WireError::recoverable(&e) {
                    return tally;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn spec(extra: &[&str]) -> Result<BenchSpec, String> {
        let mut argv = vec!["x", "--dsn", "host=127.0.0.1 port=5432 user=u", "--query", "SELECT $1"];
        argv.extend_from_slice(extra);
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        cli.a.spec().map_err(|e| e.to_string())
    }

    #[test]
    fn flags_are_validated_with_one_line_naming_the_field() {
        let s = spec(&["--key-range", "100000", "--prepared", "-c", "4", "-T", "2.5"]).unwrap();
        assert_eq!(
            (s.connections, s.duration, s.prepared, s.query.key_range),
            (4, Duration::from_millis(2500), true, 100000)
        );
        for (args, field) in [
            (&["--connections", "0"][..], "--connections"),
            (&["--duration", "0"], "--duration"),
            (&["--duration", "nan"], "--duration"),
            (&["--rate", "-1"], "--rate"),
            (&["--threads", "0"], "--threads"),
            (&["--dsn", "port=notaport"], "--dsn"),
        ] {
            let e = spec(args).unwrap_err();
            assert!(e.starts_with(field) && !e.contains('\n'), "{args:?}: {e}");
        }
        let e = Cli::try_parse_from(["x", "--dsn", "host=h", "--query", "SELECT 1", "--key-range", "5"])
            .unwrap()
            .a
            .spec()
            .unwrap_err();
        assert!(e.to_string().starts_with("--key-range"), "{e}");
    }

    #[test]
    fn open_loop_arrivals_are_poisson_at_the_rate() {
        let mut a = Arrivals { next_s: 0.0, gaps: Exp::new(200.0).unwrap(), rng: ChaCha8Rng::seed_from_u64(7) };
        let times: Vec<f64> = (0..20_000).map(|_| a.take()).collect();
        assert!(times.windows(2).all(|w| w[1] >= w[0]));
        let rate = times.len() as f64 / times.last().unwrap();
        assert!((rate - 200.0).abs() < 200.0 * 0.03, "rate {rate}");
    }
}
