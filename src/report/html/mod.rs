//! report.html (design.md §5): the self-contained page of one run. Builds a
//! serialisable view model from the summary and the metrics (every number
//! already formatted, "–" where missing), draws the SVG charts, and renders
//! both through the minijinja template `templates/run.html` with HTML
//! autoescaping; only the chart SVGs are marked safe. No HTML is assembled
//! in Rust (design.md §7), and the page references nothing on the network.

use crate::core::metrics::{is_fleet, EventRow, PhaseRow, ReplicaCpu, ReplicaRow, RoleRow, RunMetrics, FLEET_ROWS};
use crate::core::model::{Class, EventKind, ReplicaId, Role};
use crate::core::outcome::Verdict;
use crate::core::phases::WARMUP;
use crate::core::settings::Checks;
use crate::report::charts::{self, sig3, ChartError, Frame};
use crate::report::summary::{Accounting, Summary};
use minijinja::{AutoEscape, Environment, UndefinedBehavior, Value};
use serde::Serialize;

/// The page template, embedded at build time.
const TEMPLATE: &str = include_str!("../../../templates/run.html");
/// The style sheet shared by every page, embedded at build time.
pub const STYLE: &str = include_str!("../../../templates/style.css");

/// Why report.html could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A chart failed to draw.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// The template failed to parse or render.
    #[error("cannot render the report template: {0}")]
    Template(#[from] minijinja::Error),
}

/// Renders the complete report.html of one run.
pub fn render(summary: &Summary, metrics: &RunMetrics) -> Result<String, ReportError> {
    let page = Page::new(summary, metrics)?;
    let mut env = Environment::new();
    env.set_auto_escape_callback(|_| AutoEscape::Html);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("style.css", STYLE)?;
    env.add_template("run.html", TEMPLATE)?;
    Ok(env.get_template("run.html")?.render(&page)?)
}

/// The whole view model of the page.
#[derive(Serialize)]
struct Page {
    title: Title,
    partial: bool,
    /// The saturation guard's finding when the generator was the bottleneck.
    generator_saturated: Option<String>,
    /// The failed checks: the red banner at the top of the page.
    failing: Vec<Verdict>,
    /// `--checks warn`: the banner says the failures were only warnings.
    checks_downgraded: bool,
    colours: Colours,
    settings: Vec<Item>,
    environment: Vec<Item>,
    phases: Vec<PhaseGroup>,
    any_short: bool,
    charts: Vec<ChartView>,
    cpu: CpuTable,
    events: Vec<EventView>,
    /// The recovery ledger, one entry per Down or Pause (docs/resilience.md, "The recovery ledger").
    recovery: Vec<crate::core::recovery::Entry>,
    /// The run's suspicions and false suspicions, when recorded.
    detector: Option<crate::core::recovery::Suspicions>,
    accounting: Vec<AccountView>,
    verdicts: Vec<Verdict>,
    /// `--admission modes`: time in each mode, signals, rejections.
    modes: Option<crate::report::summary::ModesReport>,
}

#[derive(Serialize)]
struct Title {
    strategy: String,
    mix: String,
    clients: u32,
    cluster: String,
    seed: u64,
    time_scale: String,
    workload: String,
    faults: String,
    started: String,
    duration: String,
    wall: String,
    version: String,
    commit: String,
}

/// The page colours, shared with the charts (style.css reads them).
#[derive(Serialize)]
pub(crate) struct Colours {
    premium: String,
    freemium: String,
    mixed: String,
    fault: String,
}

impl Colours {
    /// The chart palette as CSS colours.
    pub(crate) fn new() -> Colours {
        Colours {
            premium: charts::hex(charts::PREMIUM),
            freemium: charts::hex(charts::FREEMIUM),
            mixed: charts::hex(charts::MIXED),
            fault: charts::hex(charts::FAULT),
        }
    }
}

/// One label/value line of the settings and environment tables.
#[derive(Serialize)]
struct Item {
    label: &'static str,
    value: String,
    /// Shown loudly (e.g. an unenforced CPU budget).
    alert: Option<String>,
}

fn item(label: &'static str, value: impl Into<String>) -> Item {
    Item { label, value: value.into(), alert: None }
}

