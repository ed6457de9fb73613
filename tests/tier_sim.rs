//! The simulated tier of routers (`run --routers`, issue 51; docs/scale.md,
//! "Routing on stale counts") through the real binary: every session is
//! placed by the leader or a follower and the books add up to the sessions
//! started; one router writes no tier; the flags are refused with one line
//! and exit status 2 where a tier cannot run.

use std::path::PathBuf;
use std::process::{Command, Output};

fn plbbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plbbench")).args(args).output().expect("run plbbench")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plbbench-tier-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A cascade on the simulator at time scale 0.3 with `extra` flags: its summary.json.
fn summary(name: &str, extra: &[&str]) -> serde_json::Value {
    let dir = tmp(name);
    let mut args = vec!["run", "--cluster", "sim", "-q", "--faults", "cascade", "--time-scale", "0.3"];
    args.extend(["--checks", "warn", "--out", dir.to_str().unwrap()]);
    args.extend_from_slice(extra);
    let o = plbbench(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(html.contains("routers (simulated tier)"), extra.contains(&"--routers"), "the report names the tier");
    s
}

fn started(s: &serde_json::Value) -> u64 {
    s["accounting"].as_array().unwrap().iter().map(|a| a["sessions_started"].as_u64().unwrap()).sum()
}

#[test]
fn every_session_is_placed_by_the_leader_or_a_follower() {
    for (name, quotas) in [("plain", None), ("quotas", Some("--quotas"))] {
        let mut extra = vec!["--routers", "4", "--refresh-ms", "1000"];
        extra.extend(quotas);
        let s = summary(name, &extra);
        let t = &s["tier"];
        assert_eq!((t["routers"].as_u64(), t["refresh_ms"].as_f64()), (Some(4), Some(1000.0)), "{t}");
        assert_eq!(t["quotas"].as_bool(), Some(quotas.is_some()));
        let (leader, followers) =
            (t["leader_admissions"].as_u64().unwrap(), t["follower_admissions"].as_u64().unwrap());
        assert_eq!(leader + followers, started(&s), "{t}");
        let forwarded = t["forwarded"].as_u64().unwrap();
        let own = leader.saturating_sub(forwarded) as f64;
        let asked = (followers + forwarded) as f64;
        assert!(
            followers > 0 && (2.0..4.0).contains(&(asked / own)),
            "three of four clients go through followers: {t}"
        );
        assert!(t["differed"].as_u64().unwrap() > 0, "a 1 s old snapshot misleads some choices: {t}");
        let ok = s["verdicts"].as_array().unwrap().iter().any(|v| v["name"] == "accounting" && v["ok"] == true);
        assert!(ok, "the run's accounting balances");
    }
    let one = summary("one", &[]);
    assert!(one.get("tier").is_none(), "one router, no tier");
}

#[test]
fn a_tier_is_refused_where_it_cannot_run() {
    for (args, want) in [
        (&["--cluster", "sim", "--routers", "0"][..], "--routers: must be from 1 to 64"),
        (&["--cluster", "sim", "--routers", "2", "--refresh-ms", "0"][..], "--refresh-ms: must be from 1"),
        (&["--cluster", "sim", "--quotas"][..], "--quotas: needs a tier"),
        (&["--cluster", "local", "--routers", "2"][..], "--routers: a tier of routers is simulated only"),
        (&["--cluster", "sim", "--routers", "2", "--admission", "modes"][..], "--routers: not with --admission"),
    ] {
        let mut a = vec!["run", "--dry-run"];
        a.extend_from_slice(args);
        let o = plbbench(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want) && err.trim().lines().count() == 1, "{args:?}: {err}");
    }
}
