//! Tests of the run report: the view model's formatting, the page's
//! sections and its self-containment, on real and synthetic runs.

use super::*;
use crate::core::metrics::{ReplicaRow, SeriesRow};
use crate::core::model::{Action, FaultEvent, Role};
use crate::report::summary::{Environment, Settings};

/// (name, start, end, survivors) of the synthetic run.
const PHASES: [(&str, f64, f64, usize); 4] =
    [("warmup", 0.0, 60.0, 5), ("baseline", 60.0, 90.0, 5), ("down1", 90.0, 150.0, 4), ("rejoin1", 150.0, 200.0, 5)];

fn phase_row(name: &str, start_s: f64, end_s: f64, survivors: usize, class: Class) -> PhaseRow {
    let hurt = if survivors < 5 { 0.8 } else { 1.0 };
    let base = if class == Class::P { 20.0 } else { 60.0 };
    PhaseRow {
        phase: name.into(),
        start_s,
        end_s,
        survivors,
        class,
        completed: (base * hurt * (end_s - start_s)) as u64,
        goodput_qps: base * hurt,
        retention: (name != WARMUP).then_some(hurt),
        p50_ms: Some(30.0 / hurt),
        p95_ms: Some(80.0 / hurt),
        p99_ms: Some(120.0 / hurt),
        inflation_p95: (name != WARMUP).then_some(1.0 / hurt),
        sessions_ended: 40,
        lifetime_mean_s: Some(12.5),
        lifetime_p95_s: Some(20.0),
        errors: if survivors < 5 { 3 } else { 0 },
        aborted_sessions: if survivors < 5 { 2 } else { 0 },
        cpu_mean: Some(0.7),
        cpu_cv: Some(0.1),
        rejected: 0,
        queued_ms_p95: None,
        login_p50_ms: Some(4.0 / hurt),
        login_p95_ms: Some(9.0 / hurt),
        login_p99_ms: Some(15.0 / hurt),
        login_max_ms: Some(40.0 / hurt),
        logins_waiting: if survivors < 5 { 3 } else { 1 },
        rejected_full: 0,
    }
}

fn replica_rows() -> Vec<ReplicaRow> {
    let mut rows = Vec::new();
    for t in 0..200u32 {
        for r in 0..5usize {
            let down = r == 0 && (90..150).contains(&t);
            let role = match (r, t) {
                (0, t) if t >= 150 => Role::M,
                (0 | 1, _) => Role::P,
                (2, t) if (90..150).contains(&t) => Role::P,
                (2, _) => Role::M,
                _ => Role::F,
            };
            let cpu = (!down && t > 0).then(|| 0.5 + 0.1 * r as f64 + if (90..150).contains(&t) { 0.3 } else { 0.0 });
            rows.push(ReplicaRow {
                t_s: t as f64,
                replica: ReplicaId(r).to_string(),
                up: !down,
                role,
                cpu_fraction: cpu,
                active_p: 2,
                active_f: 5,
            });
        }
    }
    rows
}

fn event(t_s: f64, kind: EventKind, replica: &str, detail: &str) -> EventRow {
    EventRow { t_s, kind, replica: replica.into(), detail: detail.into() }
}

