//! `plbbench proxy` ([proxy](docs/proxy.md)): PLB in front of any
//! PostgreSQL client. The routing flags are `run`'s and become a plan the
//! same way (strategy, detection, recovery, admission, theta from --T and
//! --mix), so the proxy decides with the same run controller; the class
//! rule, the users file and the limits come from a config file, whose
//! defaults (no file) serve a try-out on loopback. It opens the cluster as `run`
//! does (started for it alone and removed at the end, the one `cluster up`
//! left, or an external one) and serves until SIGINT or SIGTERM.

use super::run::args::{default_run_args, CommonArgs, ExternalArgs};
use super::run::launch::open_cluster;
use super::run::plan::{read_text, Plan};
use super::signals::catch_signals;
use crate::core::router::Strategy;
use crate::core::settings::{Admission, ClusterKind};
use crate::core::watch::Recovery;
use crate::error::{input, Error};
use crate::proxy::config::{parse_users, ProxyConfig};
use crate::proxy::tier::election::{Member, MAX_APP_NAME};
use crate::proxy::tier::{self as tier_mod, TierInput};
use crate::proxy::tls::{self, Mode};
use crate::proxy::{serve, ProxyInput};
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `plbbench proxy`.
#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Proxy config file (TOML): the class rule, the users file, the limits and optionally the replicas (see
    /// docs/proxy.md) [default: none: application_name starting with `premium` is Premium, every other session
    /// Freemium, no password asked (trust, on a loopback --listen only)].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to accept PostgreSQL clients on [default: the config's `listen`, else 127.0.0.1:6432].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Routing strategy.
    #[arg(long, value_enum, default_value = "plb")]
    pub strategy: Strategy,
    /// The Premium:Freemium mix expected (with --T it sizes theta, as in `run`).
    #[arg(long, default_value = "25:75", value_name = "P:F", allow_hyphen_values = true)]
    pub mix: String,
    /// Admission layer in front of the strategy.
    #[arg(long, value_enum, default_value = "none")]
    pub admission: Admission,
    /// What plb does with a replica that comes back (as `run --recovery`).
    #[arg(long, value_enum, default_value = "none")]
    pub recovery: Recovery,
    /// Serve Prometheus metrics (the router's and the proxy's sessions) at this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Pump threads that copy routed sessions' bytes (each one epoll loop; logins, admission and TLS sessions
    /// stay on the main thread's event loop): 1 copies every session on one thread, as PgBouncer relays on
    /// one (the cheapest per transaction); N>1 hands each new session to the next pump in turn (for more
    /// clients than one core can copy for). 1 to 256.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: usize,
    /// Join the tier of proxies of this name on the same cluster (docs/proxy.md, "A tier of proxies") [default:
    /// the config's `[tier] name`, else a lone proxy].
    #[arg(long, value_name = "NAME")]
    pub tier: Option<String>,
    /// This member's id in the tier, 1 to 127, unique [default: the config's `[tier] peer_id`].
    #[arg(long, value_name = "N")]
    pub peer_id: Option<u8>,
    /// Where this member serves the tier's role feed when it leads [default: the config's `[tier] feed_listen`,
    /// else the --listen IP on a free port].
    #[arg(long, value_name = "ADDR")]
    pub tier_feed: Option<SocketAddr>,
    /// Write a JSON feed on stdout for the `run --via-proxy` that started this proxy.
    #[arg(long, hide = true)]
    pub feed: bool,
    /// Where an external cluster is (or `dsns` in the config file).
    #[command(flatten)]
    pub external: ExternalArgs,
    /// `run`'s settings: --T is the number of clients expected at once.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// The most pump threads `--threads` takes.
const MAX_THREADS: usize = 256;

/// PgBouncer's port.
const DEFAULT_LISTEN: &str = "127.0.0.1:6432";

