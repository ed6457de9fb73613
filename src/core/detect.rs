//! How probes turn into the router's view of replica health (design.md §6;
//! docs/resilience.md, "Three detectors, one watch"): a refused connection
//! is proof that a replica is down, but a probe that merely times out may
//! be an overloaded replica, so only several consecutive timeouts remove
//! it. Shared by the simulator and the real driver so both detect alike.

use super::model::ReplicaId;

/// What one health probe saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Connected and answered.
    Ok,
    /// Connection refused or broken: the server is gone.
    Refused,
    /// No answer within the probe deadline.
    Timeout,
}

/// Consecutive probe timeouts before a replica is declared down (default 3).
pub const TIMEOUTS_TO_DOWN: u32 = 3;

/// Per-replica probe history.
#[derive(Clone, Debug)]
pub struct Detector {
    timeouts: Vec<u32>,
}

impl Detector {
    /// A detector for `replicas` replicas, all presumed healthy.
    pub fn new(replicas: usize) -> Detector {
        Detector { timeouts: vec![0; replicas] }
    }

    /// Folds in one probe of replica `r`; returns the health verdict it
    /// supports, or `None` while timeouts are still below the threshold.
    pub fn observe(&mut self, r: ReplicaId, probe: Probe) -> Option<bool> {
        match probe {
            Probe::Ok => {
                self.timeouts[r.idx()] = 0;
                Some(true)
            }
            Probe::Refused => Some(false),
            Probe::Timeout => {
                self.timeouts[r.idx()] += 1;
                (self.timeouts[r.idx()] >= TIMEOUTS_TO_DOWN).then_some(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_is_immediate_timeouts_need_a_run() {
        let mut d = Detector::new(2);
        assert_eq!(d.observe(ReplicaId(0), Probe::Refused), Some(false));
        assert_eq!(d.observe(ReplicaId(1), Probe::Timeout), None);
        assert_eq!(d.observe(ReplicaId(1), Probe::Timeout), None);
        assert_eq!(d.observe(ReplicaId(1), Probe::Ok), Some(true));
        assert_eq!(d.observe(ReplicaId(1), Probe::Timeout), None, "an answer resets the count");
        assert_eq!(d.observe(ReplicaId(1), Probe::Timeout), None);
        assert_eq!(d.observe(ReplicaId(1), Probe::Timeout), Some(false));
    }
}
