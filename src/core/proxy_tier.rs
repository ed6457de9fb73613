//! A run through a tier of proxies (`run --proxies N`, docs/proxy.md, "A
//! tier of proxies"): the proxy faults a run injects (`--proxy-faults`),
//! what each member said of its standing, and the judgement of the whole:
//! never two leaders at once, generations that only rise, a new leader
//! soon after each loss, and every member's routing and sessions counted.
//! Pure: the run command starts and stops the processes and reads their
//! feeds; times here are seconds on one shared clock.

use serde::{Deserialize, Serialize};

/// The longest a tier may be without a leader after it lost one and
/// still pass: a member tries the lock every `retry_ms` (500 ms), and a
/// vanished leader's lock goes with its connection within the keepalive
/// bound (about 5 s).
pub const FAILOVER_LIMIT_S: f64 = 10.0;

/// The proxy fault schedule's built-in preset names.
pub const PRESETS: [&str; 2] = ["failover", "none"];

/// What a proxy fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProxyAction {
    /// SIGKILL to the member that leads now.
    KillLeader,
    /// SIGTERM to a member that follows (it drains its sessions), waited.
    StopFollower,
    /// Every member killed or stopped before is started again, with its
    /// peer id and client address.
    Restart,
}

impl ProxyAction {
    /// The name `--proxy-faults` uses.
    pub fn name(self) -> &'static str {
        match self {
            ProxyAction::KillLeader => "kill-leader",
            ProxyAction::StopFollower => "stop-follower",
            ProxyAction::Restart => "restart",
        }
    }
}

/// One proxy fault, at run time `t_s`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProxyFault {
    /// When, seconds on the run's clock.
    pub t_s: f64,
    /// What.
    pub action: ProxyAction,
}

/// The preset `failover` on the run's default 300 s timeline: the leader
/// killed at 180 s (while the default `premium-fault` holds r1 down, and
/// `cascade` r1 and r2, with the roles repaired), a follower stopped at
/// 225 s, and both started again at 260 s.
const FAILOVER: &str = "kill-leader@180,stop-follower@225,restart@260";

/// Parses `--proxy-faults`: a preset name, or `ACTION@SECONDS,...` on the
/// unscaled timeline of `timeline_s` seconds, in time order, for a tier of
/// `proxies`; `Err` says why, for the flag's one-line error.
pub fn parse(spec: &str, timeline_s: f64, proxies: u32) -> Result<Vec<ProxyFault>, String> {
    let text = match spec {
        "none" => "",
        "failover" => FAILOVER,
        s => s,
    };
    let mut out: Vec<ProxyFault> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, at) = item
            .split_once('@')
            .ok_or_else(|| format!("{item:?} is not ACTION@SECONDS (or a preset: {})", PRESETS.join(", ")))?;
        let action = [ProxyAction::KillLeader, ProxyAction::StopFollower, ProxyAction::Restart]
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| format!("{name:?} is not kill-leader, stop-follower or restart"))?;
        let t_s: f64 = at.parse().map_err(|_| format!("{at:?} in {item:?} is not a number of seconds"))?;
        if !(t_s.is_finite() && t_s > 0.0 && t_s < timeline_s) {
            return Err(format!("{item:?}: the time must be inside the run's {timeline_s} s timeline"));
        }
        if out.last().is_some_and(|l| l.t_s >= t_s) {
            return Err(format!("{item:?}: the faults must be in time order, each after the last"));
        }
        out.push(ProxyFault { t_s, action });
    }
    if !out.is_empty() && proxies < 2 {
        return Err(format!("a tier needs --proxies 2 or more to lose a member, got {proxies}"));
    }
    let mut down = 0u32;
    for f in &out {
        match f.action {
            ProxyAction::KillLeader | ProxyAction::StopFollower if down + 1 >= proxies => {
                return Err(format!(
                    "{}@{}: the tier would be left with no member ({proxies} proxies, {down} already down)",
                    f.action.name(),
                    f.t_s
                ))
            }
            ProxyAction::KillLeader | ProxyAction::StopFollower => down += 1,
            ProxyAction::Restart if down == 0 => {
                return Err(format!("restart@{}: no member is down to start again", f.t_s));
            }
            ProxyAction::Restart => down = 0,
        }
    }
    Ok(out)
}