/// The rows of one phase (one per class), sharing the phase's cells.
#[derive(Serialize)]
struct PhaseGroup {
    name: String,
    span: String,
    length: String,
    survivors: usize,
    reduced: bool,
    warmup: bool,
    short: bool,
    cpu_mean: String,
    cpu_cv: String,
    rows: Vec<ClassRow>,
}

#[derive(Serialize)]
struct ClassRow {
    class: String,
    class_name: &'static str,
    completed: String,
    goodput: String,
    retention: String,
    p50: String,
    p95: String,
    p99: String,
    inflation: String,
    sessions_ended: String,
    life_mean: String,
    life_p95: String,
    login_p50: String,
    login_p95: String,
    login_p99: String,
    login_max: String,
    logins_waiting: String,
    login_over: bool,
    errors: String,
    aborted: String,
    errors_nonzero: bool,
    aborted_nonzero: bool,
}

#[derive(Serialize)]
struct ChartView {
    id: &'static str,
    title: &'static str,
    caption: String,
    svg: Value,
}

#[derive(Serialize)]
struct CpuTable {
    replicas: Vec<String>,
    rows: Vec<CpuRow>,
}

#[derive(Serialize)]
struct CpuRow {
    phase: String,
    warmup: bool,
    reduced: bool,
    cells: Vec<CpuCell>,
    mean: String,
    cv: String,
}

#[derive(Serialize)]
struct CpuCell {
    value: String,
    over: bool,
    missing: bool,
}

#[derive(Serialize)]
struct EventView {
    t: String,
    kind: String,
    replica: String,
    detail: String,
    delay: String,
}

#[derive(Serialize)]
struct AccountView {
    class: String,
    class_name: &'static str,
    started: String,
    ended: String,
    aborted: String,
    in_flight: String,
    balanced: bool,
    completed: String,
    failed: String,
    aborts: Vec<(String, String)>,
    errors: Vec<(String, String)>,
}

/// A missing number.
const DASH: &str = "–";

fn opt(x: Option<f64>) -> String {
    x.map_or(DASH.to_string(), sig3)
}

