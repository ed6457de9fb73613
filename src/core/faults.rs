//! Fault schedules (design.md §1, §3): the built-in presets and schedule
//! files, parsed from `&str` with the same parser, validated against the
//! replica count and the run's timeline, then time-scaled. [`Open`] is the
//! one state machine of a replica's faults that validation, phase cutting
//! and end-of-run cleanup share.

use super::model::{parse_replica, Action, FaultEvent, ReplicaId};
use super::workload::from_toml;
use serde::Deserialize;

/// Names of the built-in presets, for `--help` and errors.
pub const PRESETS: [&str; 6] = ["premium-fault", "cascade", "gray-pause", "slow-replica", "flapping", "none"];

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
        "slow-replica" => Some(
            "# Gray failure: a Premium replica keeps a quarter of its CPU budget.\n\
             [[event]]\nt_s = 120\nreplica = \"r1\"\naction = \"slow\"\nfraction = 0.25\n\
             [[event]]\nt_s = 210\nreplica = \"r1\"\naction = \"restore\"\n",
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
    action: Kind,
    /// Slow only: the fraction of the CPU budget C the replica keeps.
    fraction: Option<f64>,
}

/// An action as a schedule file names it; Slow's fraction is a field of
/// the event.
#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Down,
    Rejoin,
    Pause,
    Resume,
    Slow,
    Restore,
    Partition,
    Heal,
}

/// The action of a raw event: `Err((field, reason))` when `fraction` is
/// missing or out of (0, 1) on a slow, or given on another action.
fn action_of(kind: Kind, fraction: Option<f64>) -> Result<Action, (&'static str, String)> {
    let plain = match kind {
        Kind::Slow => {
            return match fraction {
                Some(f) if f.is_finite() && f > 0.0 && f < 1.0 => Ok(Action::Slow(f)),
                Some(f) => Err(("fraction", format!("{f} is not a fraction of the CPU budget in (0, 1)"))),
                None => {
                    Err(("fraction", "slow needs the fraction of the CPU budget it keeps, e.g. fraction = 0.25".into()))
                }
            }
        }
        Kind::Down => Action::Down,
        Kind::Rejoin => Action::Rejoin,
        Kind::Pause => Action::Pause,
        Kind::Resume => Action::Resume,
        Kind::Restore => Action::Restore,
        Kind::Partition => Action::Partition,
        Kind::Heal => Action::Heal,
    };
    match fraction {
        Some(_) => Err(("fraction", format!("only slow takes a fraction, not {}", plain.phase_prefix()))),
        None => Ok(plain),
    }
}

/// The faults open on one replica, in the order they started: the state
/// every fault action is checked against and applied to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Open {
    faults: Vec<Action>,
}

impl Open {
    /// Applies `a`, or says why it cannot apply (the replica's state).
    pub fn apply(&mut self, a: Action) -> Result<(), &'static str> {
        let has = |p: fn(&Action) -> bool| self.faults.iter().any(p);
        let down = has(|a| *a == Action::Down);
        let paused = has(|a| *a == Action::Pause);
        let slow = has(|a| matches!(a, Action::Slow(_)));
        let cut = has(|a| *a == Action::Partition);
        let refused = match a {
            Action::Down if down => Some("the replica is already down"),
            Action::Pause if paused || down => Some("the replica is paused or down"),
            Action::Slow(_) if slow || down => Some("the replica is already slow or down"),
            Action::Partition if cut || down => Some("the replica is partitioned or down"),
            Action::Rejoin if !down => Some("no earlier Down"),
            Action::Resume if !paused => Some("no earlier Pause"),
            Action::Restore if !slow => Some("no earlier Slow"),
            Action::Heal if !cut => Some("no earlier Partition"),
            _ => None,
        };
        if let Some(why) = refused {
            return Err(why);
        }
        match self.faults.iter().position(|f| f.ended_by() == Some(a)) {
            Some(i) => {
                self.faults.remove(i);
            }
            None => self.faults.push(a),
        }
        Ok(())
    }

    /// Whether the replica counts among the survivors K+: no fault open,
    /// or only a Slow.
    pub fn survivor(&self) -> bool {
        self.faults.iter().all(|a| a.keeps_survivor())
    }

    /// The actions that end every open fault, the latest fault first.
    pub fn undo(&self) -> Vec<Action> {
        self.faults.iter().rev().filter_map(|a| a.ended_by()).collect()
    }
}

/// Replays `events` (valid, in order) and returns each replica's open
/// faults afterwards.
pub fn replay(events: &[FaultEvent], replicas: usize) -> Vec<Open> {
    let mut open = vec![Open::default(); replicas];
    for e in events.iter().filter(|e| e.replica < ReplicaId(replicas)) {
        // A validated schedule applies cleanly; an invalid step is skipped.
        let _ = open[e.replica.idx()].apply(e.action);
    }
    open
}

