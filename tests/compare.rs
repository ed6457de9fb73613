//! `plbbench compare` through the real binary on folders the simulator
//! writes: thresholds the data violates exit 1 and name the violation, ones
//! it meets exit 0 (limits derived from the runs' own phases.csv, so the
//! tests check the arithmetic, not pinned numbers); bad expressions, missing
//! phases or metrics and unreadable folders exit 2 with one line; JSON
//! parses and carries the deltas; Markdown renders a table; experiments are
//! compared cell by cell and the HTML page is self-contained.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).args(checks_warn(args)).output().expect("run plbbench")
}

/// `--checks warn` for a run or an experiment that names no `--checks`:
/// these tests are not about run validity, and their short (time-scaled)
/// runs fail the phase-length check.
fn checks_warn(args: &[&str]) -> &'static [&'static str] {
    match args.first() {
        Some(&"run") | Some(&"experiment") if !args.contains(&"--checks") => &["--checks", "warn"],
        _ => &[],
    }
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two sim runs (plb and rr, cascade) and two small sim experiments in a
/// temporary folder, removed on drop.
struct Fixture {
    root: PathBuf,
    plb: String,
    rr: String,
    exp1: String,
    exp2: String,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn fixture(name: &str) -> Fixture {
    let root = std::env::temp_dir().join(format!("plbbench-compare-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let p = |n: &str| root.join(n).to_str().unwrap().to_string();
    let f = Fixture { plb: p("plb"), rr: p("rr"), exp1: p("exp1"), exp2: p("exp2"), root };
    for (dir, strategy) in [(&f.plb, "plb"), (&f.rr, "rr")] {
        let run = ["run", "--cluster", "sim", "--quiet", "--T", "200", "--time-scale", "0.2", "--faults", "cascade"];
        ok(&plbbench(&[&run[..], &["--strategy", strategy, "--out", dir]].concat()));
    }
    for (dir, seed) in [(&f.exp1, "1"), (&f.exp2, "4")] {
        let exp = [
            "experiment",
            "--cluster",
            "sim",
            "--quiet",
            "--strategies",
            "plb,rr",
            "--mixes",
            "25:75",
            "--faults",
            "cascade",
            "--repeat",
            "2",
            "--T",
            "200",
            "--time-scale",
            "0.2",
        ];
        ok(&plbbench(&[&exp[..], &["--seed", seed, "--out", dir]].concat()));
    }
    f
}

/// phases.csv of a run folder, keyed by (phase, class).
fn phases(dir: &str) -> BTreeMap<(String, String), BTreeMap<String, String>> {
    let mut r = csv::Reader::from_path(Path::new(dir).join("phases.csv")).unwrap();
    let header = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let row: BTreeMap<String, String> =
                header.iter().zip(rec.unwrap().iter()).map(|(h, v)| (h.into(), v.into())).collect();
            ((row["phase"].clone(), row["class"].clone()), row)
        })
        .collect()
}

fn value(dir: &str, phase: &str, class: &str, metric: &str) -> f64 {
    phases(dir)[&(phase.to_string(), class.to_string())][metric].parse().unwrap()
}

#[test]
fn violated_threshold_exits_1_and_names_it_met_threshold_exits_0() {
    let f = fixture("violated_thr");
    let (b, n) = (value(&f.plb, "down2", "P", "p99_ms"), value(&f.rr, "down2", "P", "p99_ms"));
    let pct = (n / b - 1.0) * 100.0;
    assert!(pct.abs() > 2.0, "the strategies differ in down2: {b} vs {n}");
    let below = format!("premium.down2.p99_ms<{:+.3}%", pct - 1.0);
    let above = format!("premium.down2.p99_ms<{:+.3}%", pct + 1.0);
    let out = plbbench(&["compare", "--baseline", &f.plb, &f.rr, "--threshold", &below]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains("threshold violated")).expect("a violation line");
    assert!(line.contains("premium.down2.p99_ms") && line.contains(&f.rr), "{line}");
    for part in [": baseline ", ", new ", ", change ", ", limit < "] {
        assert!(line.contains(part), "{line}");
    }
    assert!(err.contains("1 of 1 threshold checks violated"), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("VIOLATED") && text.contains(&below), "{text}");

    let out = plbbench(&["compare", "--baseline", &f.plb, &f.rr, "--threshold", &above]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("violated"));

    // Absolute limits: retention change in down1, both sides of it.
    let (b, n) = (value(&f.plb, "down1", "F", "retention"), value(&f.rr, "down1", "F", "retention"));
    let d = n - b;
    for (limit, code) in [(d - 0.01, 0), (d + 0.01, 1)] {
        let t = format!("freemium.down1.retention>{limit:+.4}");
        let out = plbbench(&["compare", &f.plb, &f.rr, "--threshold", &t]);
        assert_eq!(out.status.code(), Some(code), "{t}: {}", stderr(&out));
    }
    // Wildcards: every phase of both classes; a copy of a folder changes nothing.
    let copy = f.root.join("plb-copy");
    std::fs::create_dir_all(&copy).unwrap();
    for file in ["summary.json", "phases.csv"] {
        std::fs::copy(Path::new(&f.plb).join(file), copy.join(file)).unwrap();
    }
    let out = plbbench(&[
        "compare",
        &f.plb,
        copy.to_str().unwrap(),
        "--threshold",
        "*.*.p95<=+0%",
        "--threshold",
        "*.*.goodput>=-0%",
    ]);
    let text = ok(&out);
    assert!(text.contains("0 of 20 checks violated"), "5 phases x 2 classes x 2 thresholds: {text}");
}

#[test]
fn bad_input_exits_2_with_one_line_naming_it() {
    let f = fixture("bad_input_ex");
    let missing = f.root.join("nope").to_str().unwrap().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![&f.plb, &f.rr, "--threshold", "premium.down2.p95_ms<10%"],
            "--threshold: `premium.down2.p95_ms<10%`: limit `10%`",
        ),
        (vec![&f.plb, &f.rr, "--threshold", "premium.down2.p95_ms"], "no comparison operator"),
        (vec![&f.plb, &f.rr, "--threshold", "gold.down2.p95_ms<+1%"], "unknown class `gold`"),
        (vec![&f.plb, &f.rr, "--threshold", "premium.down2.speed<+1%"], "unknown metric `speed`"),
        (
            vec![&f.plb, &f.rr, "--threshold", "premium.down7.p95_ms<+1%"],
            "no phase `down7`; it has baseline, down1, down2",
        ),
        (vec![&f.exp1, &f.exp2, "--threshold", "premium.down1.aborted<=+0"], "has no aborted_sessions"),
        (vec![&f.exp1, &f.exp2, "--threshold", "lc/*/*/premium.down1.p95<+1%"], "no cell matches the selector"),
        (vec![&f.plb, "--threshold", "premium.down1.p95<+1%"], "needs a folder to compare"),
        (vec![&f.plb, &missing], "nope: cannot read the folder"),
        (vec![&f.plb, f.root.to_str().unwrap()], "not a run or experiment folder"),
        (vec![&f.plb, &f.rr, "--metrics", "p95,speed"], "--metrics: unknown metric `speed`"),
        (vec![&f.plb, &f.rr, "--format", "yaml"], "--format"),
    ];
    for (args, want) in cases {
        let out = plbbench(&[&["compare"][..], &args].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(err.contains(want), "{args:?}: want `{want}` in {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
    // A summary.json that does not parse names the file.
    let broken = f.root.join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("summary.json"), "{\"phases\": [").unwrap();
    let out = plbbench(&["compare", &f.plb, broken.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("broken/summary.json: does not parse"), "{}", stderr(&out));
}

#[test]
fn json_parses_and_carries_the_deltas() {
    let f = fixture("json_parses_");
    let out = plbbench(&["compare", &f.plb, &f.rr, "--format", "json", "--threshold", "premium.down2.p95<+100000%"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&out)).expect("valid JSON");
    assert_eq!(v["folders"][0]["dir"], f.plb.as_str());
    assert_eq!(v["folders"][0]["baseline"], true);
    assert_eq!(v["folders"][1]["info"]["strategies"][0], "rr");
    assert_eq!(v["violations"], 0);
    assert_eq!(v["checks"].as_array().unwrap().len(), 1);
    let rows = v["groups"][0]["rows"].as_array().unwrap();
    let pd = phases(&f.plb);
    let rd = phases(&f.rr);
    let mut checked = 0;
    for row in rows.iter().filter(|r| !r["class"].is_null()) {
        let key = (row["phase"].as_str().unwrap().to_string(), row["class"].as_str().unwrap().to_string());
        let metric = row["metric"].as_str().unwrap();
        let (Ok(b), Ok(n)) = (pd[&key][metric].parse::<f64>(), rd[&key][metric].parse::<f64>()) else { continue };
        assert_eq!(row["values"][0]["value"].as_f64().unwrap(), b, "{key:?} {metric}");
        assert_eq!(row["values"][1]["value"].as_f64().unwrap(), n, "{key:?} {metric}");
        assert!(row["deltas"][0].is_null());
        let d = &row["deltas"][1];
        assert!((d["abs"].as_f64().unwrap() - (n - b)).abs() < 1e-9, "{key:?} {metric}");
        if b != 0.0 {
            assert!((d["pct"].as_f64().unwrap() - (n / b - 1.0) * 100.0).abs() < 1e-9);
        }
        let better_higher = ["goodput_qps", "retention"].contains(&metric);
        // A change under 2% between single runs is noise (the stated band).
        let pct = if b != 0.0 { ((n / b - 1.0) * 100.0).abs() } else { f64::INFINITY };
        let want = if n == b {
            "same"
        } else if pct < 2.0 {
            "noise"
        } else if metric == "cpu_mean" {
            "changed"
        } else if (n > b) == better_higher {
            "good"
        } else {
            "bad"
        };
        assert_eq!(d["verdict"], want, "{key:?} {metric}: {b} -> {n}");
        checked += 1;
    }
    assert!(checked >= 50, "checked {checked} rows");
}

#[test]
fn markdown_renders_a_table() {
    let f = fixture("markdown_ren");
    let md = ok(&plbbench(&["compare", &f.plb, &f.rr, "--format", "markdown", "--metrics", "goodput,p95_ms"]));
    let lines: Vec<&str> = md.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("| phase | K+ | class | metric | better | A | B | Δ B |"))
        .expect("header");
    assert_eq!(lines[header + 1], "| --- | --- | --- | --- | --- | ---: | ---: | ---: |");
    let rows: Vec<&&str> = lines[header + 2..].iter().take_while(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 5 * 2 * 2, "phases x classes x metrics");
    assert!(rows.iter().all(|r| r.matches(" | ").count() == 7), "{rows:?}");
    assert!(rows.iter().any(|r| r.starts_with("| down2 | 3 | Premium | p95_ms |")));
    assert!(md.contains("- **A** (baseline):"));
    // A relative change is never below -100 %: every phase violates, and
    // the comment lists each violation.
    let out = plbbench(&["compare", &f.plb, &f.rr, "--format", "markdown", "--threshold", "premium.*.p95_ms<-100%"]);
    assert_eq!(out.status.code(), Some(1));
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.contains("#### Thresholds: 5 of 5 checks violated"), "{md}");
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| premium.")).collect();
    assert_eq!(rows.len(), 5, "{md}");
    assert!(
        rows.iter().all(|r| r.ends_with("| `premium.*.p95_ms<-100%` |") && r.contains("limit < -100%")),
        "{rows:?}"
    );
}

#[test]
fn experiments_compare_cell_by_cell_with_a_self_contained_page() {
    let f = fixture("experiments_");
    let html = f.root.join("cmp.html");
    let out = plbbench(&[
        "compare",
        &f.exp1,
        &f.exp2,
        &f.plb,
        "--html",
        html.to_str().unwrap(),
        "--format",
        "json",
        "--threshold",
        "plb/25:75/cascade/premium.down2.p95_ms<+100000%",
    ]);
    let v: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    let groups = v["groups"].as_array().unwrap();
    let sels: Vec<&str> = groups.iter().map(|g| g["selection"].as_str().unwrap()).collect();
    assert_eq!(sels, ["plb/25:75/cascade", "rr/25:75/cascade"]);
    // The run joins only its own cell.
    assert_eq!(groups[0]["columns"][2], "plb/25:75/cascade");
    assert!(groups[1]["columns"][2].is_null());
    let row = groups[0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["phase"] == "down2" && r["class"] == "P" && r["metric"] == "p95_ms")
        .unwrap();
    let cells: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(&f.exp1).join("experiment.json")).unwrap()).unwrap();
    let cell = cells["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["strategy"] == "plb" && c["phase"] == "down2" && c["class"] == "P")
        .unwrap();
    assert_eq!(row["values"][0]["value"], cell["p95_ms"]["median"]);
    assert_eq!(row["values"][0]["q1"], cell["p95_ms"]["q1"]);
    assert_eq!(row["values"][0]["n"], 2);
    assert_eq!(v["checks"].as_array().unwrap().len(), 2, "one check per compared folder");

    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<svg").count(), 2 * 2, "two groups x two classes");
    let stripped = page.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
    for needle in ["http://", "https://", "<link", "<script", " src=", "@import", "url("] {
        assert!(!stripped.contains(needle), "found {needle}");
    }
    assert!(page.contains("All 2 threshold checks hold"));
    let text = page.replace("&#x2f;", "/");
    assert!(text.contains("<h2>rr/25:75/cascade</h2>") && text.contains("interquartile range"));
}