/// An integer with thousands separators (`12,345`).
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// Seconds on the time axis: whole seconds stay whole (`120`, `12.5`).
fn secs(t: f64) -> String {
    let r = (t * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// A short duration: milliseconds below a second (`389 ms`), else seconds.
fn duration(s: f64) -> String {
    if s.abs() < 1.0 {
        format!("{} ms", sig3(s * 1000.0))
    } else {
        format!("{} s", sig3(s))
    }
}

fn class_name(c: Class) -> &'static str {
    match c {
        Class::P => "Premium",
        Class::F => "Freemium",
    }
}

impl Page {
    fn new(s: &Summary, m: &RunMetrics) -> Result<Page, ReportError> {
        let phases = if m.phases.is_empty() { &s.phases } else { &m.phases };
        let k = s.settings.replicas;
        let names = if is_fleet(k) { Vec::new() } else { replica_names(k, m) };
        let mut frame = Frame::new(phases, k, time_end(s, m, phases), s.faults.iter().map(|f| f.t_s).collect());
        frame.modes = charts::mode_spans(&m.events, frame.t_end);
        let replica_cpu = if s.replica_cpu.is_empty() { &m.replica_cpu } else { &s.replica_cpu };
        let events = if m.events.is_empty() { &s.fault_events } else { &m.events };
        let groups = phase_groups(phases, k);
        Ok(Page {
            title: title(s),
            partial: s.partial,
            generator_saturated: s.generator.as_ref().filter(|g| g.saturated).map(|g| g.detail()),
            failing: s.failed_checks().into_iter().cloned().collect(),
            checks_downgraded: s.settings.checks == Checks::Warn,
            colours: Colours::new(),
            settings: settings(s),
            environment: environment(s),
            any_short: groups.iter().any(|g| g.short),
            cpu: cpu_table(&groups, replica_cpu, &names),
            phases: groups,
            charts: chart_views(s, m, phases, &names, &frame)?,
            events: event_views(events),
            recovery: s.recovery.clone(),
            detector: s.detector.clone(),
            accounting: accounting(&s.accounting, phases),
            verdicts: s.verdicts.clone(),
            modes: s.modes.clone(),
        })
    }
}

/// r1..rK, plus any other replica that appears in the samples.
fn replica_names(k: usize, m: &RunMetrics) -> Vec<String> {
    let mut names: Vec<String> = ReplicaId::all(k).map(|r| r.to_string()).collect();
    for r in &m.replicas {
        if !names.contains(&r.replica) {
            names.push(r.replica.clone());
        }
    }
    names
}

/// The end of the time axis: the last thing measured, else the run length.
fn time_end(s: &Summary, m: &RunMetrics, phases: &[PhaseRow]) -> f64 {
    let measured = phases
        .iter()
        .map(|p| p.end_s)
        .chain(m.timeseries.iter().map(|r| f64::from(r.t_s) + 1.0))
        .chain(m.replicas.iter().map(|r| r.t_s))
        .fold(0.0, f64::max);
    if measured > 0.0 {
        measured
    } else {
        s.settings.duration_s
    }
}

fn title(s: &Summary) -> Title {
    let st = &s.settings;
    let faults: Vec<String> =
        s.faults.iter().map(|f| format!("{} {} at {} s", f.action, f.replica, secs(f.t_s))).collect();
    let faults = if faults.is_empty() { st.faults.clone() } else { format!("{}: {}", st.faults, faults.join(" · ")) };
    Title {
        strategy: st.strategy.clone(),
        mix: st.mix.clone(),
        clients: st.clients,
        cluster: st.cluster.clone(),
        seed: st.seed,
        time_scale: format!("{}×", st.time_scale),
        workload: st.workload.clone(),
        faults,
        started: s.environment.started_utc.clone(),
        duration: format!("{} s", secs(st.duration_s)),
        wall: format!("{} s", sig3(s.wall_s)),
        version: s.environment.plbbench_version.clone(),
        commit: s.environment.git_commit.clone().unwrap_or_else(|| "unknown".into()),
    }
}

fn settings(s: &Summary) -> Vec<Item> {
    let st = &s.settings;
    let mut v = vec![
        item("strategy", st.strategy.clone()),
        item("Premium:Freemium mix", st.mix.clone()),
        item("clients T", st.clients.to_string()),
        item("replicas K", st.replicas.to_string()),
    ];
    if st.strategy.starts_with("plb") {
        v.push(item("PLB reference split (P,M,F)", st.reference.clone()));
        v.push(item("PLB θ (sessions per replica)", st.theta.to_string()));
        v.push(item("PLB α (return level τ = ⌊αθ⌋)", st.alpha.to_string()));
        if let Some(m) = &st.mixed {
            v.push(item("PLB Mixed admission", format!("{m} by θ")));
        }
        if let Some(b) = st.freemium_borrow {
            v.push(item("PLB Freemium borrowing", b.name().to_string()));
        }
    }
    if st.strategy == "rr-split" {
        v.push(item("rr-split partition (P:F replicas)", st.split.clone()));
    }
    v.extend([
        item("fault detection", st.detection.clone()),
        item("faults", title(s).faults),
        item("workload", st.workload.clone()),
        item("costs", st.calibration.clone().unwrap_or_else(|| "the workload's own".into())),
        item("cluster backend", st.cluster.clone()),
        item("routed by", st.via_proxy.clone().unwrap_or_else(|| "plbbench's own clients (no proxy)".into())),
    ]);
    if let Some(n) = st.max_connections {
        v.push(item("max_connections per replica", n.to_string()));
    }
    if let Some(t) = &s.tier {
        v.push(item("routers (simulated tier)", t.line()));
    }
    v.extend([
        item("seed", st.seed.to_string()),
        item("time scale", format!("{}×", st.time_scale)),
        item("run length (scaled)", format!("{} s", secs(st.duration_s))),
        item("a failed check", checks_setting(st.checks)),
    ]);
    v
}

/// What `--checks` made of a failed check.
fn checks_setting(c: Checks) -> &'static str {
    match c {
        Checks::Fail => "fails the run (exit status 1)",
        Checks::Warn => "is a warning (--checks warn)",
    }
}

/// A real run whose replicas ran without their CPU quota (the simulator
/// always applies its model of the quota).
fn unenforced(s: &Summary) -> bool {
    !s.environment.cpu_budget_enforced && s.settings.cluster != "sim"
}

