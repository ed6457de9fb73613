//! The report archive through the real binary: `plbbench archive --root`
//! over two sim runs and a sim experiment lists all three newest first (by
//! the recorded start, not the folder time), with links that resolve; `run`
//! refreshes `reports/index.html` when its folder lies under `reports/`,
//! leaves it alone otherwise, and only warns when the refresh fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn plbbench_in(cwd: &Path, args: &[&str]) -> Output {
    let cmd = Command::new(env!("CARGO_BIN_EXE_plbbench")).current_dir(cwd).args(args).args(checks_warn(args)).output();
    cmd.expect("run plbbench")
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

fn ok(o: Output) -> Output {
    assert!(o.status.success(), "exit {:?}: {}", o.status.code(), String::from_utf8_lossy(&o.stderr));
    o
}

/// A temporary folder removed on drop.
struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Tmp {
        let dir = std::env::temp_dir().join(format!("plbbench-archive-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Tmp(dir)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const RUN: [&str; 8] = ["run", "--cluster", "sim", "--quiet", "--T", "100", "--time-scale", "0.2"];

/// Replaces `environment.started_utc` of a run's summary.json.
fn set_started(summary: &Path, when: &str) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
    v["environment"]["started_utc"] = when.into();
    std::fs::write(summary, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// The `href`s of the archive's entries, in page order, percent-decoded.
fn links(html: &str) -> Vec<String> {
    let rows = &html[html.find("<tbody>").expect("a table")..];
    rows.split("<a href=\"")
        .skip(1)
        .map(|s| {
            let raw = &s[..s.find('"').unwrap()];
            let mut out = Vec::new();
            let b = raw.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' {
                    out.push(u8::from_str_radix(&raw[i + 1..i + 3], 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            String::from_utf8(out).unwrap()
        })
        .collect()
}

#[test]
fn archive_lists_runs_and_experiments_newest_first_with_working_links() {
    let tmp = Tmp::new("list");
    let root = tmp.0.join("reports");
    let out = |rel: &str| root.join(rel).to_str().unwrap().to_string();
    // Written in this order, so folder times would give the opposite order.
    ok(plbbench_in(&tmp.0, &[&RUN[..], &["--strategy", "plb", "--out", &out("old-plb-25:75")]].concat()));
    ok(plbbench_in(&tmp.0, &[&RUN[..], &["--strategy", "rr", "--out", &out("examples/new-rr")]].concat()));
    let exp = [
        "experiment",
        "--cluster",
        "sim",
        "--quiet",
        "--strategies",
        "plb,lc",
        "--mixes",
        "50:50",
        "--faults",
        "premium-fault",
    ];
    let exp_out = out("nested/deeper/exp");
    ok(plbbench_in(
        &tmp.0,
        &[&exp[..], &["--repeat", "1", "--T", "100", "--time-scale", "0.2", "--out", &exp_out]].concat(),
    ));
    set_started(&root.join("old-plb-25:75/summary.json"), "2021-03-01T10:00:00Z");
    set_started(&root.join("examples/new-rr/summary.json"), "2023-03-01T10:00:00Z");
    set_started(&root.join("nested/deeper/exp/runs/premium-fault-50-50-plb-r1/summary.json"), "2022-03-01T10:00:00Z");
    // A temporary folder of a run in progress is not listed.
    std::fs::create_dir_all(root.join(".x.tmp-1")).unwrap();
    std::fs::copy(root.join("old-plb-25:75/summary.json"), root.join(".x.tmp-1/summary.json")).unwrap();

    // A folder this version cannot read is named on stderr, not listed.
    std::fs::create_dir_all(root.join("broken")).unwrap();
    std::fs::write(root.join("broken/summary.json"), "{").unwrap();

    let o = ok(plbbench_in(&tmp.0, &["archive", "--root", root.to_str().unwrap()]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("(3 folders)"), "{err}");
    let skipped: Vec<&str> = err.lines().filter(|l| l.starts_with("plbbench: archive: skipped ")).collect();
    assert_eq!(skipped.len(), 1, "{err}");
    assert!(skipped[0].contains("broken/summary.json") && skipped[0].contains("does not parse"), "{err}");
    let html = std::fs::read_to_string(root.join("index.html")).unwrap();
    let links = links(&html);
    assert_eq!(
        links,
        ["./examples/new-rr/report.html", "./nested/deeper/exp/report.html", "./old-plb-25:75/report.html"],
        "newest first by recorded start"
    );
    for l in &links {
        assert!(root.join(l).is_file(), "{l} does not resolve");
    }
    for when in ["2023-03-01 10:00:00", "2022-03-01 10:00:00", "2021-03-01 10:00:00"] {
        assert!(html.contains(when), "{when}");
    }
    assert_eq!(html.matches("<tr class=\"entry\">").count(), 3);
    assert!(html.contains("figures: medians of 50:50, premium-fault"));
    assert!(html.contains("<span class=\"label\">plb:</span>") && html.contains("<span class=\"label\">lc:</span>"));
    assert!(html.contains("2 runs") && html.contains("down1 (K+=4)"));
    let no_svg_ns = html.replace(r#"xmlns="http://www.w3.org/2000/svg""#, "");
    for needle in ["http://", "https://", "<link", "<script", " src="] {
        assert!(!no_svg_ns.contains(needle), "found {needle}");
    }
    // The experiment's own runs are inside its entry, not listed one by one.
    assert!(!html.contains("premium-fault-50-50-plb-r1"));

    let missing = plbbench_in(&tmp.0, &["archive", "--root", tmp.0.join("none").to_str().unwrap()]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--root:"));
}

#[test]
fn runs_under_reports_refresh_the_index_and_a_failed_refresh_only_warns() {
    let tmp = Tmp::new("hook");
    let index = tmp.0.join("reports/index.html");
    ok(plbbench_in(&tmp.0, &[&RUN[..], &["--out", "elsewhere/a"]].concat()));
    assert!(!index.exists(), "a run outside reports/ leaves the archive alone");
    ok(plbbench_in(&tmp.0, &[&RUN[..], &["--out", "reports/b"]].concat()));
    let html = std::fs::read_to_string(&index).expect("index written after the run");
    assert!(html.contains("./b/report.html"));
    let exp =
        ["experiment", "--cluster", "sim", "--quiet", "--strategies", "rr", "--mixes", "25:75", "--faults", "cascade"];
    ok(plbbench_in(
        &tmp.0,
        &[&exp[..], &["--repeat", "1", "--T", "100", "--time-scale", "0.2", "--out", "reports/e"]].concat(),
    ));
    let html = std::fs::read_to_string(&index).unwrap();
    assert!(html.contains("./b/report.html") && html.contains("./e/"), "the experiment refreshed it too");

    // index.html that cannot be replaced: the run still succeeds, with a warning.
    std::fs::remove_file(&index).unwrap();
    std::fs::create_dir_all(index.join("blocker")).unwrap();
    let o = ok(plbbench_in(&tmp.0, &[&RUN[..], &["--out", "reports/c"]].concat()));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: cannot refresh reports/index.html"), "{err}");
    assert!(tmp.0.join("reports/c/summary.json").is_file());
}

/// The folders under `dir` that compare reads: each holding summary.json,
/// experiment.json or experiment.csv (an experiment's runs included).
fn result_folders(dir: &Path, out: &mut Vec<PathBuf>) {
    if ["summary.json", "experiment.json", "experiment.csv"].iter().any(|f| dir.join(f).is_file()) {
        out.push(dir.to_path_buf());
    }
    let mut children: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    children.sort();
    for c in children.into_iter().filter(|c| c.is_dir()) {
        result_folders(&c, out);
    }
}

/// Results stay readable (design.md §5): every folder committed under
/// reports/examples/, whichever version wrote it, compares (against
/// itself, as JSON) and is listed by archive with nothing skipped; a
/// summary.json from a newer plbbench is refused with one line naming the
/// field, not misread.
#[test]
fn every_committed_example_folder_compares_and_archives() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples");
    let mut folders = Vec::new();
    result_folders(&examples, &mut folders);
    // Every format version and kind is there (report::summary's test checks it).
    assert!(folders.len() >= 100, "found {} folders", folders.len());
    let mut bad = Vec::new();
    for f in &folders {
        let d = f.to_str().unwrap();
        let o = plbbench_in(&examples, &["compare", d, d, "--format", "json"]);
        let parsed = serde_json::from_slice::<serde_json::Value>(&o.stdout);
        if !o.status.success() || parsed.is_err() {
            bad.push(format!("{d}: exit {:?}: {}", o.status.code(), String::from_utf8_lossy(&o.stderr)));
        }
    }
    assert!(bad.is_empty(), "{} of {} folders do not compare:\n{}", bad.len(), folders.len(), bad.join("\n"));

    // archive writes index.html into its root: a copy of the examples.
    let tmp = Tmp::new("examples");
    let copy = tmp.0.join("examples");
    copy_tree(&examples, &copy);
    let o = ok(plbbench_in(&tmp.0, &["archive", "--root", "examples"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("skipped"), "{err}");
    let html = std::fs::read_to_string(copy.join("index.html")).unwrap();
    for top in std::fs::read_dir(&examples).unwrap().flatten().filter(|e| e.path().is_dir()) {
        let name = top.file_name().into_string().unwrap();
        assert!(html.contains(&format!("./{name}/")), "archive does not list {name}");
    }

    let newer = tmp.0.join("newer");
    std::fs::create_dir_all(&newer).unwrap();
    let run = folders.iter().find(|f| f.join("summary.json").is_file()).unwrap();
    let text = std::fs::read_to_string(run.join("summary.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(newer.join("summary.json"), v.to_string()).unwrap();
    let o = plbbench_in(&tmp.0, &["compare", "newer"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("field `schema_version`: 99 is newer") && err.trim().lines().count() == 1, "{err}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| match e.file_type().unwrap().is_dir() {
            true => bytes_under(&e.path()),
            false => e.metadata().unwrap().len(),
        })
        .sum()
}

/// The committed reports stay under 15 MB (issue 50), so a clone stays
/// quick: a new example that pushes them over is packed first
/// (scripts/pack-examples.py, docs/manual.md "What reports/examples/
/// keeps"). Only the examples are counted: a developer's own runs also
/// land under reports/.
#[test]
fn committed_examples_stay_under_fifteen_megabytes() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("reports/examples");
    let bytes = bytes_under(&examples);
    assert!(
        bytes < 15_000_000,
        "reports/examples holds {bytes} bytes: pack with python3 scripts/pack-examples.py FOLDER"
    );
}