/// Runs the proxy until a signal.
pub fn proxy(args: ProxyArgs) -> Result<(), Error> {
    if !(1..=MAX_THREADS).contains(&args.threads) {
        return Err(input("--threads", format!("must be 1 to {MAX_THREADS}, not {}", args.threads)));
    }
    let cfg = read_config(args.config.as_deref())?;
    let listen = args.listen.or(cfg.listen).unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address"));
    cfg.auth_on(listen).map_err(|e| input("--listen", e))?;
    let users = match &cfg.users_file {
        None => None,
        Some(p) => {
            let folder = args.config.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
            let path = folder.join(p);
            let text = read_text("users_file", &path)?;
            Some(parse_users(&text).map_err(|e| input("users_file", format!("{}: {e}", path.display())))?)
        }
    };
    let tls = match (&cfg.tls.cert_file, &cfg.tls.key_file, cfg.tls.mode) {
        (_, _, Mode::Disable) | (None, _, _) | (_, None, _) => None,
        (Some(cert), Some(key), mode) => {
            let folder = args.config.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
            Some(tls::load(mode, &folder.join(cert), &folder.join(key)).map_err(|e| input("--config", e))?)
        }
    };
    let plan = plan(&args, &cfg)?;
    let listener = std::net::TcpListener::bind(listen)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| input("--listen", format!("cannot listen on {listen}: {e}")))?;
    let listen = listener.local_addr().unwrap_or(listen);
    let metrics = match args.metrics_addr {
        Some(a) => Some(
            crate::backend::live_metrics::bind(a)
                .map_err(|e| input("--metrics-addr", format!("cannot listen on {a}: {e}")))?,
        ),
        None => None,
    };
    let member = member(&args, &cfg, &plan, listen)?;
    let interrupted = catch_signals();
    let (cluster, _) = open_cluster(&plan).map_err(|e| match &member {
        // A tier without its cluster is bad input: the tier is the
        // cluster's.
        Some(m) => {
            let why = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
            input("--tier", format!("tier {}: no reachable cluster: {why}", m.me.tier))
        }
        None => e,
    })?;
    if interrupted.load(Ordering::SeqCst) {
        drop(cluster);
        return Err(Error::Run(anyhow::anyhow!("interrupted while the cluster was starting; it was removed")));
    }
    let replicas: Vec<_> = (0..cluster.replicas()).map(|r| cluster.config(r)).collect();
    // This thread's event loop accepts clients, logs them in, admits them and
    // runs the probes, the ticks and the metrics endpoint; the pump threads
    // copy the routed sessions.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting tokio")?;
    let tier = match member {
        Some(m) => Some(runtime.block_on(join(m, &replicas))?),
        None => None,
    };
    let cluster = std::sync::Arc::new(std::sync::Mutex::new(cluster));
    let input = ProxyInput {
        listener,
        control: super::run::launch::control(&plan),
        replicas,
        rule: cfg.class.clone(),
        users,
        tls,
        login_timeout: Duration::from_secs_f64(cfg.login_timeout_s),
        late_class_timeout: Duration::from_millis(cfg.late_class_timeout_ms),
        server_connect_timeout: Duration::from_secs_f64(cfg.server_connect_timeout_s),
        drain: Duration::from_secs_f64(cfg.drain_s),
        probe_interval: plan.probe_interval,
        cluster: cluster.clone(),
        metrics,
        feed: args.feed,
        threads: args.threads,
        server_pool: cfg.server_pool,
        server_idle_timeout: Duration::from_secs_f64(cfg.server_idle_timeout_s),
        refuse_violators: cfg.refuse_protocol_violators,
        tier,
    };
    let auth = if input.users.is_some() { "scram-sha-256" } else { "trust" };
    let tls_mode = format!("{:?}", cfg.tls.mode).to_lowercase();
    let say = format!(
        "plbbench proxy: listening on {listen} ({} over {} replicas, class by {:?} prefix {:?}, auth {auth}, tls {tls_mode}, \
         {} pump thread{})",
        plan.variant(),
        plan.replicas,
        cfg.class.param,
        cfg.class.premium_prefix,
        args.threads,
        if args.threads == 1 { "" } else { "s" }
    );
    if args.feed {
        eprintln!("{say}");
    } else {
        println!("{say}");
    }
    let out = runtime.block_on(serve(input)).context("serving clients")?;
    drop(runtime);
    drop(cluster);
    eprintln!(
        "plbbench proxy: stopped: {} sessions served ({} on a kept server connection, {} logins to replicas), \
         {} closed at the drain deadline",
        out.sessions, out.reused, out.logins, out.cut
    );
    match out.refused {
        Some(why) => Err(crate::error::input("--tier", why)),
        None => Ok(()),
    }
}

/// A tier member before it joins: its input less the control connection.
struct Candidate {
    me: Member,
    feed: std::net::TcpListener,
    retry: Duration,
    lease: Duration,
    flags: String,
}

/// The routing flags every member of a tier must share, written one way:
/// the plan's router and watch, its probe interval and the class rule.
fn flags_key(plan: &Plan, cfg: &ProxyConfig) -> String {
    format!("{:?}", (&plan.router, &plan.watch, plan.probe_interval, &cfg.class))
}

