//! The nightly performance gate's judge (ci/perf-gate.py) on figure files
//! written here: a figure worse than its baseline beyond the noise band of
//! the baseline's repeats fails with the figure and its command, one within
//! the band holds, a figure the night did not measure fails, bad input is
//! one line naming the field with exit status 2, and the headline table
//! lands between the markers of the docs file it is given.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const HEAD: &str = "figure,unit,better,repeat,value,command\n";

/// A fresh folder of this test's own (the tests run in parallel).
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("plbbench-perf-gate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rows(figure: &str, better: &str, values: &[f64]) -> String {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{figure},us,{better},{},{v},\"bash measure-{figure}.sh\"\n", i + 1))
        .collect()
}

fn gate(d: &Path, base: &str, night: &str, extra: &[&str]) -> Output {
    std::fs::write(d.join("base.csv"), format!("{HEAD}{base}")).unwrap();
    std::fs::write(d.join("night.csv"), format!("{HEAD}{night}")).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/perf-gate.py");
    Command::new("python3").arg(script).arg(d.join("base.csv")).arg(d.join("night.csv")).args(extra).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_cost_beyond_the_baselines_noise_band_fails_and_one_within_it_holds() {
    let d = dir("band");
    // Baseline spread (11 - 10) / 10.5 = 9.5%: the limit is 10.5 x 1.095 = 11.5.
    let base = rows("proxy.cpu_ratio.S.c16", "lower", &[10.0, 10.5, 11.0]);
    let o = gate(&d, &base, &rows("proxy.cpu_ratio.S.c16", "lower", &[11.2, 11.4, 11.0]), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = gate(&d, &base, &rows("proxy.cpu_ratio.S.c16", "lower", &[11.8, 11.7, 12.0]), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("REGRESSION: proxy.cpu_ratio.S.c16") && err.contains("bash measure-proxy.cpu_ratio.S.c16.sh"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("| proxy.cpu_ratio.S.c16 |"));

    // A throughput regresses downwards; the band never drops below 5%.
    let base = rows("generator.qps_ratio.prepared.c16", "higher", &[1.0, 1.0, 1.0]);
    let o = gate(&d, &base, &rows("generator.qps_ratio.prepared.c16", "higher", &[0.96, 0.97, 0.96]), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = gate(&d, &base, &rows("generator.qps_ratio.prepared.c16", "higher", &[0.93, 0.94, 0.93]), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_figure_the_night_did_not_measure_fails() {
    let d = dir("missing");
    let base = rows("a", "lower", &[1.0, 1.0]) + &rows("b", "lower", &[1.0, 1.0]);
    let o = gate(&d, &base, &rows("a", "lower", &[1.0]), &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("MISSING: b was not measured; measure it with: bash measure-b.sh"), "{}", stderr(&o));
}

#[test]
fn bad_input_is_one_line_naming_the_field() {
    let d = dir("bad");
    let o = gate(&d, &rows("a", "lower", &[1.0]), "a,us,lower,1,fast,\"x\"\n", &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("field `value`") && err.trim().lines().count() == 1, "{err}");
    let o = gate(&d, &rows("a", "lower", &[1.0]), "a,us,sideways,1,1,\"x\"\n", &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("field `better`"), "{}", stderr(&o));
}

#[test]
fn the_headline_table_is_written_between_the_docs_markers() {
    let d = dir("docs");
    let doc = d.join("performance.md");
    std::fs::write(&doc, "# Perf\n\nbefore\n<!-- perf-gate:begin -->\nold table\n<!-- perf-gate:end -->\nafter\n")
        .unwrap();
    let night = rows("generator.cpu_ratio.simple.c64", "lower", &[0.7, 0.75, 0.72]);
    let o = gate(&d, &night, &night, &["--docs", doc.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = std::fs::read_to_string(&doc).unwrap();
    assert!(
        !text.contains("old table") && text.starts_with("# Perf\n\nbefore\n") && text.ends_with("after\n"),
        "{text}"
    );
    assert!(
        text.contains("| generator.cpu_ratio.simple.c64 | 0.72 [0.7-0.75] n=3 us |") && text.contains("<= 0.8: met"),
        "{text}"
    );
}
