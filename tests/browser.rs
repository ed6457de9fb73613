//! Browser check (docs/testing.md): the report.html of a run and of an experiment,
//! a compare page and the archive page open in a real headless Chromium
//! (Debian's `chromium`) 1280 px wide with no console error, no failed
//! resource, every figure's chart drawn at a real size and no table
//! scrolling sideways; a screenshot of each is saved under
//! `target/browser-check/`.
//!
//! The page is probed through a copy beside it (so relative links resolve)
//! with two small scripts added: one first in `<head>` that records errors
//! (`error` events, including failed loads, and `console.error`), one at
//! the end that measures every figure's SVG after layout and writes the
//! findings into the DOM, which `--dump-dom` returns. scripts/setup.sh
//! installs Chromium; set PLBBENCH_SKIP_BROWSER=1 to skip (loudly) on a
//! machine without it.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a Chromium invocation may take before it is killed.
const CHROME_LIMIT: Duration = Duration::from_secs(90);

const RECORD_ERRORS: &str = r#"<script>
window.__plbErrors = [];
window.addEventListener('error', function (e) {
  var t = e.target || {};
  window.__plbErrors.push(e.message || ('failed to load ' + (t.src || t.href || t.tagName)));
}, true);
(function () { var ce = console.error; console.error = function () {
  window.__plbErrors.push(Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments); }; })();
</script>"#;

const MEASURE: &str = r#"<script>
window.addEventListener('load', function () {
  var figures = Array.prototype.slice.call(document.querySelectorAll('figure'));
  var bad = figures.filter(function (f) {
    var s = f.querySelector('svg');
    if (!s) return true;
    var r = s.getBoundingClientRect();
    return !(r.width > 200 && r.height > 100) || s.querySelectorAll('rect, polyline, path, text').length < 10;
  }).map(function (f) { return f.id || '(no id)'; });
  var wide = Array.prototype.slice.call(document.querySelectorAll('.wide')).filter(function (w) {
    return w.scrollWidth > w.clientWidth + 1;
  }).map(function (w) { var s = w.closest('section'); return (s && s.id) || '(no section)'; });
  var out = document.createElement('pre');
  out.id = 'plb-check';
  var mark = ['PLB', 'RESULT'].join('');
  out.textContent = mark + JSON.stringify({ figures: figures.length, bad: bad, errors: window.__plbErrors, overflow: wide }) + mark;
  document.body.appendChild(out);
});
</script>"#;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            if dir.join(name).is_file() {
                return Some(dir.join(name));
            }
        }
    }
    if std::env::var_os("PLBBENCH_SKIP_BROWSER").is_some() {
        eprintln!("SKIPPING the browser check: no chromium on PATH and PLBBENCH_SKIP_BROWSER is set");
        return None;
    }
    panic!("chromium not found: run scripts/install-chromium.sh as root, or set PLBBENCH_SKIP_BROWSER=1");
}