fn environment(s: &Summary) -> Vec<Item> {
    let e = &s.environment;
    let pg = match (&e.postgres_version, s.settings.cluster.as_str()) {
        (Some(v), _) => v.clone(),
        (None, "sim") => "– (simulated cluster)".into(),
        (None, _) => DASH.into(),
    };
    let sim = s.settings.cluster == "sim";
    let budget = Item {
        label: "CPU budget C per replica",
        value: format!("{} cores", sig3(e.cpu_budget_cores)),
        alert: unenforced(s)
            .then(|| "NOT ENFORCED: the budget was only modelled, replica capacity is not bounded by it".into()),
    };
    let enforced = match (sim, e.cpu_budget_enforced) {
        (true, _) => "by the simulator's CFS bandwidth model (virtual time)",
        (false, true) => "yes",
        (false, false) => "no",
    };
    vec![
        item("plbbench", e.plbbench_version.clone()),
        item("git commit", e.git_commit.clone().unwrap_or_else(|| DASH.into())),
        item("PostgreSQL", pg),
        item("machine cores", e.cores.to_string()),
        item("machine memory", format!("{} GiB", sig3(e.memory_gib))),
        budget,
        item("CPU budget enforced", enforced),
        item("started (UTC)", e.started_utc.clone()),
        item("wall-clock time", format!("{} s", sig3(s.wall_s))),
    ]
    .into_iter()
    .chain(s.generator.as_ref().map(|g| Item {
        label: "load generator",
        value: format!(
            "CPU max {} cores, mean {}; schedule lag p50 {} ms, p99 {} ms; peak RSS {} MiB",
            sig3(g.cpu_max_cores),
            sig3(g.cpu_mean_cores),
            sig3(g.lag_p50_ms),
            sig3(g.lag_p99_ms),
            g.rss_peak_mib.map_or(DASH.into(), sig3)
        ),
        alert: g.saturated.then(|| "SATURATED: the generator, not the database, limited this run".into()),
    }))
    .collect()
}

/// The phase table: one group per phase in file order, rows P then F.
fn phase_groups(phases: &[PhaseRow], k: usize) -> Vec<PhaseGroup> {
    // A phase is "short" when it is shorter than a baseline session lives.
    let typical = phases.iter().filter(|r| r.phase == "baseline").filter_map(|r| r.lifetime_mean_s).fold(0.0, f64::max);
    let mut groups: Vec<PhaseGroup> = Vec::new();
    for r in phases {
        if groups.last().is_none_or(|g| g.name != r.phase) {
            let warmup = r.phase == WARMUP;
            groups.push(PhaseGroup {
                name: r.phase.clone(),
                span: format!("{}–{}", secs(r.start_s), secs(r.end_s)),
                length: secs(r.end_s - r.start_s),
                survivors: r.survivors,
                reduced: r.survivors < k,
                warmup,
                short: !warmup && r.end_s - r.start_s < typical,
                cpu_mean: opt(r.cpu_mean),
                cpu_cv: opt(r.cpu_cv),
                rows: Vec::new(),
            });
        }
        groups.last_mut().expect("pushed above").rows.push(class_row(r));
    }
    groups
}

fn class_row(r: &PhaseRow) -> ClassRow {
    ClassRow {
        class: r.class.to_string(),
        class_name: class_name(r.class),
        completed: count(r.completed),
        goodput: sig3(r.goodput_qps),
        retention: opt(r.retention),
        p50: opt(r.p50_ms),
        p95: opt(r.p95_ms),
        p99: opt(r.p99_ms),
        inflation: opt(r.inflation_p95),
        sessions_ended: count(r.sessions_ended),
        life_mean: opt(r.lifetime_mean_s),
        life_p95: opt(r.lifetime_p95_s),
        login_p50: opt(r.login_p50_ms.map(|ms| ms / 1000.0)),
        login_p95: opt(r.login_p95_ms.map(|ms| ms / 1000.0)),
        login_p99: opt(r.login_p99_ms.map(|ms| ms / 1000.0)),
        login_max: opt(r.login_max_ms.map(|ms| ms / 1000.0)),
        logins_waiting: count(r.logins_waiting),
        login_over: r.login_max_ms.is_some_and(|ms| ms / 1000.0 > crate::core::validity::LOGIN_WAIT_LIMIT_S),
        errors: count(r.errors),
        aborted: count(r.aborted_sessions),
        errors_nonzero: r.errors > 0,
        aborted_nonzero: r.aborted_sessions > 0,
    }
}

