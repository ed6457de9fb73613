//! The latencies of one second of a run, for its p95 in timeseries.csv and
//! the status lines. A second's histogram exists only once a query has
//! completed in it and only while records for it can still arrive: once the
//! run is [`SecondLatency::SETTLE_S`] past it, the histogram is folded into
//! its p95, so a run's memory does not grow by a histogram per second
//! (docs/performance.md, "The simulator's cost": a 2,400 s simulated run
//! held 4,800 of them, 70 MiB).

use hdrhistogram::Histogram;

/// The completions' latencies (ms) of one second of one class.
#[derive(Clone, Debug, Default)]
pub enum SecondLatency {
    /// No completion yet.
    #[default]
    Empty,
    /// Still receiving records.
    Open(Histogram<u32>),
    /// Settled: only its p95 is kept.
    Settled(Option<u64>),
}

impl SecondLatency {
    /// How long after a second's end its records can still arrive, seconds:
    /// a record is sent when its query completes, so only a stalled
    /// collector delays it; the status lines look back 5 s.
    pub const SETTLE_S: usize = 60;

    /// Records a completion of `ms`; `false` (and nothing recorded) if the
    /// second has settled, which a record more than [`Self::SETTLE_S`] late
    /// would find.
    pub fn record(&mut self, ms: u64) -> bool {
        if let SecondLatency::Empty = self {
            *self = SecondLatency::Open(Histogram::new(3).expect("3 significant digits are valid"));
        }
        let SecondLatency::Open(h) = self else { return false };
        if h.record(ms).is_err() {
            h.saturating_record(ms);
        }
        true
    }

    /// The p95, ms (`None` without completions).
    pub fn p95(&self) -> Option<u64> {
        match self {
            SecondLatency::Empty => None,
            SecondLatency::Open(h) => (!h.is_empty()).then(|| h.value_at_quantile(0.95)),
            SecondLatency::Settled(p95) => *p95,
        }
    }

    /// Adds this second's latencies to `into`; `false` if it has settled.
    pub fn add_to(&self, into: &mut Histogram<u32>) -> bool {
        match self {
            SecondLatency::Empty => true,
            SecondLatency::Open(h) => {
                into.add(h).expect("same precision");
                true
            }
            SecondLatency::Settled(_) => false,
        }
    }

    /// Keeps only the p95 and frees the histogram.
    pub fn settle(&mut self) {
        *self = SecondLatency::Settled(self.p95());
    }
}

#[cfg(test)]
mod tests {
    use super::SecondLatency;
    use hdrhistogram::Histogram;

    #[test]
    fn a_settled_second_keeps_its_p95_and_refuses_late_records() {
        let mut s = SecondLatency::default();
        assert_eq!(s.p95(), None);
        for ms in 1..=100 {
            assert!(s.record(ms));
        }
        let open_p95 = s.p95();
        assert_eq!(open_p95, Some(95));
        let mut merged = Histogram::<u32>::new(3).unwrap();
        assert!(s.add_to(&mut merged));
        assert_eq!(merged.len(), 100);
        s.settle();
        assert!(matches!(s, SecondLatency::Settled(Some(95))));
        assert_eq!(s.p95(), open_p95);
        assert!(!s.record(5000), "a late record is refused");
        assert_eq!(s.p95(), open_p95);
        assert!(!s.add_to(&mut merged));
        let mut empty = SecondLatency::default();
        empty.settle();
        assert_eq!(empty.p95(), None);
    }
}