/// The schedule with its times multiplied by `scale` (`--time-scale`).
pub fn scaled(faults: &[ProxyFault], scale: f64) -> Vec<ProxyFault> {
    faults.iter().map(|f| ProxyFault { t_s: f.t_s * scale, ..*f }).collect()
}

/// A tier member's standing, as its feed says it (one line of the proxy
/// feed: `backend::proxy_feed::Feed::Tier`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierLine {
    /// Proxy time, seconds.
    pub t_s: f64,
    /// Its peer id.
    pub peer: u8,
    /// Whether it leads.
    pub leading: bool,
    /// The leader it follows over a live link (its own id when it leads;
    /// `None`: it has no leader to hear from).
    pub leader: Option<u8>,
    /// The generation of the roles it routes within (0: none yet).
    pub generation: u64,
    /// Sessions it relays now.
    pub open: u32,
    /// Sessions it was asked to route so far.
    pub routed: u64,
    /// Of them, those routed on roles no live leader stood behind: after
    /// its link to the leader closed (or it stepped down), before a new
    /// leader's link.
    pub stale: u64,
}

/// What the run saw of one member process, at time `t_s` on the run's
/// clock.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// A line of its feed (its `t_s` already on the run's clock).
    Said(TierLine),
    /// The run's proxy fault ended it.
    Ended(ProxyAction),
    /// A new process took its place.
    Restarted,
}

/// The tier's log: what each process slot (0-based, peer id - 1) saw, in
/// order, on the run's clock.
#[derive(Clone, Debug, Default)]
pub struct TierLog {
    /// `(t_s, slot, what)`.
    pub seen: Vec<(f64, usize, Seen)>,
}

impl TierLog {
    /// Records `what` of `slot` at `t_s`.
    pub fn push(&mut self, t_s: f64, slot: usize, what: Seen) {
        self.seen.push((t_s, slot, what));
    }

    /// Each slot's last word, `None` once a fault ended or restarted it
    /// (slots past the last one seen are not listed).
    fn last_words(&self) -> Vec<Option<&TierLine>> {
        let mut last: Vec<Option<&TierLine>> = Vec::new();
        for (_, slot, what) in &self.seen {
            if last.len() <= *slot {
                last.resize(slot + 1, None);
            }
            last[*slot] = match what {
                Seen::Said(l) => Some(l),
                Seen::Ended(_) | Seen::Restarted => None,
            };
        }
        last
    }

    /// The slot that leads now, as the members last said.
    pub fn leader(&self) -> Option<usize> {
        self.last_words().iter().position(|l| l.is_some_and(|l| l.leading))
    }

    /// Whether every one of `slots` has said it leads or follows a leader
    /// over a live link, and exactly one leads.
    pub fn settled(&self, slots: usize) -> bool {
        let mut last = self.last_words();
        last.resize(slots, None);
        let leaders = last.iter().flatten().filter(|l| l.leading).count();
        leaders == 1 && last.iter().all(|l| l.is_some_and(|l| l.leader.is_some()))
    }
}

/// One member's reign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reign {
    /// Its peer id.
    pub peer: u8,
    /// The generation it led at.
    pub generation: u64,
    /// When it said it leads, run seconds.
    pub from_s: f64,
    /// When it stopped (run seconds; the run's end when it led to the end).
    pub to_s: f64,
    /// How it ended: `run end`, `stepped down`, `killed`, `stopped`.
    pub ended: String,
}

/// A leader lost and the next one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Failover {
    /// The lost leader's peer id.
    pub lost_peer: u8,
    /// When it was lost, run seconds.
    pub lost_s: f64,
    /// The next leader's peer id and generation, if there was one.
    pub next_peer: Option<u8>,
    /// Its generation.
    pub next_generation: Option<u64>,
    /// Time without a leader, milliseconds (`None`: none by the run's end).
    pub took_ms: Option<f64>,
}