/// The actions that put every replica back to normal after `events`,
/// per replica the latest open fault first (end-of-run cleanup).
pub fn undo(events: &[FaultEvent], replicas: usize) -> Vec<(ReplicaId, Action)> {
    let open = replay(events, replicas);
    open.iter().enumerate().flat_map(|(r, o)| o.undo().into_iter().map(move |a| (ReplicaId(r), a))).collect()
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
    let mut open = vec![Open::default(); tl.replicas];
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
        let action = action_of(e.action, e.fraction).map_err(|(field, reason)| err(field, reason))?;
        open[r.idx()].apply(action).map_err(|m| err("action", format!("{action} of {}: {m}", e.replica)))?;
        events.push(FaultEvent { t_s: e.t_s, replica: r, action });
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
        assert_eq!(cascade[1], FaultEvent { t_s: 150.0, replica: ReplicaId(1), action: Action::Down });
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

    fn one(action: &str, extra: &str) -> String {
        format!("[[event]]\nt_s = 120\nreplica = \"r2\"\naction = \"{action}\"\n{extra}\n")
    }

    #[test]
    fn slow_takes_a_fraction_and_restore_ends_it() {
        let e = parse(preset("slow-replica").unwrap(), TL).unwrap();
        assert_eq!(e[0], FaultEvent { t_s: 120.0, replica: ReplicaId(0), action: Action::Slow(0.25) });
        assert_eq!(e[1], FaultEvent { t_s: 210.0, replica: ReplicaId(0), action: Action::Restore });
        let text = one("partition", "") + "[[event]]\nt_s = 130\nreplica = \"r2\"\naction = \"heal\"\n";
        let p = parse(&text, TL).unwrap();
        assert_eq!((p[0].action, p[1].action), (Action::Partition, Action::Heal));
    }

    #[test]
    fn bad_gray_faults_name_the_field() {
        let then = |a: &str| format!("[[event]]\nt_s = 130\nreplica = \"r2\"\naction = \"{a}\"\n");
        let cases = [
            (one("slow", ""), "event[0].fraction: slow needs"),
            (one("slow", "fraction = 1.0"), "event[0].fraction: 1 is not a fraction"),
            (one("slow", "fraction = 0"), "event[0].fraction: 0 is not a fraction"),
            (one("slow", "fraction = -0.5"), "event[0].fraction"),
            (one("slow", "fraction = nan"), "event[0].fraction"),
            (one("down", "fraction = 0.5"), "event[0].fraction: only slow takes a fraction"),
            (one("restore", ""), "event[0].action: Restore of r2: no earlier Slow"),
            (one("heal", ""), "event[0].action: Heal of r2: no earlier Partition"),
            (
                one("slow", "fraction = 0.5") + &then("slow") + "fraction = 0.2\n",
                "event[1].action: Slow 0.2 of r2: the replica is already slow",
            ),
            (
                one("down", "") + &then("slow") + "fraction = 0.2\n",
                "event[1].action: Slow 0.2 of r2: the replica is already slow or down",
            ),
            (one("partition", "") + &then("partition"), "event[1].action: Partition of r2: the replica is partitioned"),
            (one("down", "") + &then("partition"), "event[1].action"),
            (
                one("slow", "fraction = 0.5") + &then("restore") + &then("restore"),
                "event[2].action: Restore of r2: no earlier Slow",
            ),
        ];
        for (text, want) in cases {
            let got = parse(&text, TL).unwrap_err().to_string();
            assert!(got.contains(want), "{text:?}: {got}");
            assert!(!got.contains('\n'), "one line: {got}");
        }
    }

    #[test]
    fn open_faults_count_survivors_and_undo_latest_first() {
        let mut o = Open::default();
        o.apply(Action::Slow(0.25)).unwrap();
        assert!(o.survivor(), "a slow replica is a survivor");
        o.apply(Action::Partition).unwrap();
        assert!(!o.survivor(), "a partitioned one is not");
        o.apply(Action::Pause).unwrap();
        assert_eq!(o.undo(), vec![Action::Resume, Action::Heal, Action::Restore]);
        o.apply(Action::Heal).unwrap();
        o.apply(Action::Resume).unwrap();
        assert!(o.survivor());
        assert_eq!(o.undo(), vec![Action::Restore]);
        let ev = |t_s, replica, action| FaultEvent { t_s, replica, action };
        let events = [
            ev(1.0, ReplicaId(0), Action::Down),
            ev(2.0, ReplicaId(1), Action::Slow(0.5)),
            ev(3.0, ReplicaId(0), Action::Rejoin),
            ev(4.0, ReplicaId(2), Action::Partition),
        ];
        assert_eq!(undo(&events, 3), vec![(ReplicaId(1), Action::Restore), (ReplicaId(2), Action::Heal)]);
        assert!(undo(&events[..3], 3).iter().all(|(r, _)| *r == ReplicaId(1)), "r1 rejoined, nothing to undo there");
    }

    #[test]
    fn scaling_multiplies_times() {
        let e = parse(preset("premium-fault").unwrap(), TL).unwrap();
        let s = scaled(&e, 0.1);
        assert!((s[0].t_s - 12.0).abs() < 1e-9 && (s[1].t_s - 21.0).abs() < 1e-9);
    }
}
