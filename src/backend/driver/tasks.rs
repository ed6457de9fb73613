//! The driver's tasks beside the clients: the fault injector, the periodic
//! and confirming probes, the once-per-second sampler (replicas, CPU, the
//! generator's own load), the admission ticker, and the follower of a
//! proxy child's events.

use super::*;

/// `--via-proxy`: the proxy's events into the run's events (on the run's
/// clock) and its router's view for the once-per-second samples.
pub(super) async fn follow(ctx: Arc<Ctx>, mut feed: mpsc::UnboundedReceiver<Feed>, offset_s: f64) {
    let mut standing = std::collections::HashMap::new();
    while let Some(msg) = feed.recv().await {
        match msg {
            Feed::Tier(l) => {
                let now = (l.leading, l.leader, l.generation);
                if standing.insert(l.peer, now) != Some(now) {
                    let t_s = (l.t_s + offset_s).max(0.0);
                    let detail = tier_detail(&l);
                    ctx.send(Msg::Control(ControlEvent::Log { t_s, kind: EventKind::Tier, replica: None, detail }));
                }
            }
            Feed::Event { t_s, kind, replica, detail } => {
                let t_s = (t_s + offset_s).max(0.0);
                ctx.send(Msg::Control(ControlEvent::Log { t_s, kind, replica, detail }));
            }
            Feed::State { roles, active, .. } => {
                if let Some(p) = &ctx.proxy {
                    *p.view.lock().expect("proxy view lock") = Some((roles, active));
                }
            }
            Feed::Listening { .. } => {}
        }
    }
}

/// A tier member's standing, as events.csv says it.
fn tier_detail(l: &crate::backend::proxy_feed::TierLine) -> String {
    match (l.leading, l.leader) {
        (true, _) => format!("proxy peer {} leads (generation {})", l.peer, l.generation),
        (false, Some(by)) => format!("proxy peer {} follows peer {by} (generation {})", l.peer, l.generation),
        (false, None) => format!(
            "proxy peer {} has no leader; it routes within the roles of generation {} ({} stale decisions so far)",
            l.peer, l.generation, l.stale
        ),
    }
}

/// How often waiting sessions are admitted or expired.
pub(super) const ADMIT_TICK: Duration = Duration::from_millis(20);

/// `--admission modes`: every [`ADMIT_TICK`], starts the waiting sessions
/// the gate now admits and rejects those past their deadline.
pub(super) async fn admit_waiting(ctx: Arc<Ctx>) {
    let mut next = Instant::now();
    loop {
        next += ADMIT_TICK;
        if !wait_until(&ctx, next).await {
            return;
        }
        ctx.control(|ctl, now| ctl.admit_and_expire(now));
    }
}

/// `--metrics-addr`: copies the router and gate into the live metrics.
pub(super) fn refresh_live(ctx: &Ctx) {
    if let Some(live) = &ctx.live {
        let ctl = ctx.control.lock().expect("control lock");
        live.lock().expect("metrics lock").refresh(ctl.c.router(), ctl.c.gate());
    }
}

/// Applies the fault schedule at its times (blocking cluster calls run on
/// the blocking pool); a Slow's fraction is of the budget `cpus`. The real
/// up state follows the replica's open faults (a slow replica is up); with
/// the oracle the router is told when it changes.
pub(super) async fn inject(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, faults: Vec<FaultEvent>, cpus: f64) {
    let mut open = vec![Open::default(); ctx.configs.len()];
    for f in faults {
        if !wait_until(&ctx, ctx.at(f.t_s)).await {
            return;
        }
        let c = cluster.clone();
        let fault = Fault::of(f.action, cpus);
        let result = tokio::task::spawn_blocking(move || {
            let mut c = c.lock().expect("cluster lock");
            c.apply(f.replica.idx(), fault)
        })
        .await;
        let what = match fault {
            Fault::Slow(c) => format!("{} ({c:.3} cores)", f.action),
            _ => f.action.to_string(),
        };
        let detail = match result {
            Ok(Ok(note)) if note.is_empty() => what,
            Ok(Ok(note)) => format!("{what} ({note})"),
            Ok(Err(e)) => format!("{what} failed: {e}"),
            Err(e) => format!("{what} failed: {e}"),
        };
        let was_up = open[f.replica.idx()].survivor();
        let _ = open[f.replica.idx()].apply(f.action);
        let up = open[f.replica.idx()].survivor();
        ctx.actual_up[f.replica.idx()].store(up, Ordering::SeqCst);
        ctx.control(|ctl, now| {
            ctl.c.fault(f.replica, detail, f.t_s);
            if up != was_up {
                ctl.c.told(f.replica, up, now);
            }
        });
    }
}