/// One member process's books.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberBooks {
    /// Its peer id.
    pub peer: u8,
    /// Its processes in turn (1, or 2 after a restart).
    pub processes: u32,
    /// Sessions it was asked to route, over its processes.
    pub routed: u64,
    /// Of them, those routed on stale roles.
    pub stale: u64,
    /// Sessions the run's clients opened through it.
    pub sessions: u64,
    /// Of them, those whose connection closed mid-session with no word:
    /// the member holding it vanished (a member that loses a replica says
    /// so with 08006, and those are not counted here).
    pub lost: u64,
    /// Sessions it relayed at its last word before a proxy fault ended it.
    pub open_when_ended: Option<u32>,
}

/// What a run through a tier of proxies measured (summary.json
/// `proxy_tier`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierReport {
    /// Members.
    pub proxies: u32,
    /// The proxy faults injected.
    pub faults: Vec<ProxyFault>,
    /// Every reign in order.
    pub reigns: Vec<Reign>,
    /// Every leader lost and what followed.
    pub failovers: Vec<Failover>,
    /// Seconds during which two members led at once (must be 0).
    pub two_leaders_s: f64,
    /// Whether each reign's generation is above the last one's.
    pub generations_rise: bool,
    /// Per member.
    pub members: Vec<MemberBooks>,
}

/// Judges the tier's log up to the run's end `end_s`, with the sessions
/// `[opened, lost]` the run counted through each peer (index peer - 1).
pub fn judge(log: &TierLog, proxies: u32, faults: &[ProxyFault], end_s: f64, through: &[[u64; 2]]) -> TierReport {
    let reigns = reigns(log, end_s);
    let mut two_leaders_s = 0.0;
    for (i, a) in reigns.iter().enumerate() {
        for b in &reigns[i + 1..] {
            if a.peer != b.peer {
                two_leaders_s += (a.to_s.min(b.to_s) - a.from_s.max(b.from_s)).max(0.0);
            }
        }
    }
    let generations_rise = reigns.windows(2).all(|w| w[1].generation > w[0].generation);
    let failovers = reigns
        .iter()
        .enumerate()
        .filter(|(_, r)| r.ended != "run end")
        .map(|(i, r)| {
            let next = reigns[i + 1..].iter().find(|n| n.from_s >= r.from_s && n.peer != r.peer);
            Failover {
                lost_peer: r.peer,
                lost_s: r.to_s,
                next_peer: next.map(|n| n.peer),
                next_generation: next.map(|n| n.generation),
                took_ms: next.map(|n| ((n.from_s - r.to_s).max(0.0) * 1e6).round() / 1e3),
            }
        })
        .collect();
    TierReport {
        proxies,
        faults: faults.to_vec(),
        reigns,
        failovers,
        two_leaders_s,
        generations_rise,
        members: (0..proxies as usize).map(|slot| member(log, slot, through.get(slot).copied())).collect(),
    }
}

/// Every reign, in the order they began.
fn reigns(log: &TierLog, end_s: f64) -> Vec<Reign> {
    let mut open: std::collections::BTreeMap<usize, Reign> = Default::default();
    let mut done = Vec::new();
    for (t, slot, what) in &log.seen {
        let ending = match what {
            Seen::Said(l) if l.leading => {
                if open.get(slot).is_none_or(|r| r.generation != l.generation) {
                    if let Some(mut r) = open.remove(slot) {
                        r.to_s = *t;
                        r.ended = "stepped down".into();
                        done.push(r);
                    }
                    let r =
                        Reign { peer: l.peer, generation: l.generation, from_s: *t, to_s: end_s, ended: String::new() };
                    open.insert(*slot, r);
                }
                None
            }
            Seen::Said(_) => Some("stepped down"),
            Seen::Ended(ProxyAction::KillLeader) => Some("killed"),
            Seen::Ended(_) => Some("stopped"),
            Seen::Restarted => None,
        };
        if let Some(how) = ending {
            if let Some(mut r) = open.remove(slot) {
                r.to_s = *t;
                r.ended = how.into();
                done.push(r);
            }
        }
    }
    done.extend(open.into_values().map(|mut r| {
        r.ended = "run end".into();
        r
    }));
    done.sort_by(|a, b| a.from_s.total_cmp(&b.from_s));
    done
}

