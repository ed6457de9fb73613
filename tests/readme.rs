//! The README's quick try-out runs as printed: its simulator run, the
//! second run with `--strategy rr`, and the compare of the two, through the
//! real binary, with `/tmp/try` moved to a temporary folder. Each command
//! is looked up in README.md verbatim first, so an edit of the README that
//! is not run here fails this test, and so does a claim it makes about the
//! output (`checks: all 6 passed`).

use std::path::PathBuf;
use std::process::Command;

const README: &str = include_str!("../README.md");

fn tmp() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plbbench-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs a README command line (`target/release/plbbench ...`) with
/// `/tmp/try` replaced by `dir`; returns stdout.
fn run(line: &str, dir: &str) -> String {
    assert!(README.contains(line), "the README no longer says `{line}`: update this test with it");
    let line = line.replace("/tmp/try", dir);
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("target/release/plbbench"));
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench")).args(words).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "`{line}` exited {:?}:\n{stderr}", out.status.code());
    stdout.into_owned()
}

#[test]
fn the_quick_try_out_runs_as_printed() {
    let dir = tmp();
    let base = dir.join("try");
    let base = base.to_str().unwrap();
    let first = "target/release/plbbench run --cluster sim --strategy plb --faults cascade --out /tmp/try";
    let out = run(first, base);
    assert!(README.contains("`checks: all 6 passed`"), "the README's claim changed");
    assert!(out.contains("checks: all 6 passed"), "{out}");
    assert!(README.contains("T=1000\nis 2.00x the 500 clients") && out.contains("T=1000 is 2.00x N*=500"), "{out}");
    assert!(out.contains("\nbaseline logins: wait p95 P "), "{out}");
    assert!(std::path::Path::new(base).join("report.html").is_file());
    assert!(README.contains("`--strategy rr --out /tmp/try-rr`"));
    let again = first.replace("--strategy plb", "--strategy rr").replace("--out /tmp/try", "--out /tmp/try-rr");
    assert!(run_unchecked(&again, base).contains("checks: all"), "the rr run");
    let cmp = run("target/release/plbbench compare /tmp/try /tmp/try-rr", base);
    assert!(cmp.contains("baseline") && cmp.contains("down2"), "{cmp}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// [`run`] for a line the README gives in parts (checked by the caller).
fn run_unchecked(line: &str, dir: &str) -> String {
    let line = line.replace("/tmp/try", dir);
    let out = Command::new(env!("CARGO_BIN_EXE_plbbench")).args(line.split_whitespace().skip(1)).output().unwrap();
    assert!(out.status.success(), "`{line}`: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