fn synthetic(partial: bool, workload: &str) -> (Summary, RunMetrics) {
    let phases: Vec<PhaseRow> =
        PHASES.iter().flat_map(|&(n, a, b, k)| Class::ALL.map(|c| phase_row(n, a, b, k, c))).collect();
    let timeseries = (0..200u32)
        .flat_map(|t| {
            Class::ALL.map(|class| {
                let g = if class == Class::P { 20.0 } else { 60.0 } * if (90..150).contains(&t) { 0.8 } else { 1.0 };
                let gap = class == Class::F && (100..104).contains(&t);
                let p95 = (!gap).then(|| if (90..100).contains(&t) { 900.0 } else { 80.0 });
                SeriesRow {
                    t_s: t,
                    class,
                    completed: g as u64,
                    goodput_qps: g,
                    p95_ms: p95,
                    active_sessions: 10,
                    wanting: 0,
                    logins_waiting: if (90..95).contains(&t) { 4 } else { 0 },
                    login_oldest_ms: (90..95).contains(&t).then_some(300.0),
                }
            })
        })
        .collect();
    let events = vec![
        event(90.0, EventKind::Fault, "r1", "Down"),
        event(90.5, EventKind::Detect, "r1", "probe failed"),
        event(90.5, EventKind::Role, "r3", "M -> P"),
        event(150.0, EventKind::Fault, "r1", "Rejoin"),
        event(150.75, EventKind::Detect, "r1", "probe ok"),
        event(150.75, EventKind::Role, "r1", "enters as M"),
    ];
    let replica_cpu = PHASES
        .iter()
        .flat_map(|&(n, ..)| {
            (0..5).filter(move |&r| !(n == "down1" && r == 0)).map(move |r| ReplicaCpu {
                phase: n.into(),
                replica: ReplicaId(r).to_string(),
                u: 0.5 + 0.2 * r as f64,
            })
        })
        .collect::<Vec<_>>();
    let metrics = RunMetrics {
        backlog: Vec::new(),
        flow: Vec::new(),
        phases: phases.clone(),
        timeseries,
        replicas: replica_rows(),
        roles: None,
        replica_cpu: replica_cpu.clone(),
        events: events.clone(),
        queries: None,
        sessions_started: [164, 164],
        sessions_in_flight: [2, 2],
        abort_reasons: vec![(Class::P, "replica down".into(), 2), (Class::F, "replica down".into(), 2)],
        error_kinds: vec![(Class::P, "connection".into(), 3), (Class::F, "connection".into(), 3)],
        rejection_reasons: vec![],
        queue: Default::default(),
        timeouts: Vec::new(),
    };
    let summary = Summary {
        schema_version: crate::report::version::SUMMARY,
        partial,
        settings: Settings {
            strategy: "plb".into(),
            mix: "25:75".into(),
            clients: 100,
            load: None,
            offered: Some(6.46),
            calibration: None,
            replicas: 5,
            reference: "2,1,2".into(),
            split: "3:2".into(),
            faults: "premium-fault".into(),
            workload: workload.into(),
            cluster: "sim".into(),
            seed: 42,
            time_scale: 1.0,
            duration_s: 200.0,
            theta: 10,
            alpha: 0.7,
            mixed: Some("bounded".into()),
            freemium_borrow: Some(Default::default()),
            max_connections: Some(300),
            detection: "probe".into(),
            admission: "none".into(),
            recovery: "none".into(),
            checks: Default::default(),
            via_proxy: None,
        },
        environment: Environment {
            plbbench_version: "0.1.0".into(),
            git_commit: Some("abc1234".into()),
            postgres_version: None,
            cores: 2,
            memory_gib: 7.8,
            cpu_budget_cores: 0.3,
            cpu_budget_enforced: false,
            started_utc: "2025-01-01T00:00:00Z".into(),
        },
        faults: vec![
            FaultEvent { t_s: 90.0, replica: ReplicaId(0), action: Action::Down },
            FaultEvent { t_s: 150.0, replica: ReplicaId(0), action: Action::Rejoin },
        ],
        phases,
        replica_cpu,
        fault_events: events.into_iter().filter(|e| e.kind != EventKind::Role).collect(),
        accounting: Class::ALL
            .map(|class| Accounting {
                class,
                sessions_started: 164,
                sessions_in_flight: 2,
                aborts: vec![("replica down".into(), 2)],
                errors: vec![("connection".into(), 3)],
                rejections: vec![],
            })
            .to_vec(),
        verdicts: vec![
            Verdict { name: "accounting".into(), ok: true, detail: "adds up".into() },
            Verdict { name: "saturation".into(), ok: false, detail: "r2 above budget in down1".into() },
        ],
        wall_s: 3.25,
        interrupted_by: None,
        stop_overrun_s: None,
        recovery: vec![crate::core::recovery::Entry {
            replica: "r1".into(),
            action: "Down".into(),
            at_s: 90.0,
            ended_s: Some(150.0),
            detect_s: Some(0.25),
            isolate_s: Some(0.25),
            accepts_again_s: Some(60.5),
            premium_p95_back_s: Some(63.0),
            freemium_p95_back_s: None,
            backlog_drained_s: Some(61.0),
            full_service_s: Some(70.5),
            sessions_shifted: Some(1234),
            retries: Some(57),
        }],
        detector: Some(crate::core::recovery::Suspicions { suspicions: 9, false_suspicions: 3, false_removals: 1 }),
        generator: None,
        tier: None,
        proxy_tier: None,
        modes: Some(crate::report::summary::ModesReport {
            time_in_mode_s: vec![
                ("normal".into(), 120.0),
                ("cautious".into(), 0.0),
                ("restricted".into(), 0.0),
                ("survival".into(), 180.0),
            ],
            transitions: 2,
            thresholds: crate::core::degradation::Thresholds::preset(crate::core::degradation::Preset::Default),
            signals: vec![("wait".into(), "Premium's least query latency".into())],
            statement_slots: 4,
            replica_sessions: 200,
            saturation: 1.0,
            service_ms: 1.14,
            service_from: "the workload's mean Premium query CPU cost".into(),
            rejections: vec![("down1".into(), Class::F, "queue deadline".into(), 543)],
            books: None,
        }),
    };
    (summary, metrics)
}

