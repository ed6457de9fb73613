//! The per-second stream of `run --stream FILE` (k6's `--out json`): one
//! JSON line per second of run time, written while the run goes on, so
//! `tail -f | jq` or a dashboard can follow a run without a Prometheus.
//! Pure: this is the file's format; the collector builds each [`Second`]
//! once the second is complete and hands it to the sink the shell gave it
//! (`Collector::stream_to`), and the shell owns the file.
//!
//! When a second is complete: queries are counted in the second they ended
//! (as in timeseries.csv), and a real backend's records reach the collector
//! a moment after they end, so second `k` is written at the sample of
//! second `k + 2`, a whole second of grace, and every second left at the
//! end. The lines' `completed` therefore sum to the summary's totals.

use super::metrics::Second;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_their_type() {
        let l = Line::Second(Second { t_s: 3, phase: "baseline".into(), classes: vec![], replicas: vec![] });
        let json = serde_json::to_string(&l).unwrap();
        assert!(json.starts_with(r#"{"type":"second","t_s":3,"phase":"baseline""#), "{json}");
        assert_eq!(serde_json::from_str::<Line>(&json).unwrap(), l);
    }
}