/// This proxy's tier membership, checked and its feed port bound; `None`
/// for a lone proxy.
fn member(args: &ProxyArgs, cfg: &ProxyConfig, plan: &Plan, listen: SocketAddr) -> Result<Option<Candidate>, Error> {
    let t = &cfg.tier;
    let Some(name) = args.tier.clone().or_else(|| t.name.clone()) else {
        if args.peer_id.is_some() || args.tier_feed.is_some() {
            return Err(input("--tier", "--peer-id and --tier-feed need a tier name (--tier or [tier] name)"));
        }
        return Ok(None);
    };
    tier_mod::election::check_name(&name).map_err(|e| input("--tier", e))?;
    let max = tier_mod::cancel_key::MAX_PEER;
    let peer = args
        .peer_id
        .or(t.peer_id)
        .ok_or_else(|| input("--peer-id", format!("a tier member needs a peer id, 1 to {max}")))?;
    if !(1..=max).contains(&peer) {
        return Err(input("--peer-id", format!("must be 1 to {max}, not {peer}")));
    }
    if args.admission != Admission::None {
        return Err(input("--admission", "a tier routes without the admission gate: use --admission none"));
    }
    let at = args.tier_feed.or(t.feed_listen).unwrap_or(SocketAddr::new(listen.ip(), 0));
    let feed = std::net::TcpListener::bind(at)
        .and_then(|l| l.set_nonblocking(true).map(|_| l))
        .map_err(|e| input("--tier-feed", format!("cannot listen on {at}: {e}")))?;
    let me = Member { tier: name, peer, client: listen, feed: feed.local_addr().unwrap_or(at) };
    if me.app_name().len() > MAX_APP_NAME {
        return Err(input(
            "--tier",
            format!(
                "{:?} is longer than PostgreSQL's {MAX_APP_NAME}-byte application_name: shorten the name",
                me.app_name()
            ),
        ));
    }
    Ok(Some(Candidate {
        me,
        feed,
        retry: Duration::from_millis(t.retry_ms),
        lease: Duration::from_millis(t.lease_ms),
        flags: flags_key(plan, cfg),
    }))
}

/// Opens the member's control connection: refused (exit 2) when no replica
/// answers or another member has its peer id.
async fn join(c: Candidate, replicas: &[tokio_postgres::Config]) -> Result<TierInput, Error> {
    let joined = tier_mod::join(replicas, &c.me).await.map_err(|e| match e {
        tier_mod::JoinError::Unreachable(why) => {
            input("--tier", format!("tier {}: no replica of the cluster takes a control connection: {why}", c.me.tier))
        }
        tier_mod::JoinError::Taken(m) => input(
            "--peer-id",
            format!("peer {} is already in tier {} (the member listening on {})", m.peer, m.tier, m.client),
        ),
    })?;
    Ok(TierInput { me: c.me, feed: c.feed, retry: c.retry, lease: c.lease, flags: c.flags, joined })
}

/// The config file, or the defaults when there is none.
fn read_config(path: Option<&Path>) -> Result<ProxyConfig, Error> {
    let text = match path {
        Some(p) => read_text("--config", p)?,
        None => String::new(),
    };
    let name = path.map_or("(no file)".to_string(), |p| p.display().to_string());
    ProxyConfig::parse(&text).map_err(|e| input("--config", format!("{name}: {e}")))
}

/// `run`'s plan for the proxy's flags: no faults, the config's replicas
/// when it names them.
fn plan(args: &ProxyArgs, cfg: &ProxyConfig) -> Result<Plan, Error> {
    let mut run = default_run_args();
    run.strategy = args.strategy;
    run.mix = args.mix.clone();
    run.admission = args.admission;
    run.recovery = args.recovery;
    run.faults = Some("none".into());
    run.out = Some(PathBuf::from("."));
    run.force = true;
    run.external = args.external.clone();
    run.common = args.common.clone();
    if run.external.dsns.is_empty() && run.external.cluster_file.is_none() && !cfg.dsns.is_empty() {
        run.external.dsns = cfg.dsns.clone();
        run.common.cluster = ClusterKind::External;
    }
    if run.common.cluster == ClusterKind::Sim {
        return Err(input("--cluster", "the proxy needs real servers: local, docker or external"));
    }
    Plan::new(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::settings::Detection;
    use clap::Parser;

    /// `run --via-proxy`'s child, given the flags the run passes it
    /// (`run::via_proxy::flags`), builds the run's routing plan.
    #[test]
    fn the_child_builds_the_runs_plan() {
        let mut run = default_run_args();
        run.via_proxy = true;
        run.strategy = crate::core::router::Strategy::Plb;
        run.mix = "40:60".into();
        run.recovery = crate::core::watch::Recovery::Probation;
        run.duration = Some(Duration::from_secs(60));
        run.common.clients = 120;
        run.common.theta = Some(9);
        run.common.detection = Detection::Suspicion;
        run.common.probe_interval_ms = 250;
        run.common.mixed_unbounded = true;
        run.common.cpus = 0.5;
        run.force = true;
        run.out = Some(std::env::temp_dir().join("plbbench-via-proxy-test"));
        let ours = Plan::new(run.clone()).unwrap();
        let f = ours.via_proxy.clone().expect("flags");
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            p: ProxyArgs,
        }
        let mut argv = vec!["plbbench".to_string(), "--config".into(), "x.toml".into(), "--feed".into()];
        argv.extend(f);
        let args = Wrap::try_parse_from(argv).unwrap().p;
        let cfg = crate::proxy::config::ProxyConfig::parse(
            "dsns = ['host=127.0.0.1']\n[class]\nparam = \"application_name\"\npremium_prefix = \"premium\"\n",
        )
        .unwrap();
        let theirs = plan(&args, &cfg).unwrap();
        let key =
            |p: &Plan| format!("{:?}", (&p.router, &p.watch, &p.workload, p.probe_interval, p.time_scale, p.cpus));
        assert_eq!(key(&theirs), key(&ours));
    }
}