const GOODPUT_CAPTION: &str = "Completed queries per second of each class (thin: each second, bold: 5 s moving mean); \
    a drop inside a red fault window is throughput lost to the failure, and the grey warm-up is excluded from every figure.";
const P95_CAPTION: &str = "95th-percentile latency of the queries completed in each second, measured from their intended \
    start so stalls count; a rise inside a fault window is queueing on the survivors, and gaps are seconds without completions.";
const LOGINS_CAPTION: &str = "How long the oldest login of each class still waiting at the end of each second had \
    waited (from its session's intended start: the admission gate, retries, the connect and the postmaster's fork); \
    gaps are seconds with no login waiting. The dashed line is the login-wait check's limit, PgBouncer's 120 s \
    query_wait_timeout; timeseries.csv has the number waiting, phases.csv the waits' percentiles per phase.";
const CPU_CAPTION: &str =
    "CPU each replica used as a fraction of its budget C, per sample; the dashed line at 1.0 is the \
    budget, and a line stops while its replica is down or unmeasured.";
const ROLES_CAPTION: &str =
    "Each lane is one replica, coloured by the role the router gave it (P, M, F); hatched grey \
    means the replica was down, and red dashed lines mark fault events.";
const BARS_CAPTION: &str =
    "Each phase after the warm-up relative to the baseline: goodput retention (left, below 1 is lost \
    throughput) and p95 inflation (right, above 1 is slower service) for each class; the dashed line marks no change.";

/// The figures, in page order, with the caption that says how to read each.
fn chart_views(
    s: &Summary,
    m: &RunMetrics,
    phases: &[PhaseRow],
    names: &[String],
    frame: &Frame,
) -> Result<Vec<ChartView>, ReportError> {
    let view =
        |id, title, caption: String, svg: String| ChartView { id, title, caption, svg: Value::from_safe_string(svg) };
    let unenforced = if !unenforced(s) {
        ""
    } else {
        " The budget was not enforced on this run, so values above 1.0 are possible and capacity is not comparable."
    };
    let roles_note = match s.settings.strategy.as_str() {
        "plb" => String::new(),
        "rr-split" => " For rr-split the colours are the static partitions (P or F); they never change.".to_string(),
        other => format!(" The {other} router ignores roles; read this chart for which replicas were up."),
    };
    let mut views = vec![
        view("goodput", "Goodput per class", GOODPUT_CAPTION.into(), charts::goodput(&m.timeseries, frame)?),
        view("p95", "p95 latency per class", P95_CAPTION.into(), charts::p95(&m.timeseries, frame)?),
        view("logins", "Login wait per class", LOGINS_CAPTION.into(), charts::logins(&m.timeseries, frame)?),
    ];
    match &m.roles {
        Some(roles) => {
            let (rows, lines) = fleet_lines(roles);
            let caption = format!("{}{unenforced}", fleet_caption(s.settings.replicas));
            views.push(view("cpu", "CPU per role (p50, p95)", caption, charts::cpu(&rows, &lines, frame)?));
        }
        None => {
            let cpu = charts::cpu(&m.replicas, names, frame)?;
            views.push(view("cpu", "CPU per replica", format!("{CPU_CAPTION}{unenforced}"), cpu));
            let roles = charts::roles(&m.replicas, names, frame)?;
            views.push(view("roles", "Replica roles over time", format!("{ROLES_CAPTION}{roles_note}"), roles));
        }
    }
    views.push(view("phases", "Retention and inflation per phase", BARS_CAPTION.into(), charts::phase_bars(phases)?));
    Ok(views)
}

/// What a fleet's report shows instead of per-replica lines, and why.
fn fleet_caption(k: usize) -> String {
    format!(
        "This run has {k} replicas, more than the {FLEET_ROWS} this report draws one by one: each line is the \
        p50 or p95 of the CPU (fraction of the budget C) of the replicas of one role that are up, per sample, \
        and the dashed line at 1.0 is the budget. roles.csv holds these with the max and the open sessions \
        per role; replicas.csv, the role timeline and the per-replica CPU columns are left out."
    )
}

