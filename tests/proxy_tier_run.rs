//! `run --proxies 3 --proxy-faults failover --faults none` (docs/proxy.md,
//! "A tier of proxies", issue 51 part 2) on a real five-replica local
//! cluster (no replica faults: the 60 s timeline's phases would be shorter
//! than its sessions, and the replica faults have tests of their own): the
//! run's clients go through a tier of three proxy processes; the leader is
//! SIGKILLed mid-run, a follower stopped and both started again. A new
//! leader takes over within seconds at a higher generation, never two
//! lead at once, the killed leader's sessions are the ones lost, every
//! member's routing is counted, every check of the run passes, and no
//! proxy outlives the run. Needs PostgreSQL (scripts/install-postgres.sh).

mod common;
use common::have_postgres;
use common::proxy::{run_within, text, Cluster};
use std::time::Duration;

/// The pids a tier run printed for its proxies.
fn tier_pids(stderr: &str) -> Vec<i32> {
    let line = stderr.lines().find(|l| l.contains("clients go through a tier of 3")).unwrap_or_else(|| {
        panic!("the run names its proxies: {stderr}");
    });
    let pids = line.rsplit_once("(pids ").map(|(_, p)| p.trim_end_matches(')')).unwrap_or_default();
    pids.split(", ").map(|p| p.parse().unwrap()).collect()
}

/// Pids of proxies started again, as the run says.
fn restarted_pids(stderr: &str) -> Vec<i32> {
    stderr.split("started again (pid ").skip(1).map(|t| t.split(')').next().unwrap().parse().unwrap()).collect()
}

fn running(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| text(&c).contains("proxy"))
}

#[test]
fn a_run_through_a_tier_of_proxies_survives_its_leader() {
    if !have_postgres() {
        return;
    }
    let c = Cluster::up();
    let out_dir = c.root.join("tier-run");
    let mut cmd = c.plbbench(&[
        "run",
        "--workload",
        "analytics",
        "--T",
        "120",
        "--duration",
        "60s",
        "--proxies",
        "3",
        "--proxy-faults",
        "failover",
        "--faults",
        "none",
    ]);
    cmd.args(["--raw", "--checks", "warn", "--progress", "lines", "--out", out_dir.to_str().unwrap()]);
    let out = run_within(cmd, Duration::from_secs(240));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "run --proxies 3: {stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    // Every check of the run passes, the tier's and the proxies' too.
    let verdicts = summary["verdicts"].as_array().unwrap();
    let failed: Vec<_> = verdicts.iter().filter(|v| v["ok"] != true).collect();
    assert!(failed.is_empty(), "failed checks: {failed:?}\n{stdout}");
    for name in ["proxy", "proxy tier", "accounting"] {
        assert!(verdicts.iter().any(|v| v["name"] == name), "no {name} verdict: {verdicts:?}");
    }
    let tier = &summary["proxy_tier"];
    assert_eq!(tier["proxies"], 3, "{tier}");
    assert_eq!(tier["two_leaders_s"].as_f64(), Some(0.0), "{tier}");
    assert_eq!(tier["generations_rise"], true, "{tier}");
    // The leader killed at 36 s (180 s scaled by 0.2): one failover,
    // within a few seconds, to another member at a higher generation.
    let failovers = tier["failovers"].as_array().unwrap();
    assert_eq!(failovers.len(), 1, "{tier}");
    let f = &failovers[0];
    let lost_s = f["lost_s"].as_f64().unwrap();
    assert!((35.0..38.0).contains(&lost_s), "the leader was lost at {lost_s} s: {f}");
    let took = f["took_ms"].as_f64().expect("a new leader");
    assert!(took < 5000.0, "failover took {took} ms: {f}");
    assert_ne!(f["next_peer"], f["lost_peer"], "{f}");
    let reigns = tier["reigns"].as_array().unwrap();
    assert_eq!(reigns.len(), 2, "{tier}");
    assert_eq!(reigns[0]["ended"], "killed", "{tier}");
    assert_eq!(reigns[1]["ended"], "run end", "{tier}");
    // Every member routed sessions; the killed leader and the stopped
    // follower each ran two processes; the sessions lost mid-session
    // through the killed leader are no more than it held.
    let members = tier["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    for m in members {
        assert!(m["routed"].as_u64().unwrap() > 0 && m["sessions"].as_u64().unwrap() > 0, "{m}");
        assert!(m["stale"].as_u64().unwrap() <= m["routed"].as_u64().unwrap(), "{m}");
    }
    let killed = members.iter().find(|m| m["peer"] == f["lost_peer"]).unwrap();
    assert_eq!(killed["processes"], 2, "{killed}");
    let held = killed["open_when_ended"].as_u64().expect("its last word");
    assert!(killed["lost"].as_u64().unwrap() <= held + 2, "{killed}");
    assert_eq!(members.iter().filter(|m| m["processes"] == 2).count(), 2, "{tier}");
    // The run's events say it: the kill, the new leader, the restarts.
    let events = std::fs::read_to_string(out_dir.join("events.csv")).unwrap();
    assert!(events.contains("(the leader) killed with SIGKILL"), "{events}");
    assert!(events.contains("leads (generation 2)"), "{events}");
    assert!(events.contains("(a follower) stopped with SIGTERM"), "{events}");
    assert_eq!(events.matches("started again (pid").count(), 2, "{events}");
    // No proxy outlives the run.
    let pids: Vec<i32> = tier_pids(&stderr).into_iter().chain(restarted_pids(&stderr)).collect();
    assert_eq!(pids.len(), 5, "{stderr}");
    for pid in pids {
        assert!(!running(pid), "proxy {pid} outlived the run");
    }
}