/// Runs each confirming probe the controller asks for on a task of its own
/// (`backend::probe::confirm`, a new connection within
/// `core::control::CONFIRM_TIMEOUT_S`) and tells the controller what it saw.
pub(super) async fn confirmer(ctx: Arc<Ctx>, mut asked: mpsc::UnboundedReceiver<Confirm>) {
    while let Some(Confirm(r)) = asked.recv().await {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let began = ctx.now();
            let seen = crate::backend::probe::confirm(&ctx.configs[r.idx()]).await;
            ctx.control(|ctl, now| ctl.c.confirmed(r, seen, began, now));
        });
    }
}

/// Health probes, one task per replica, each over a persistent connection
/// (as a pooler checks its server connections), so a busy replica is asked
/// for `SELECT 1` rather than for a new backend. Each answer, refusal or
/// timeout is evidence for the router's watch (`core::watch`): the probe
/// detector removes a replica on a refusal at once, on timeouts only after
/// [`crate::core::detect::TIMEOUTS_TO_DOWN`] in a row; the suspicion
/// machine applies its own rules.
pub(super) async fn probe(ctx: Arc<Ctx>, interval: Duration) {
    let tasks = (0..ctx.configs.len()).map(|r| probe_replica(ctx.clone(), ReplicaId(r), interval));
    futures_util::future::join_all(tasks).await;
}

pub(super) async fn probe_replica(ctx: Arc<Ctx>, r: ReplicaId, interval: Duration) {
    let mut next = ctx.start + interval / 2;
    let mut client: Option<tokio_postgres::Client> = None;
    loop {
        if !wait_until(&ctx, next).await {
            return;
        }
        let began = ctx.now();
        let seen = crate::backend::probe::periodic(&ctx.configs[r.idx()], &mut client, interval).await;
        ctx.control(|ctl, now| {
            ctl.c.probed(r, seen, began, now);
            ctl.c.tick(now);
        });
        next = (next + interval).max(Instant::now());
    }
}

/// The view of every replica now: CPU (skipped while a fault action holds
/// the cluster), router role and sessions, real up state.
pub(super) fn snapshot(ctx: &Ctx, cluster: &Mutex<Cluster>) -> Vec<ReplicaSample> {
    let k = ctx.configs.len();
    let cpu = cluster.try_lock().map_or_else(|_| vec![None; k], |c| c.cpu_readings());
    let proxy = ctx.proxy.as_ref().and_then(|p| p.view.lock().expect("proxy view lock").clone());
    ctx.control(|ctl, _| {
        (0..k)
            .map(|r| {
                let (role, active) = match &proxy {
                    Some((roles, active)) => (roles[r], active[r]),
                    None => (ctl.c.role(ReplicaId(r)), ctl.c.active(ReplicaId(r))),
                };
                ReplicaSample { up: ctx.actual_up[r].load(Ordering::SeqCst), role, active, cpu_s: cpu[r] }
            })
            .collect()
    })
}

/// plbbench's own CPU and the sessions open now, for the saturation guard.
pub(super) fn generator_sample(ctx: &Ctx, replicas: &[ReplicaSample]) {
    if let Some(cpu) = own_cpu_seconds() {
        let open = replicas.iter().map(|r| u64::from(r.active[0] + r.active[1])).sum();
        ctx.send(Msg::Generator(ctx.now(), cpu, open));
    }
}

/// Once per second, and once more at the end so the last phase has its CPU.
/// Each reading is the gate's load too (`Controller::sample`).
pub(super) async fn sample(ctx: Arc<Ctx>, cluster: Arc<Mutex<Cluster>>, bar: indicatif::ProgressBar) {
    let mut t = 0.0;
    loop {
        ctx.control(|ctl, now| ctl.c.tick(now));
        let (now, snap) = (ctx.now(), snapshot(&ctx, &cluster));
        generator_sample(&ctx, &snap);
        let cpu: Vec<Option<f64>> = snap.iter().map(|s| s.cpu_s).collect();
        // Only the gate reads memory: without one the walk of /proc is not made.
        let memory = if ctx.gated { cluster.try_lock().ok().and_then(|c| c.memory_pct()) } else { None };
        let changed = ctx.control(|ctl, _| ctl.c.sample(now, &cpu, memory));
        if changed.is_some() {
            // A new mode: every held statement asks again.
            ctx.held.iter().for_each(tokio::sync::Notify::notify_waiters);
        }
        ctx.send(Msg::Sample(now, snap));
        refresh_live(&ctx);
        bar.set_position(t as u64);
        t += 1.0;
        if !wait_until(&ctx, ctx.at(t)).await {
            let view = snapshot(&ctx, &cluster);
            generator_sample(&ctx, &view);
            ctx.send(Msg::Sample(ctx.now(), view));
            return;
        }
    }
}
