//! `plbbench run`: drives a validated plan through its cluster backend,
//! checks the accounting, judges the run's validity (design.md §4), and
//! writes the run folder. The backends differ only in how sessions execute;
//! routing, metrics and files are shared. The flags are in [`args`], their
//! validation into a [`plan::Plan`] in [`plan`], and the glue that hands a
//! plan to the simulator or a real cluster in [`launch`].

use super::Format;
use crate::core::metrics::{Collector, PhaseRow, RunMetrics};
use crate::core::model::{Class, EventKind};
use crate::core::outcome::{BackendOutcome, Verdict};
use crate::core::phases::{BASELINE, WARMUP};
use crate::core::router::Strategy;
use crate::core::settings::{Checks, Detection, Named};
use crate::core::validity::{self, Limits, PhaseBooks};
use crate::error::Error;
use crate::report::files::{write_run, RunFiles};
use crate::report::summary::{Accounting, Environment, Settings, Summary};
use anyhow::Context;
use args::RunArgs;
use plan::{ClusterSpec, Plan};
use serde::Serialize;
use std::time::Instant;

pub mod args;
mod dry_run;
pub mod generators;
pub mod launch;
mod memory;
mod modes;
pub mod plan;
mod proxies;
mod proxy_args;
mod stream;
pub mod via_proxy;
mod workloads;

/// `plbbench run`: validates the flags, runs, writes the folder, refreshes
/// the archive and prints the headline and each failed check. A run stopped
/// by a signal is an [`Error::Interrupted`] after its partial folder was
/// written; a complete run that failed a check is an [`Error::Checks`]
/// (exit status 1) unless `--checks warn`.
pub fn run(args: RunArgs) -> Result<(), Error> {
    let (format, dry) = (args.format, args.dry_run);
    let plan = Plan::new(args)?;
    if let Some(index) = plan.generator_child {
        return generators::child(&plan, index);
    }
    if dry {
        println!("{}", dry_run::render(&plan, format).trim_end());
        return Ok(());
    }
    let out = execute(&plan)?;
    eprintln!("wrote {}", plan.out.display());
    crate::commands::archive::refresh_after(&plan.out);
    match format {
        Format::Text => print_headline(&out.summary),
        Format::Json => println!("{}", json_result(&plan.out, &out.summary)),
    }
    for line in failed_check_lines(&out.summary, plan.checks, None) {
        eprintln!("{line}");
    }
    if let Some(v) = out.summary.verdicts.iter().find(|v| v.name == launch::SIM_PROGRESS && !v.ok) {
        return Err(Error::Run(anyhow::anyhow!(
            "{}; the books up to there were written to {}",
            v.detail,
            plan.out.display()
        )));
    }
    if let Some(signal) = out.summary.interrupted_by {
        return Err(Error::Interrupted {
            signal,
            detail: format!("partial run folder written to {}", plan.out.display()),
        });
    }
    let (failed, total) = (out.summary.failed_checks().len(), out.summary.verdicts.len());
    match (failed, plan.checks) {
        (0, _) | (_, Checks::Warn) => Ok(()),
        (_, Checks::Fail) => Err(Error::Checks(format!(
            "the run failed {failed} of {total} checks; its folder was written to {} (--checks warn exits 0)",
            plan.out.display()
        ))),
    }
}

/// `run --format json`'s object: where the folder is, the failed checks'
/// names and the whole summary.json (its `schema_version` included).
fn json_result(out: &std::path::Path, s: &Summary) -> serde_json::Value {
    serde_json::json!({
        "out": out,
        "report": out.join("report.html"),
        "failed_checks": s.failed_checks().iter().map(|v| v.name.clone()).collect::<Vec<_>>(),
        "summary": s,
    })
}

/// One stderr line per failed check of a run: `plbbench: check failed:
/// NAME: DETAIL`, `plbbench: warning: check failed: ...` under `--checks
/// warn`, with `WHO: ` after `plbbench: ` when `who` names the run (an
/// experiment's cell).
pub fn failed_check_lines(s: &Summary, checks: Checks, who: Option<&str>) -> Vec<String> {
    let who = who.map_or(String::new(), |w| format!("{w}: "));
    let level = match checks {
        Checks::Fail => "",
        Checks::Warn => "warning: ",
    };
    s.failed_checks().iter().map(|v| format!("plbbench: {who}{level}check failed: {}: {}", v.name, v.detail)).collect()
}

/// The terminal summary on stdout: what ran, one line per non-warmup phase
/// and class, the aborted sessions per class and the checks.
fn print_headline(s: &Summary) {
    print!("{}", headline(s));
}

