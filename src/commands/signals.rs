//! SIGINT and SIGTERM while a command sets a cluster up: caught into a flag
//! instead of killing plbbench, so the cluster can still be torn down. Used
//! by `run` (before the driver listens for signals itself) and by
//! `cluster up`; apart from both so neither imports the other.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// From now on SIGINT and SIGTERM set the returned flag instead of killing
/// plbbench, so a signal during cluster start-up still lets it tear the
/// cluster down (the driver then listens for signals itself).
pub fn catch_signals() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("plbbench: warning: cannot catch signal {sig}: {e}");
        }
    }
    flag
}