fn page(partial: bool) -> String {
    let (s, m) = synthetic(partial, "tpch-small");
    render(&s, &m).unwrap()
}

#[test]
fn page_shows_the_time_in_each_mode_and_the_rejections_by_phase_and_reason() {
    let html = page(false);
    let section = &html[html.find("id=\"modes\"").expect("a modes section")..];
    for text in ["survival", "180.0", "queue deadline", "543", "1.14 ms"] {
        assert!(section.contains(text), "missing {text}");
    }
}

#[test]
fn page_shows_every_phase_both_classes_and_six_charts() {
    let html = page(false);
    for name in ["warmup", "baseline", "down1", "rejoin1", "Premium", "Freemium", "ramp, excluded from figures"] {
        assert!(html.contains(name), "missing {name}");
    }
    assert_eq!(html.matches("<svg").count(), 6);
    assert_eq!(html.matches("</svg>").count(), 6);
    assert_eq!(html.matches(r#"class="cls-P"#).count(), 4 + 4 + 1, "4 phase rows, 4 login rows, 1 accounting row");
    assert_eq!(html.matches(r#"class="cls-F"#).count(), 4 + 4 + 1);
    assert_eq!(html.matches(r#"class="cls-P warmup first""#).count(), 1);
    assert!(html.contains("Login wait per class") && html.contains("oldest login waiting (s)"));
    assert!(html.contains("<h2>Login waits</h2>") && html.contains("waiting at its end</th>"));
    assert_eq!(html.matches(r#"class="cls-P warmup""#).count(), 1, "the login table's warm-up row");
    // Charts use the class colours (plotters writes upper-case hex).
    let upper = html.to_uppercase();
    assert!(upper.contains("#1F77B4") && upper.contains("#FF7F0E"));
}

#[test]
fn recovery_ledger_has_a_row_per_fault_and_marks_what_never_recovered() {
    let html = page(false);
    let ledger = &html[html.find(r#"id="recovery""#).expect("ledger section")..];
    let ledger = &ledger[..ledger.find("</section>").unwrap()];
    assert_eq!(ledger.matches("<tr class=\"ledger\"").count(), 1, "{ledger}");
    for cell in ["r1", "Down", "90", "150", "0.25", "60.5", "63", "61", "not within the run"] {
        assert!(ledger.contains(cell), "missing {cell} in {ledger}");
    }
    for head in ["full service", "sessions shifted", "retries"] {
        assert!(ledger.contains(&format!("<th class=\"num\">{head}</th>")), "missing column {head}");
    }
    for cell in ["70.5", "1234", "57"] {
        assert!(ledger.contains(&format!(">{cell}</td>")), "missing cell {cell} in {ledger}");
    }
    let line = &ledger[ledger.find(r#"id="false-suspicions""#).expect("false-suspicion line")..];
    assert!(line.contains("False suspicions: 3</strong> of 9 suspicions; false removals: 1."), "{line}");
}

#[test]
fn a_summary_json_from_before_the_traffic_figures_still_loads() {
    let (s, _) = synthetic(false, "w");
    let mut v = serde_json::to_value(&s).unwrap();
    v.as_object_mut().unwrap().remove("detector").expect("written");
    for k in ["full_service_s", "sessions_shifted", "retries"] {
        v["recovery"][0].as_object_mut().unwrap().remove(k).expect("written");
    }
    let old: Summary = serde_json::from_value(v).expect("older summary.json loads");
    assert_eq!(old.detector, None);
    assert_eq!((old.recovery[0].sessions_shifted, old.recovery[0].retries), (None, None));
    assert_eq!(old.recovery[0].detect_s, Some(0.25));
}

#[test]
fn a_summary_from_before_the_traffic_figures_renders_dashes() {
    let (mut s, m) = synthetic(false, "w");
    s.detector = None;
    let e = &mut s.recovery[0];
    (e.full_service_s, e.sessions_shifted, e.retries) = (None, None, None);
    let html = render(&s, &m).unwrap();
    let ledger = &html[html.find(r#"id="recovery""#).unwrap()..];
    let ledger = &ledger[..ledger.find("</section>").unwrap()];
    assert_eq!(ledger.matches(r#"<td class="num">–</td>"#).count(), 2, "{ledger}");
    assert!(!ledger.contains("false-suspicions"));
}

#[test]
fn partial_banner_only_when_partial() {
    assert!(!page(false).contains("PARTIAL RUN"));
    assert!(!page(false).contains("partial-banner"));
    assert!(page(true).contains(r#"<div class="banner partial" id="partial-banner">PARTIAL RUN"#));
}

#[test]
fn failing_checks_and_unenforced_budget_are_loud() {
    let (mut s, m) = synthetic(false, "w");
    s.settings.cluster = "local".into();
    let html = render(&s, &m).unwrap();
    let banner = &html[html.find(r#"id="failing-verdicts""#).expect("red banner")..];
    let banner = &banner[..banner.find("</div>").unwrap()];
    assert!(banner.contains("saturation") && !banner.contains("accounting"));
    assert!(banner.contains("FAILED 1 OF 2 CHECKS: its numbers do not measure what they claim"), "{banner}");
    assert!(!banner.contains("downgraded"));
    assert!(html.contains("NOT ENFORCED"));
    let (mut s, m) = synthetic(false, "w");
    (s.environment.cpu_budget_enforced, s.settings.cluster) = (true, "local".into());
    s.verdicts.retain(|v| v.ok);
    let html = render(&s, &m).unwrap();
    assert!(!html.contains("NOT ENFORCED") && !html.contains("failing-verdicts"));
    // The simulator models the quota: no alarm in virtual time.
    let (mut s, m) = synthetic(false, "w");
    (s.environment.cpu_budget_enforced, s.settings.cluster) = (false, "sim".into());
    let html = render(&s, &m).unwrap();
    assert!(!html.contains("NOT ENFORCED") && !html.contains("budget was not enforced on this run"));
    assert!(html.contains("CFS bandwidth model (virtual time)"));
}

#[test]
fn the_failed_checks_banner_is_the_top_of_the_page_and_says_when_downgraded() {
    let (mut s, m) = synthetic(true, "w");
    let html = render(&s, &m).unwrap();
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("no {needle}"));
    let banner = at(r#"<div class="banner checks" id="failing-verdicts">"#);
    assert_eq!(html[at("<main>") + "<main>".len()..banner].trim(), "", "the first thing on the page");
    for below in ["<header>", "<h1>", "partial-banner", r#"id="setup""#, "<h2>Settings</h2>"] {
        assert!(banner < at(below), "the banner is below {below}");
    }
    s.settings.checks = crate::core::settings::Checks::Warn;
    let html = render(&s, &m).unwrap();
    let banner = &html[html.find(r#"id="failing-verdicts""#).unwrap()..];
    assert!(banner[..banner.find("</div>").unwrap()].contains("downgraded to warnings"), "{banner}");
}

#[test]
fn saturated_generator_gets_a_banner_and_a_setting_row() {
    let (mut s, m) = synthetic(false, "w");
    assert!(!render(&s, &m).unwrap().contains("generator-banner"));
    let mut load = crate::core::saturation::GeneratorLoad::new();
    load.cpu(0.0, 0.0);
    load.cpu(1.0, 0.2);
    s.generator = Some(load.report(Some(4096)));
    let html = render(&s, &m).unwrap();
    assert!(html.contains("load generator") && html.contains("peak RSS 4.00 MiB"), "setting row");
    assert!(!html.contains("generator-banner") && !html.contains("SATURATED"));
    load.cpu(2.0, 1.5);
    s.generator = Some(load.report(None));
    let html = render(&s, &m).unwrap();
    let banner = &html[html.find(r#"id="generator-banner""#).expect("banner")..];
    assert!(banner[..banner.find("</div>").unwrap()].contains("1.30 cores"), "{banner}");
}

#[test]
fn user_text_is_escaped() {
    let (s, m) = synthetic(false, "<script>alert(1)</script>");
    let html = render(&s, &m).unwrap();
    assert!(!html.contains("<script"), "raw script tag in the page");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;"));
}

#[test]
fn page_makes_no_network_references() {
    let html = page(true);
    let stripped = html.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
    assert_eq!(html.len() - stripped.len(), 6 * r#"xmlns="http://www.w3.org/2000/svg""#.len());
    for needle in ["http://", "https://", "<link", "<script", " src=", "@import", "url("] {
        assert!(!stripped.contains(needle), "found {needle}");
    }
}

#[test]
fn detections_carry_their_delay() {
    let (_, m) = synthetic(false, "w");
    let ev = event_views(&m.events);
    let delays: Vec<(&str, &str)> = ev.iter().map(|e| (e.kind.as_str(), e.delay.as_str())).collect();
    let want =
        [("fault", "–"), ("detect", "500 ms"), ("role", "–"), ("fault", "–"), ("detect", "750 ms"), ("role", "–")];
    assert_eq!(delays, want);
    // A detection without a fault of the same replica has no delay.
    let ev = event_views(&[event(1.0, EventKind::Fault, "r2", ""), event(2.0, EventKind::Detect, "r3", "")]);
    assert_eq!(ev[1].delay, DASH);
}

#[test]
fn shaded_windows_are_warmup_and_reduced_phases() {
    let (s, _) = synthetic(false, "w");
    let f = Frame::new(&s.phases, 5, 200.0, vec![]);
    let names: Vec<(&str, bool)> = f.windows.iter().map(|w| (w.name.as_str(), w.warmup)).collect();
    assert_eq!(names, vec![("warmup", true), ("down1", false)]);
}

#[test]
fn phase_bars_leave_out_the_warmup() {
    let (s, _) = synthetic(false, "w");
    let svg = charts::phase_bars(&s.phases).unwrap();
    assert!(svg.contains("down1") && svg.contains("rejoin1") && svg.contains("baseline"));
    assert!(!svg.contains("warmup"));
}

#[test]
fn formatting() {
    assert_eq!(count(0), "0");
    assert_eq!(count(999), "999");
    assert_eq!(count(1_234_567), "1,234,567");
    assert_eq!(secs(120.0), "120");
    assert_eq!(secs(12.45), "12.5");
    assert_eq!(opt(None), "–");
    assert_eq!(opt(Some(0.98765)), "0.988");
    assert_eq!(duration(0.0057), "5.70 ms");
    assert_eq!(duration(2.5), "2.50 s");
}

#[test]
fn degenerate_runs_still_render() {
    // No faults (warm-up and baseline only) and nothing measured.
    let (mut s, mut m) = synthetic(true, "w");
    s.phases.retain(|r| r.phase == "warmup" || r.phase == "baseline");
    s.faults.clear();
    m.phases = s.phases.clone();
    m.timeseries.clear();
    m.replicas.clear();
    m.events.clear();
    let html = render(&s, &m).unwrap();
    assert_eq!(html.matches("<svg").count(), 6);
    assert!(html.contains("no replica samples"));
    // Not even phases (a run interrupted at once).
    s.phases.clear();
    m.phases.clear();
    s.fault_events.clear();
    let html = render(&s, &m).unwrap();
    assert_eq!(html.matches("<svg").count(), 6);
    assert!(html.contains("No events were recorded."));
}

#[test]
fn short_phases_are_flagged() {
    let (mut s, mut m) = synthetic(false, "w");
    assert!(!page(false).contains("Shorter than a typical baseline session"));
    for r in s.phases.iter_mut().chain(m.phases.iter_mut()) {
        r.lifetime_mean_s = Some(45.0); // longer than the 30 s baseline only
    }
    let html = render(&s, &m).unwrap();
    assert!(html.contains("Shorter than a typical baseline session"));
    let groups = phase_groups(&m.phases, 5);
    let short: Vec<&str> = groups.iter().filter(|g| g.short).map(|g| g.name.as_str()).collect();
    assert_eq!(short, vec!["baseline"]);
}