/// [`print_headline`]'s text.
fn headline(s: &Summary) -> String {
    let st = &s.settings;
    let scale = if st.time_scale == 1.0 { String::new() } else { format!(", time scale {}", st.time_scale) };
    let proxy = if st.via_proxy.is_some() { " · via a plbbench proxy process" } else { "" };
    let mut out = format!(
        "{} · mix {} · T={} · faults {} · {} cluster{scale}{proxy}\n",
        st.strategy, st.mix, st.clients, st.faults, st.cluster
    );
    if let Some(offered) = st.offered {
        out.push_str(&dry_run::load_line(st.clients, offered));
        out.push('\n');
    }
    out.push_str("phase     class  goodput_qps  retention  p95_ms\n");
    for r in s.phases.iter().filter(|r| r.phase != WARMUP) {
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
        out.push_str(&format!(
            "{:<9} {:<6} {:>11.2}  {:>9}  {:>6}\n",
            r.phase,
            r.class.to_string(),
            r.goodput_qps,
            f(r.retention),
            f(r.p95_ms)
        ));
    }
    out.push_str(&format!("aborted sessions: {}\n", aborted_line(&s.accounting)));
    if let Some(t) = &s.tier {
        out.push_str(&format!("tier: {}\n", t.line()));
    }
    out.push_str(&logins_line(s));
    out.push_str(&checks_line(s));
    out.push('\n');
    out
}

/// The baseline's logins: `baseline logins: wait p95 P 1.7 s, F 18.5 s;
/// waiting at its end P 5, F 61` (nothing without a baseline).
fn logins_line(s: &Summary) -> String {
    let rows: Vec<_> = Class::ALL.iter().filter_map(|&c| s.phase(BASELINE, c)).collect();
    if rows.is_empty() {
        return String::new();
    }
    let p95 = |r: &&PhaseRow| r.login_p95_ms.map_or("-".into(), |ms| format!("{:.1} s", ms / 1000.0));
    let wait: Vec<String> = rows.iter().map(|r| format!("{} {}", r.class, p95(r))).collect();
    let waiting: Vec<String> = rows.iter().map(|r| format!("{} {}", r.class, r.logins_waiting)).collect();
    format!("baseline logins: wait p95 {}; waiting at its end {}\n", wait.join(", "), waiting.join(", "))
}

/// `P 12 (connect timeout 10, connection lost 2), F 0`.
fn aborted_line(accounting: &[Accounting]) -> String {
    let class = |a: &Accounting| {
        let total: u64 = a.aborts.iter().map(|r| r.1).sum();
        let reasons: Vec<String> = a.aborts.iter().map(|(why, n)| format!("{why} {n}")).collect();
        match total {
            0 => format!("{} 0", a.class),
            _ => format!("{} {total} ({})", a.class, reasons.join(", ")),
        }
    };
    accounting.iter().map(class).collect::<Vec<_>>().join(", ")
}

/// `checks: all N passed` or `checks: K of N FAILED (names)`.
fn checks_line(s: &Summary) -> String {
    let failed = s.failed_checks();
    let n = s.verdicts.len();
    if failed.is_empty() {
        return format!("checks: all {n} passed");
    }
    let names: Vec<&str> = failed.iter().map(|v| v.name.as_str()).collect();
    let warn = if s.settings.checks == Checks::Warn { ", downgraded to warnings" } else { "" };
    format!("checks: {} of {n} FAILED ({}){warn}", failed.len(), names.join(", "))
}

/// The result of one run.
pub struct RunOutput {
    /// The summary written to summary.json.
    pub summary: Summary,
}

/// Runs `plan` and writes its folder; returns what was written.
pub fn execute(plan: &Plan) -> Result<RunOutput, Error> {
    memory::check(plan, memory::available())?;
    let started = chrono::Utc::now();
    let clock = Instant::now();
    let mut collector = Collector::new(plan.phases.clone(), plan.replicas, plan.cpus, plan.raw);
    if let Some(path) = &plan.stream {
        collector.stream_to(stream::open(plan, path)?);
    }
    let (mut collector, outcome) = match plan.cluster {
        ClusterSpec::Sim => launch::run_sim(plan, collector),
        ClusterSpec::Local | ClusterSpec::Docker | ClusterSpec::External(_) => launch::run_real(plan, collector)?,
    };
    collector.end_stream();
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
    let metrics = collector.finish(&plan.up_during_fn(), outcome.in_flight);
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
        load: plan.load,
        offered: Some(crate::core::metrics::r4(dry_run::offered(plan).0)),
        calibration: plan.calibration.clone(),
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
        mixed: (plan.strategy == Strategy::Plb)
            .then(|| if plan.router.mixed_bounded { "bounded" } else { "unbounded" }.to_string()),
        freemium_borrow: (plan.strategy == Strategy::Plb).then_some(plan.router.freemium_borrow),
        max_connections: None,
        detection: detection(plan),
        admission: plan.admission.name().into(),
        recovery: plan.recovery.name().into(),
        checks: plan.checks,
        via_proxy: None,
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
    verdicts.extend(validity_verdicts(plan, m));
    let modes = modes::report(plan, m, outcome.modes);
    verdicts.extend(modes.as_ref().map(modes::verdict));
    verdicts.extend(outcome.verdicts.iter().cloned());
    Summary {
        schema_version: crate::report::version::SUMMARY,
        partial: outcome.partial,
        settings: Settings {
            max_connections: outcome.max_connections,
            via_proxy: outcome.via_proxy.clone(),
            ..settings(plan)
        },
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
        tier: outcome.tier.clone(),
        proxy_tier: outcome.proxy_tier.clone(),
        modes,
    }
}

