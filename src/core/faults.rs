//! Fault schedules (design.md §1, §3): the built-in presets and schedule
//! files, parsed from `&str` with the same parser, validated against the
//! replica count and the run's timeline, then time-scaled.

use super::model::{parse_replica, Action, FaultEvent};
use super::workload::from_toml;
use serde::Deserialize;

/// Names of the built-in presets, for `--help` and errors.
pub const PRESETS: [&str; 5] = ["premium-fault", "cascade", "gray-pause", "flapping", "none"];

/// The TOML text of a preset, or `None` if `name` is not one.
pub fn preset(name: &str) -> Option<&'static str> {
    match name {
        "premium-fault" => Some(
            "# RQ1: a Premium-side fail-stop fault.\n\
             [[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"down\"\n\
             [[event]]\nt_s = 210\nreplica = \"r1\"\naction = \"rejoin\"\n",
        ),
        "cascade" => Some(
            "# RQ2/RQ3: two Premium-side faults in sequence, then sequential rejoin.\n\
             [[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"down\"\n\
             [[event]]\nt_s = 150\nreplica = \"r2\"\naction = \"down\"\n\
             [[event]]\nt_s = 210\nreplica = \"r1\"\naction = \"rejoin\"\n\
             [[event]]\nt_s = 240\nreplica = \"r2\"\naction = \"rejoin\"\n",
        ),
        "gray-pause" => Some(
            "# Gray failure: a Premium replica stays alive but makes no progress.\n\
             [[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"pause\"\n\
             [[event]]\nt_s = 210\nreplica = \"r1\"\naction = \"resume\"\n",
        ),
        "flapping" => Some(
            "# A Premium replica that fails and returns three times.\n\
             [[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"down\"\n\
             [[event]]\nt_s = 140\nreplica = \"r1\"\naction = \"rejoin\"\n\
             [[event]]\nt_s = 160\nreplica = \"r1\"\naction = \"down\"\n\
             [[event]]\nt_s = 180\nreplica = \"r1\"\naction = \"rejoin\"\n\
             [[event]]\nt_s = 200\nreplica = \"r1\"\naction = \"down\"\n\
             [[event]]\nt_s = 220\nreplica = \"r1\"\naction = \"rejoin\"\n",
        ),
        "none" => Some("# No faults.\n"),
        _ => None,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    event: Vec<RawEvent>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    t_s: f64,
    replica: String,
    action: Action,
}

/// A fault schedule problem.
#[derive(Debug, thiserror::Error)]
pub enum FaultError {
    /// The TOML did not parse.
    #[error("{0}")]
    Parse(String),
    /// An event is invalid; `index` is 0-based.
    #[error("event[{index}].{field}: {reason}")]
    Event {
        /// Which event.
        index: usize,
        /// Which of its fields.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// The run's timeline against which events are checked (unscaled seconds).
#[derive(Clone, Copy, Debug)]
pub struct Timeline {
    /// Replicas K.
    pub replicas: usize,
    /// End of the arrival ramp.
    pub ramp_s: f64,
    /// Baseline window length.
    pub baseline_s: f64,
    /// Run length.
    pub duration_s: f64,
}

/// Parses and validates a schedule (times unscaled, in file order).
pub fn parse(text: &str, tl: Timeline) -> Result<Vec<FaultEvent>, FaultError> {
    if text.trim().is_empty() {
        return Err(FaultError::Parse("the file is empty".into()));
    }
    let file: File = from_toml(text).map_err(FaultError::Parse)?;
    let mut down = vec![false; tl.replicas];
    let mut paused = vec![false; tl.replicas];
    let mut last_t = f64::NEG_INFINITY;
    let mut events = Vec::with_capacity(file.event.len());
    for (index, e) in file.event.into_iter().enumerate() {
        let err = |field, reason: String| FaultError::Event { index, field, reason };
        if !e.t_s.is_finite() {
            return Err(err("t_s", format!("`{}` is not a time", e.t_s)));
        }
        let earliest = tl.ramp_s + tl.baseline_s;
        if e.t_s < earliest {
            return Err(err(
                "t_s",
                format!("{} s is before the end of the ramp and baseline window ({earliest} s)", e.t_s),
            ));
        }
        if e.t_s >= tl.duration_s {
            return Err(err("t_s", format!("{} s is not before the end of the run ({} s)", e.t_s, tl.duration_s)));
        }
        if e.t_s < last_t {
            return Err(err("t_s", format!("{} s comes before the previous event ({last_t} s)", e.t_s)));
        }
        last_t = e.t_s;
        let r = parse_replica(&e.replica, tl.replicas).map_err(|m| err("replica", m))?;
        let state_err = |m: &str| err("action", format!("{} of {}: {m}", e.action, e.replica));
        match e.action {
            Action::Down if down[r] => return Err(state_err("the replica is already down")),
            Action::Down => down[r] = true,
            Action::Rejoin if !down[r] => return Err(state_err("no earlier Down")),
            Action::Rejoin => down[r] = false,
            Action::Pause if paused[r] || down[r] => return Err(state_err("the replica is paused or down")),
            Action::Pause => paused[r] = true,
            Action::Resume if !paused[r] => return Err(state_err("no earlier Pause")),
            Action::Resume => paused[r] = false,
        }
        events.push(FaultEvent { t_s: e.t_s, replica: r, action: e.action });
    }
    Ok(events)
}

/// Multiplies every event time by `scale` (`--time-scale`).
pub fn scaled(events: &[FaultEvent], scale: f64) -> Vec<FaultEvent> {
    events.iter().map(|e| FaultEvent { t_s: e.t_s * scale, ..*e }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TL: Timeline = Timeline { replicas: 5, ramp_s: 60.0, baseline_s: 30.0, duration_s: 300.0 };

    #[test]
    fn presets_parse() {
        for name in PRESETS {
            parse(preset(name).unwrap(), TL).unwrap();
        }
        let cascade = parse(preset("cascade").unwrap(), TL).unwrap();
        assert_eq!(cascade.len(), 4);
        assert_eq!(cascade[1], FaultEvent { t_s: 150.0, replica: 1, action: Action::Down });
    }

    #[test]
    fn bad_schedules_name_the_field() {
        let cases = [
            ("[[event]]\nt_s = 120\nreplica = \"r9\"\naction = \"down\"", "event[0].replica"),
            ("[[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"rejoin\"", "no earlier Down"),
            ("[[event]]\nt_s = 400\nreplica = \"r1\"\naction = \"down\"", "end of the run"),
            ("[[event]]\nt_s = 10\nreplica = \"r1\"\naction = \"down\"", "before the end of the ramp"),
            ("[[event]]\nt_s = \"soon\"\nreplica = \"r1\"\naction = \"down\"", "line 2"),
            ("[[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"explode\"", "unknown variant"),
            ("[[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"down\"\ncolour = 1", "unknown field"),
        ];
        for (text, want) in cases {
            let got = parse(text, TL).unwrap_err().to_string();
            assert!(got.contains(want), "{text:?}: {got}");
        }
    }

    #[test]
    fn scaling_multiplies_times() {
        let e = parse(preset("premium-fault").unwrap(), TL).unwrap();
        let s = scaled(&e, 0.1);
        assert!((s[0].t_s - 12.0).abs() < 1e-9 && (s[1].t_s - 21.0).abs() < 1e-9);
    }
}
