//! What a killed plbbench left behind (SIGKILL, the OOM killer): the
//! clusters of a local `run`, of `calibrate` and of a docker run record
//! their owner process, and every command first removes those whose owner
//! is gone, so nothing a killed plbbench started outlives the next command.
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
    let dir = crate::cluster::docker::default_state_dir().with_file_name("docker-run");
    match DockerCluster::reap_orphan(&dir) {
        Ok(true) => eprintln!("plbbench: removed the containers a killed plbbench left ({})", dir.display()),
        Ok(false) => {}
        Err(e) => eprintln!("plbbench: warning: cannot remove the containers a killed plbbench left: {e}"),
    }
}
