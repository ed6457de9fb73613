//! The per-second stream of `run --stream FILE` (k6's `--out json`): one
//! JSON line per second of run time, written while the run goes on, so
//! `tail -f | jq` or a dashboard can follow a run without a Prometheus.
//! Pure: the collector builds each [`Second`] once the second is complete
//! and hands it to the [`Sink`] the shell gave it; the shell owns the file.
//!
//! When a second is complete: queries are counted in the second they ended
//! (as in timeseries.csv), and a real backend's records reach the collector
//! a moment after they end, so second `k` is written at the sample of
//! second `k + 2`, a whole second of grace, and every second left at the
//! end. The lines' `completed` therefore sum to the summary's totals.

use super::metrics::{ReplicaRow, SeriesRow};
use serde::{Deserialize, Serialize};

/// One line of the stream file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Line {
    /// The first line: what is running.
    Run(Header),
    /// Every later line: one second of the run.
    Second(Second),
}

/// What the stream is of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The stream's format version (as summary.json's).
    pub schema_version: u32,
    /// The strategy variant, as summary.json's settings name it.
    pub strategy: String,
    /// `P:F`.
    pub mix: String,
    /// Replicas K.
    pub replicas: usize,
    /// Planned run length, s.
    pub duration_s: f64,
    /// Where the sessions run (`sim`, `local`, `docker`, `external`).
    pub cluster: String,
}

/// One second `[t_s, t_s + 1)` of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Second {
    /// Its start, s from the run's start.
    pub t_s: u32,
    /// The phase it starts in.
    pub phase: String,
    /// Per class, timeseries.csv's row for this second (p95 in whole ms).
    pub classes: Vec<SeriesRow>,
    /// Every replica at the sample that ends the second (its CPU fraction
    /// covers the second), replicas.csv's rows; empty if none was taken.
    pub replicas: Vec<ReplicaRow>,
}

/// Where the collector sends each complete second.
pub type Sink = Box<dyn FnMut(&Second) + Send>;

/// The seconds to write when the sample of second `sampled` arrives, given
/// that every second before `next` is written: `next..sampled - 1`.
pub fn due(next: usize, sampled: usize) -> std::ops::Range<usize> {
    next..sampled.saturating_sub(1).max(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_is_written_one_second_after_it_ends() {
        assert_eq!(due(0, 0), 0..0);
        assert_eq!(due(0, 1), 0..0, "second 0 just ended: its last records may still be on the way");
        assert_eq!(due(0, 2), 0..1);
        assert_eq!(due(1, 5), 1..4, "a late sample catches up");
        assert_eq!(due(4, 3), 4..4, "never backwards");
    }

    #[test]
    fn lines_carry_their_type() {
        let l = Line::Second(Second { t_s: 3, phase: "baseline".into(), classes: vec![], replicas: vec![] });
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.starts_with(r#"{"type":"second","t_s":3,"phase":"baseline""#), "{json}");
        assert_eq!(serde_json::from_str::<Line>(&json).unwrap(), l);
    }
}