/// One slot's books from its lines: counters add up over its processes.
fn member(log: &TierLog, slot: usize, through: Option<[u64; 2]>) -> MemberBooks {
    let [sessions, lost] = through.unwrap_or_default();
    let mut b = MemberBooks {
        peer: (slot + 1) as u8,
        processes: 1,
        routed: 0,
        stale: 0,
        sessions,
        lost,
        open_when_ended: None,
    };
    let mut last: Option<&TierLine> = None;
    for (_, _, what) in log.seen.iter().filter(|(_, s, _)| *s == slot) {
        match what {
            Seen::Said(l) => last = Some(l),
            Seen::Ended(_) => b.open_when_ended = last.map(|l| l.open),
            Seen::Restarted => {
                b.processes += 1;
                if let Some(l) = last.take() {
                    b.routed += l.routed;
                    b.stale += l.stale;
                }
            }
        }
    }
    if let Some(l) = last {
        b.routed += l.routed;
        b.stale += l.stale;
    }
    b
}

impl TierReport {
    /// The run's verdict on its tier: never two leaders, rising
    /// generations, a new leader within [`FAILOVER_LIMIT_S`] of each loss
    /// (unless the run ended first), and one leader at the end.
    pub fn verdict(&self, end_s: f64) -> (bool, String) {
        let slow: Vec<String> = self
            .failovers
            .iter()
            .filter(|f| match f.took_ms {
                Some(ms) => ms > FAILOVER_LIMIT_S * 1e3,
                None => end_s - f.lost_s > FAILOVER_LIMIT_S,
            })
            .map(|f| format!("peer {} lost at {:.1} s", f.lost_peer, f.lost_s))
            .collect();
        let at_end = self.reigns.iter().filter(|r| r.ended == "run end").count();
        let ok = self.two_leaders_s == 0.0 && self.generations_rise && slow.is_empty() && at_end == 1;
        let took: Vec<String> = self
            .failovers
            .iter()
            .map(|f| match (f.took_ms, f.next_peer) {
                (Some(ms), Some(p)) => {
                    format!("peer {} lost at {:.1} s, peer {p} led {ms:.0} ms later", f.lost_peer, f.lost_s)
                }
                _ => format!("peer {} lost at {:.1} s, no leader after it", f.lost_peer, f.lost_s),
            })
            .collect();
        let (routed, stale) = self.members.iter().fold((0, 0), |(a, b), m| (a + m.routed, b + m.stale));
        let (sessions, lost) = self.members.iter().fold((0, 0), |(a, b), m| (a + m.sessions, b + m.lost));
        let mut detail = format!(
            "{} proxies, {} reigns (generations {}), {:.3} s with two leaders; {}; {stale} of {routed} routing \
             decisions on stale roles; {sessions} sessions through the tier, {lost} lost mid-session",
            self.proxies,
            self.reigns.len(),
            self.reigns.iter().map(|r| r.generation.to_string()).collect::<Vec<_>>().join(", "),
            self.two_leaders_s,
            if took.is_empty() { "no leader lost".to_string() } else { took.join("; ") },
        );
        if !self.generations_rise {
            detail.push_str("; a reign's generation did not rise above the last");
        }
        if !slow.is_empty() {
            detail.push_str(&format!("; no new leader within {FAILOVER_LIMIT_S} s: {}", slow.join(", ")));
        }
        if at_end != 1 {
            detail.push_str(&format!("; {at_end} members led at the end"));
        }
        (ok, detail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(peer: u8, leading: bool, leader: Option<u8>, generation: u64, routed: u64, stale: u64) -> Seen {
        Seen::Said(TierLine { t_s: 0.0, peer, leading, leader, generation, open: 3, routed, stale })
    }

    #[test]
    fn the_schedule_parses_and_refuses_what_cannot_run() {
        let f = parse("failover", 300.0, 3).unwrap();
        assert_eq!(
            f.iter().map(|f| (f.t_s, f.action)).collect::<Vec<_>>(),
            [(180.0, ProxyAction::KillLeader), (225.0, ProxyAction::StopFollower), (260.0, ProxyAction::Restart)]
        );
        assert_eq!(scaled(&f, 0.5)[0].t_s, 90.0);
        assert!(parse("none", 300.0, 1).unwrap().is_empty());
        for (spec, n, says) in [
            ("failover", 2, "no member"),
            ("failover", 1, "--proxies 2"),
            ("kill-leader@400", 3, "timeline"),
            ("kill-leader@-1", 3, "timeline"),
            ("restart@10", 3, "no member is down"),
            ("kill-leader@20,stop-follower@10", 3, "time order"),
            ("explode@10", 3, "not kill-leader"),
            ("kill-leader", 3, "ACTION@SECONDS"),
            ("kill-leader@soon", 3, "not a number"),
        ] {
            let e = parse(spec, 300.0, n).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
        assert_eq!(parse("kill-leader@10,restart@20,kill-leader@30", 300.0, 2).unwrap().len(), 3);
    }

    /// A leader killed at 10 s, the next leading 0.5 s later; a follower
    /// stopped and restarted: one failover of 500 ms, no overlap, books
    /// summed over the restarted member's two processes.
    #[test]
    fn a_failover_is_measured_from_the_log() {
        let mut log = TierLog::default();
        log.push(1.0, 0, said(1, true, Some(1), 1, 0, 0));
        log.push(1.2, 1, said(2, false, Some(1), 1, 0, 0));
        log.push(1.2, 2, said(3, false, Some(1), 1, 0, 0));
        assert!(log.settled(3));
        assert_eq!(log.leader(), Some(0));
        log.push(9.0, 0, said(1, true, Some(1), 1, 100, 0));
        log.push(10.0, 0, Seen::Ended(ProxyAction::KillLeader));
        assert_eq!(log.leader(), None);
        assert!(!log.settled(3));
        log.push(10.01, 1, said(2, false, None, 1, 50, 0));
        log.push(10.5, 1, said(2, true, Some(2), 2, 52, 2));
        log.push(10.6, 2, said(3, false, Some(2), 2, 60, 1));
        log.push(20.0, 2, Seen::Ended(ProxyAction::StopFollower));
        log.push(25.0, 2, Seen::Restarted);
        log.push(26.0, 2, said(3, false, Some(2), 2, 7, 0));
        let r = judge(&log, 3, &[], 30.0, &[[10, 4], [20, 0], [30, 0]]);
        assert_eq!(r.reigns.len(), 2);
        assert_eq!((r.reigns[0].ended.as_str(), r.reigns[0].to_s), ("killed", 10.0));
        assert_eq!((r.reigns[1].ended.as_str(), r.reigns[1].generation), ("run end", 2));
        assert_eq!(r.failovers.len(), 1);
        assert_eq!(r.failovers[0].took_ms, Some(500.0));
        assert_eq!(r.failovers[0].next_peer, Some(2));
        assert_eq!(r.two_leaders_s, 0.0);
        assert!(r.generations_rise);
        let m3 = &r.members[2];
        assert_eq!((m3.processes, m3.routed, m3.stale, m3.open_when_ended), (2, 67, 1, Some(3)));
        assert_eq!((r.members[0].lost, r.members[0].open_when_ended), (4, Some(3)));
        let (ok, detail) = r.verdict(30.0);
        assert!(ok, "{detail}");
        assert!(detail.contains("peer 2 led 500 ms later"), "{detail}");
        assert!(detail.contains("3 of 219 routing decisions on stale roles"), "{detail}");
    }

    /// Two members leading at once, a generation that does not rise, and
    /// a loss with no new leader are each a failing verdict.
    #[test]
    fn two_leaders_or_none_fail() {
        let mut log = TierLog::default();
        log.push(1.0, 0, said(1, true, Some(1), 1, 0, 0));
        log.push(2.0, 1, said(2, true, Some(2), 1, 0, 0));
        let r = judge(&log, 2, &[], 10.0, &[]);
        assert_eq!(r.two_leaders_s, 8.0);
        assert!(!r.generations_rise);
        let (ok, detail) = r.verdict(10.0);
        assert!(!ok && detail.contains("2 members led at the end"), "{detail}");
        let mut log = TierLog::default();
        log.push(1.0, 0, said(1, true, Some(1), 1, 0, 0));
        log.push(5.0, 0, Seen::Ended(ProxyAction::KillLeader));
        let r = judge(&log, 2, &[], 30.0, &[]);
        assert_eq!(r.failovers[0].took_ms, None);
        let (ok, detail) = r.verdict(30.0);
        assert!(!ok && detail.contains("no new leader within"), "{detail}");
        assert!(!r.verdict(12.0).0, "no leader at the end either");
    }
}
