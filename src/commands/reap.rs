//! What a killed plbbench left behind (SIGKILL, the OOM killer): the
//! clusters of a local `run`, of `calibrate` and of a docker run record
//! their owner process, and every command first removes those whose owner
//! is gone, so nothing a killed plbbench started outlives the next command;
//! so are the temporary folders of a run's proxies (configs and logs),
//! named for the run's process.
//! A cluster kept on purpose (`cluster up`) and one whose owner still runs
//! are left alone; the docker engine is asked only for an orphan.

use crate::cluster::docker::DockerCluster;
use crate::cluster::local::{default_state_dir, LocalCluster};

/// Removes orphaned run and calibration clusters, saying so on stderr; a
/// failure is a warning (the command itself goes on).
pub fn orphans() {
    let base = default_state_dir();
    for name in ["run", "calibrate"] {
        let dir = base.with_file_name(name);
        match LocalCluster::reap_orphan(&dir) {
            Ok(true) => eprintln!("plbbench: removed the cluster a killed plbbench left in {}", dir.display()),
            Ok(false) => {}
            Err(e) => eprintln!("plbbench: warning: cannot remove the leftovers in {}: {e}", dir.display()),
        }
    }
    // Silently: a temporary folder is no running thing, and a command's
    // error stays one line (a test that fed a bad flag while another killed
    // a run got two).
    let alive = |pid: u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
    for dir in stale_proxy_folders(&std::env::temp_dir(), alive) {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let dir = crate::cluster::docker::default_state_dir().with_file_name("docker-run");
    match DockerCluster::reap_orphan(&dir) {
        Ok(true) => eprintln!("plbbench: removed the containers a killed plbbench left ({})", dir.display()),
        Ok(false) => {}
        Err(e) => eprintln!("plbbench: warning: cannot remove the containers a killed plbbench left: {e}"),
    }
}

/// The start of the name of a run's proxy folder, then the run's pid and a
/// dash (`commands::run::proxies`).
pub const PROXY_FOLDER: &str = "plbbench-via-proxy-";

/// The proxy folders in `tmp` whose run (the pid in their name) is not
/// `alive`.
fn stale_proxy_folders(tmp: &std::path::Path, alive: impl Fn(u32) -> bool) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix(PROXY_FOLDER).and_then(|r| r.split_once('-')).and_then(|(p, _)| p.parse().ok());
            pid.is_some_and(|p| !alive(p))
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only folders named for a run that is gone are stale; a live run's,
    /// an older unnamed one and other files stay.
    #[test]
    fn a_dead_runs_proxy_folder_is_stale() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["plbbench-via-proxy-123-abc", "plbbench-via-proxy-456-def", "plbbench-via-proxy-xyz", "other"] {
            std::fs::create_dir(tmp.path().join(name)).unwrap();
        }
        let stale = stale_proxy_folders(tmp.path(), |pid| pid == 456);
        assert_eq!(stale, vec![tmp.path().join("plbbench-via-proxy-123-abc")]);
    }
}