/// Runs Chromium headless on `url` with `args`, in its own process group,
/// killed (with every child) after [`CHROME_LIMIT`].
fn headless(bin: &Path, profile: &Path, args: &[String], url: &str) -> Output {
    let child = Command::new(bin)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start chromium");
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let started = Instant::now();
    let out = std::thread::spawn(move || child.wait_with_output().expect("chromium output"));
    while !out.is_finished() {
        if started.elapsed() > CHROME_LIMIT {
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
            panic!("chromium still running after {CHROME_LIMIT:?} on {url}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    out.join().unwrap()
}

/// What the probe found on one page.
#[derive(Debug, serde::Deserialize)]
struct Check {
    figures: usize,
    bad: Vec<String>,
    errors: Vec<String>,
    /// Sections whose table scrolls sideways at the window's width.
    overflow: Vec<String>,
}

/// Opens `page` through a probe copy at 1280 px wide, checks it, and
/// screenshots the page itself to `shot`. `min_figures` guards against a
/// page that lost its charts; no table may scroll sideways.
fn check_page(bin: &Path, page: &Path, min_figures: usize, shot: &Path) {
    let html = std::fs::read_to_string(page).unwrap();
    let source_figures = html.matches("<figure").count();
    assert!(
        source_figures >= min_figures,
        "{}: {source_figures} figures, expected at least {min_figures}",
        page.display()
    );
    let probe = page.with_file_name("browser-probe.html");
    let probed = html.replacen("<head>", &format!("<head>{RECORD_ERRORS}"), 1).replacen(
        "</body>",
        &format!("{MEASURE}</body>"),
        1,
    );
    std::fs::write(&probe, probed).unwrap();
    let profile = page.with_file_name("chromium-profile");
    let url = format!("file://{}", probe.display());
    let args = ["--virtual-time-budget=10000".into(), "--window-size=1280,4000".into(), "--dump-dom".into()];
    let out = headless(bin, &profile, &args, &url);
    let dom = String::from_utf8_lossy(&out.stdout);
    let json = dom.split("PLBRESULT").nth(1).unwrap_or_else(|| {
        panic!(
            "{}: the probe did not report (exit {:?}); stderr:\n{}",
            page.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let check: Check = serde_json::from_str(&json.replace("&quot;", "\"")).expect("probe JSON");
    assert_eq!(check.figures, source_figures, "{}: figures in the DOM vs the file", page.display());
    assert!(check.bad.is_empty(), "{}: figures without a drawn chart: {:?}", page.display(), check.bad);
    assert!(check.errors.is_empty(), "{}: errors in the browser: {:?}", page.display(), check.errors);
    assert!(check.overflow.is_empty(), "{}: tables wider than 1280 px: {:?}", page.display(), check.overflow);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains("CONSOLE") || l.contains("Uncaught")).collect();
    assert!(console.is_empty(), "{}: console messages: {console:?}", page.display());
    std::fs::remove_file(&probe).unwrap();
    let url = format!("file://{}", page.display());
    let _ = std::fs::remove_file(shot);
    let args = [format!("--screenshot={}", shot.display()), "--window-size=1280,4000".into()];
    let out = headless(bin, &profile, &args, &url);
    let size = std::fs::metadata(shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 20_000,
        "{}: screenshot of {size} bytes; stderr:\n{}",
        shot.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&profile);
}

/// Runs `plbbench ARGS --checks warn`: the pages are under test here, not
/// the runs' validity (a light T=300 baseline can fail the trend check).
fn plbbench(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).args(["--checks", "warn"]).output().unwrap();
    assert!(out.status.success(), "plbbench {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn run_and_experiment_reports_render_in_chromium() {
    let Some(bin) = chromium() else { return };
    let root = std::env::temp_dir().join(format!("plbbench-browser-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../browser-check");
    std::fs::create_dir_all(&shots).unwrap();
    let run = root.join("run");
    plbbench(&["run", "--cluster", "sim", "--faults", "cascade", "--T", "300", "-q", "--out", run.to_str().unwrap()]);
    check_page(&bin, &run.join("report.html"), 5, &shots.join("run.png"));
    let exp = root.join("experiment");
    let grid = ["--strategies", "plb,rr-split,rr", "--mixes", "25:75,50:50", "--repeat", "2", "--T", "300"];
    let mut args = vec!["experiment", "--cluster", "sim", "-q", "--out", exp.to_str().unwrap()];
    args.extend(grid);
    plbbench(&args);
    // RQ1, Fig. 4 for two mixes and two classes, Fig. 5, Fig. 6.
    check_page(&bin, &exp.join("report.html"), 7, &shots.join("experiment.png"));
    let html = std::fs::read_to_string(exp.join("report.html")).unwrap();
    let unescape =
        |h: &str| h.replace("&#x2f;", "/").replace("&#x27;", "'").replace("&quot;", "\"").replace("&amp;", "&");
    let hrefs: Vec<String> = html.split("href=\"").skip(1).filter_map(|s| s.split('"').next()).map(unescape).collect();
    let runs = hrefs.iter().filter(|h| h.starts_with("runs/")).count();
    assert!(runs >= 24, "{runs} links to runs");
    for href in hrefs.iter().filter(|h| !h.starts_with('#')) {
        assert!(exp.join(href).is_file(), "broken link {href}");
    }
    // The compare page of the run against a second one, and the archive
    // page of all three folders.
    let run2 = root.join("run-rr");
    plbbench(&[
        "run",
        "--cluster",
        "sim",
        "--faults",
        "cascade",
        "--T",
        "300",
        "--strategy",
        "rr",
        "-q",
        "--out",
        run2.to_str().unwrap(),
    ]);
    let cmp = root.join("compare.html");
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .args(["compare", run.to_str().unwrap(), run2.to_str().unwrap(), "--html", cmp.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "compare: {}", String::from_utf8_lossy(&out.stderr));
    check_page(&bin, &cmp, 1, &shots.join("compare.png"));
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench"))
        .args(["archive", "--root", root.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "archive: {}", String::from_utf8_lossy(&out.stderr));
    check_page(&bin, &root.join("index.html"), 0, &shots.join("archive.png"));
    eprintln!("screenshots in {}", shots.canonicalize().unwrap().display());
    let _ = std::fs::remove_dir_all(&root);
}