/// The run validity checks (design.md §4, [`validity::judge`]) as
/// verdicts: baseline steady, time-outs, phase length.
fn validity_verdicts(plan: &Plan, m: &RunMetrics) -> Vec<Verdict> {
    let p95 = Class::ALL.map(|c| baseline_p95(m, c));
    let mut checks = validity::judge(&Limits::default(), [&p95[0], &p95[1]], &phase_books(m), typical_session_s(plan));
    let seconds = class_seconds(plan, m);
    checks.push(validity::progress(&seconds, |a, b| phases_between(m, a, b)));
    checks.push(validity::login_wait(&login_books(m)));
    checks.into_iter().map(|c| Verdict { name: c.kind.to_string(), ok: c.ok, detail: c.detail }).collect()
}

/// Each class's seconds for the progress check: completions, whether it
/// wanted service, and its window from its baseline p95 and think time.
fn class_seconds(plan: &Plan, m: &RunMetrics) -> Vec<validity::Seconds> {
    Class::ALL
        .into_iter()
        .map(|class| {
            let rows: Vec<_> = m.timeseries.iter().filter(|r| r.class == class).collect();
            let base = m.phases.iter().find(|r| r.phase == BASELINE && r.class == class).and_then(|r| r.p95_ms);
            validity::Seconds {
                class,
                completed: rows.iter().map(|r| r.completed).collect(),
                wanting: rows.iter().map(|r| r.active_sessions > 0 || r.wanting > 0).collect(),
                window_s: validity::window_s(base, plan.workload.session.think_ms),
            }
        })
        .collect()
}

/// The login books of every non-warmup phase and class.
fn login_books(m: &RunMetrics) -> Vec<validity::LoginBooks> {
    m.phases
        .iter()
        .filter(|r| r.phase != WARMUP)
        .map(|r| validity::LoginBooks {
            phase: r.phase.clone(),
            class: r.class,
            max_ms: r.login_max_ms,
            waiting: r.logins_waiting,
        })
        .collect()
}

/// The phases that seconds `a..=b` touch, in order ("down2, rejoin1").
fn phases_between(m: &RunMetrics, a: usize, b: usize) -> String {
    let (from, to) = (a as f64, (b + 1) as f64);
    let mut names: Vec<&str> =
        m.phases.iter().filter(|r| r.start_s < to && r.end_s > from).map(|r| r.phase.as_str()).collect();
    names.dedup();
    names.join(", ")
}

/// The books of every non-warmup phase and class: sessions ended there
/// (completed or aborted) and those aborted on a time-out.
fn phase_books(m: &RunMetrics) -> Vec<PhaseBooks> {
    m.phases
        .iter()
        .filter(|r| r.phase != WARMUP)
        .map(|r| PhaseBooks {
            phase: r.phase.clone(),
            class: r.class,
            len_s: r.end_s - r.start_s,
            sessions: r.sessions_ended + r.aborted_sessions,
            timeouts: m.timeouts(&r.phase, r.class),
        })
        .collect()
}

/// The per-second p95 of `class` over the seconds wholly inside the
/// baseline phase, seconds with no completed query left out.
fn baseline_p95(m: &RunMetrics, class: Class) -> Vec<f64> {
    let Some(base) = m.phases.iter().find(|r| r.phase == BASELINE) else { return Vec::new() };
    let inside = |t: u32| f64::from(t) >= base.start_s && f64::from(t) + 1.0 <= base.end_s;
    m.timeseries.iter().filter(|r| r.class == class && inside(r.t_s)).filter_map(|r| r.p95_ms).collect()
}

/// A typical session's length, seconds: the think times between its mean
/// number of queries (queries take more; this is the floor). A phase
/// shorter than this mixes sessions placed before and after its change.
fn typical_session_s(plan: &Plan) -> f64 {
    let s = &plan.workload.session;
    let n = f64::from(s.queries_min + s.queries_max) / 2.0;
    (n - 1.0) * s.think_ms / 1000.0
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
