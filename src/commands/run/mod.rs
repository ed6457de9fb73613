//! `plbbench run`: drives a validated plan through its cluster backend,
//! checks the accounting, and writes the run folder. The backends differ only
//! in how sessions execute; routing, metrics and files are shared. The
//! flags are in [`args`], their validation into a [`plan::Plan`] in
//! [`plan`], and the glue that hands a plan to the simulator or a real
//! cluster in [`backend`].

use crate::core::metrics::{Collector, RunMetrics};
use crate::core::model::{Class, EventKind};
use crate::core::outcome::{BackendOutcome, Verdict};
use crate::core::settings::{Admission, Detection, Named};
use crate::error::Error;
use crate::report::files::{write_run, RunFiles};
use crate::report::summary::{Accounting, Environment, Settings, Summary};
use anyhow::Context;
use args::RunArgs;
use plan::{ClusterSpec, Plan};
use serde::Serialize;
use std::time::Instant;

pub mod args;
pub mod launch;
pub mod plan;

/// `plbbench run`: validates the flags, runs, writes the folder, refreshes
/// the archive and prints the headline; a run stopped by a signal is an
/// [`Error::Interrupted`] after its partial folder was written.
pub fn run(args: RunArgs) -> Result<(), Error> {
    let plan = Plan::new(args)?;
    let out = execute(&plan)?;
    eprintln!("wrote {}", plan.out.display());
    crate::commands::archive::refresh_after(&plan.out);
    print_headline(&out.summary);
    match out.summary.interrupted_by {
        Some(signal) => {
            Err(Error::Interrupted { signal, detail: format!("partial run folder written to {}", plan.out.display()) })
        }
        None => Ok(()),
    }
}

/// One line per non-warmup phase and class on stdout.
fn print_headline(s: &Summary) {
    println!("phase     class  goodput_qps  retention  p95_ms");
    for r in s.phases.iter().filter(|r| r.phase != crate::core::phases::WARMUP) {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{:<9} {:<6} {:>11.2}  {:>9}  {:>6}",
            r.phase,
            r.class.to_string(),
            r.goodput_qps,
            f(r.retention),
            f(r.p95_ms)
        );
    }
}

/// The result of one run.
pub struct RunOutput {
    /// The summary written to summary.json.
    pub summary: Summary,
}

/// Runs `plan` and writes its folder; returns what was written.
pub fn execute(plan: &Plan) -> Result<RunOutput, Error> {
    let started = chrono::Utc::now();
    let clock = Instant::now();
    let collector = Collector::new(plan.phases.clone(), plan.replicas, plan.cpus, plan.raw);
    let (collector, outcome) = match plan.cluster {
        ClusterSpec::Sim => launch::run_sim(plan, collector),
        ClusterSpec::Local | ClusterSpec::Docker | ClusterSpec::External(_) => launch::run_real(plan, collector)?,
    };
    conclude(plan, collector, outcome, started, clock)
}

/// Closes the books on a run: cuts the metrics, checks the accounting (a
/// violation is an error, exit status 1, and nothing is written), then
/// writes the run folder atomically.
pub fn conclude(
    plan: &Plan,
    collector: Collector,
    outcome: BackendOutcome,
    started: chrono::DateTime<chrono::Utc>,
    clock: Instant,
) -> Result<RunOutput, Error> {
    let metrics = collector.finish(&|p, r| plan.up_during(p, r), outcome.in_flight);
    metrics.check_accounting().map_err(|e| Error::Run(e.into()))?;
    let summary = summarise(plan, &metrics, outcome, started, clock.elapsed().as_secs_f64());
    let html = crate::report::html::render(&summary, &metrics).context("rendering report.html")?;
    let config = resolved_config(plan).context("writing config.toml")?;
    write_run(&plan.out, plan.force, &RunFiles { summary: &summary, metrics: &metrics, html, config })?;
    Ok(RunOutput { summary })
}

/// The settings block of summary.json.
pub fn settings(plan: &Plan) -> Settings {
    let r = plan.router.reference;
    Settings {
        // With the health machine, a recovery policy or admission the cell
        // is a different system: `plb+suspicion+probation+modes`.
        strategy: plan.variant(),
        mix: format!("{}:{}", plan.premium_pct, 100 - plan.premium_pct),
        clients: plan.clients,
        replicas: plan.replicas,
        reference: format!("{},{},{}", r[0], r[1], r[2]),
        split: format!("{}:{}", plan.router.split.0, plan.router.split.1),
        faults: plan.faults_name.clone(),
        workload: plan.workload.name.clone(),
        cluster: plan.cluster.kind().name().into(),
        seed: plan.seed,
        time_scale: plan.time_scale,
        duration_s: plan.duration_s,
        theta: plan.router.theta,
        alpha: plan.router.alpha,
        detection: detection(plan),
        admission: plan.admission.name().into(),
        recovery: plan.recovery.name().into(),
    }
}

/// summary.json's `detection`: the detector and its probe interval.
fn detection(plan: &Plan) -> String {
    let every = plan.probe_interval.map_or(0, |d| d.as_millis());
    match plan.detection {
        Detection::Probe => format!("probe every {every} ms"),
        Detection::Oracle => "oracle".into(),
        Detection::Suspicion => format!("suspicion state machine, probe every {every} ms"),
    }
}