/// roles.csv's CPU quantiles as chart lines: rows named `P p50`, `P p95`,
/// ... (one per role and quantile), and those names.
fn fleet_lines(roles: &[RoleRow]) -> (Vec<ReplicaRow>, Vec<String>) {
    type Pick = fn(&RoleRow) -> Option<f64>;
    let quantiles: [(&str, Pick); 2] = [("p50", |r| r.cpu_p50), ("p95", |r| r.cpu_p95)];
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for role in Role::ALL {
        for (q, pick) in quantiles {
            let name = format!("{role} {q}");
            rows.extend(roles.iter().filter(|r| r.role == role).map(|r| ReplicaRow {
                t_s: r.t_s,
                replica: name.clone(),
                up: r.replicas > 0,
                role,
                cpu_fraction: pick(r),
                active_p: 0,
                active_f: 0,
            }));
            names.push(name);
        }
    }
    (rows, names)
}

/// u_r per phase (rows) and replica (columns); a missing cell means the
/// replica was not available through the phase.
fn cpu_table(groups: &[PhaseGroup], cpu: &[ReplicaCpu], names: &[String]) -> CpuTable {
    let cell = |phase: &str, replica: &String| {
        let u = cpu.iter().find(|c| c.phase == phase && &c.replica == replica).map(|c| c.u);
        CpuCell { value: opt(u), over: u.is_some_and(|u| u > 1.0), missing: u.is_none() }
    };
    let rows = groups
        .iter()
        .map(|g| CpuRow {
            phase: g.name.clone(),
            warmup: g.warmup,
            reduced: g.reduced,
            cells: names.iter().map(|n| cell(&g.name, n)).collect(),
            mean: g.cpu_mean.clone(),
            cv: g.cpu_cv.clone(),
        })
        .collect();
    CpuTable { replicas: names.to_vec(), rows }
}

/// Events in time order; a detection carries its delay after the latest
/// undetected fault of the same replica.
fn event_views(events: &[EventRow]) -> Vec<EventView> {
    let mut sorted: Vec<&EventRow> = events.iter().collect();
    sorted.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
    let mut pending: Vec<(&str, f64)> = Vec::new();
    sorted
        .into_iter()
        .map(|e| {
            let mut delay = None;
            match e.kind {
                EventKind::Fault => {
                    pending.retain(|p| p.0 != e.replica);
                    pending.push((&e.replica, e.t_s));
                }
                EventKind::Detect => {
                    if let Some(i) = pending.iter().position(|p| p.0 == e.replica) {
                        delay = Some(e.t_s - pending.remove(i).1);
                    }
                }
                _ => {}
            }
            EventView {
                t: format!("{:.2}", e.t_s),
                kind: e.kind.to_string(),
                replica: if e.replica.is_empty() { DASH.into() } else { e.replica.clone() },
                detail: e.detail.clone(),
                delay: delay.map_or(DASH.into(), duration),
            }
        })
        .collect()
}

/// Per class: where every session went, and why queries and sessions failed.
fn accounting(accounts: &[Accounting], phases: &[PhaseRow]) -> Vec<AccountView> {
    accounts
        .iter()
        .map(|a| {
            let rows = phases.iter().filter(|r| r.class == a.class);
            let (ended, aborted, completed, failed) = rows.fold((0, 0, 0, 0), |t, r| {
                (t.0 + r.sessions_ended, t.1 + r.aborted_sessions, t.2 + r.completed, t.3 + r.errors)
            });
            let pairs = |v: &[(String, u64)]| v.iter().map(|(k, n)| (k.clone(), count(*n))).collect();
            AccountView {
                class: a.class.to_string(),
                class_name: class_name(a.class),
                started: count(a.sessions_started),
                ended: count(ended),
                aborted: count(aborted),
                in_flight: count(a.sessions_in_flight),
                balanced: ended + aborted + a.sessions_in_flight == a.sessions_started,
                completed: count(completed),
                failed: count(failed),
                aborts: pairs(&a.aborts),
                errors: pairs(&a.errors),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