fn environment(plan: &Plan, outcome: &BackendOutcome, started: chrono::DateTime<chrono::Utc>) -> Environment {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let commit = env!("PLBBENCH_GIT_COMMIT");
    Environment {
        plbbench_version: env!("CARGO_PKG_VERSION").into(),
        git_commit: (!commit.is_empty()).then(|| commit.to_string()),
        postgres_version: outcome.postgres_version.clone(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib: (sys.total_memory() as f64 / (1u64 << 30) as f64 * 10.0).round() / 10.0,
        cpu_budget_cores: plan.cpus,
        cpu_budget_enforced: outcome.cpu_budget_enforced,
        started_utc: started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }
}

fn summarise(
    plan: &Plan,
    m: &RunMetrics,
    outcome: BackendOutcome,
    started: chrono::DateTime<chrono::Utc>,
    wall_s: f64,
) -> Summary {
    let accounting = Class::ALL
        .into_iter()
        .map(|class| Accounting {
            class,
            sessions_started: m.sessions_started[class.idx()],
            sessions_in_flight: m.sessions_in_flight[class.idx()],
            aborts: m.abort_reasons.iter().filter(|a| a.0 == class).map(|a| (a.1.clone(), a.2)).collect(),
            errors: m.error_kinds.iter().filter(|a| a.0 == class).map(|a| (a.1.clone(), a.2)).collect(),
            rejections: m.rejection_reasons.iter().filter(|a| a.0 == class).map(|a| (a.1.clone(), a.2)).collect(),
        })
        .collect();
    let mut verdicts = vec![Verdict {
        name: "accounting".into(),
        ok: true,
        detail: "every session completed, aborted or in flight; query totals agree across files".into(),
    }];
    verdicts.extend(phase_length_verdict(plan));
    verdicts.extend(degradation_verdict(plan, m));
    verdicts.extend(outcome.verdicts.iter().cloned());
    Summary {
        partial: outcome.partial,
        settings: settings(plan),
        environment: environment(plan, &outcome, started),
        faults: plan.faults.clone(),
        phases: m.phases.clone(),
        replica_cpu: m.replica_cpu.clone(),
        fault_events: m
            .events
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Fault | EventKind::Detect))
            .cloned()
            .collect(),
        accounting,
        verdicts,
        wall_s: (wall_s * 1000.0).round() / 1000.0,
        interrupted_by: outcome.interrupted_by,
        stop_overrun_s: outcome.stop_overrun_s.map(|s| (s * 1000.0).round() / 1000.0),
        recovery: crate::core::recovery::of_run(&plan.faults, m, plan.router.replicas),
        detector: Some(crate::core::recovery::suspicions_of_run(&plan.faults, m, plan.router.replicas)),
        generator: outcome.generator.clone(),
    }
}

/// `--admission modes`: time in each mode, transitions and rejections per
/// class, from the run's `mode` events and phase rows (informational).
fn degradation_verdict(plan: &Plan, m: &RunMetrics) -> Option<Verdict> {
    if plan.admission == Admission::None {
        return None;
    }
    let spans = crate::report::charts::mode_spans(&m.events, plan.duration_s);
    let mut time = std::collections::BTreeMap::<&str, f64>::new();
    for (t0, t1, name, _) in &spans {
        *time.entry(name.as_str()).or_default() += t1 - t0;
    }
    let degraded: f64 = time.values().sum();
    let mut parts = vec![format!("normal {:.1} s", plan.duration_s - degraded)];
    parts.extend(time.iter().map(|(n, t)| format!("{n} {t:.1} s")));
    let transitions = m.events.iter().filter(|e| e.kind == EventKind::Mode).count();
    let rejected = |c: Class| m.phases.iter().filter(|r| r.class == c).map(|r| r.rejected).sum::<u64>();
    Some(Verdict {
        name: "degradation".into(),
        ok: true,
        detail: format!(
            "time in mode: {}; {transitions} transitions; rejected sessions: Premium {}, Freemium {}",
            parts.join(", "),
            rejected(Class::P),
            rejected(Class::F)
        ),
    })
}

/// Warns when a phase is shorter than a typical session (time-scaled runs).
fn phase_length_verdict(plan: &Plan) -> Option<Verdict> {
    let s = &plan.workload.session;
    let n = f64::from(s.queries_min + s.queries_max) / 2.0;
    let session_s = (n - 1.0) * s.think_ms / 1000.0;
    let short: Vec<_> = plan
        .phases
        .iter()
        .filter(|p| p.name != crate::core::phases::WARMUP && p.len_s() < session_s)
        .map(|p| format!("{} ({:.1} s)", p.name, p.len_s()))
        .collect();
    (!short.is_empty()).then(|| Verdict {
        name: "phase length".into(),
        ok: false,
        detail: format!(
            "phases shorter than a typical session ({session_s:.1} s): {}; their figures mix pre- and post-change sessions and are noisier",
            short.join(", ")
        ),
    })
}

#[derive(Serialize)]
struct Resolved<'a> {
    settings: Settings,
    faults: &'a [crate::core::model::FaultEvent],
    workload: &'a crate::core::workload::Workload,
}

/// config.toml: the fully resolved settings, workload and scaled schedule.
fn resolved_config(plan: &Plan) -> anyhow::Result<String> {
    let body =
        toml::to_string_pretty(&Resolved { settings: settings(plan), faults: &plan.faults, workload: &plan.workload })?;
    Ok(format!("# Fully resolved settings of this run (plbbench {}).\n{body}", env!("CARGO_PKG_VERSION")))
}
