//! How a tier's members find each other and elect a leader through the
//! cluster itself (docs/scale.md, "Agreeing on roles"), with no other
//! coordination service: every member keeps a control connection to every
//! replica that answers, named with its identity ([`Member::app_name`],
//! read back from `pg_stat_activity` by the others: the tier's directory);
//! the member that holds the tier's advisory lock ([`lock_key`]) on a
//! majority of the replicas ([`majority_of`]) leads. [`decide`] is what a
//! member does with what it saw on its connections. Pure.

use std::net::SocketAddr;

/// The start of every member's `application_name`.
const PREFIX: &str = "plbtier";

/// PostgreSQL's longest `application_name` (NAMEDATALEN - 1).
pub const MAX_APP_NAME: usize = 63;

/// One member as the directory names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The tier's name.
    pub tier: String,
    /// Its peer id, 1..=127, unique in the tier.
    pub peer: u8,
    /// Where it accepts clients (cancel requests for its sessions go there).
    pub client: SocketAddr,
    /// Where its feed port listens (followers connect there when it leads).
    pub feed: SocketAddr,
}

impl Member {
    /// Its control connection's `application_name`:
    /// `plbtier NAME PEER CLIENT FEED`.
    pub fn app_name(&self) -> String {
        format!("{PREFIX} {} {} {} {}", self.tier, self.peer, self.client, self.feed)
    }

    /// A directory entry, if `app_name` is one.
    pub fn parse(app_name: &str) -> Option<Member> {
        let mut w = app_name.split(' ');
        if w.next()? != PREFIX {
            return None;
        }
        let m = Member {
            tier: w.next()?.to_string(),
            peer: w.next()?.parse().ok()?,
            client: w.next()?.parse().ok()?,
            feed: w.next()?.parse().ok()?,
        };
        w.next().is_none().then_some(m)
    }
}

/// A tier name: 1 to 16 letters, digits, `-`, `_` or `.`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || name.len() > 16 || !name.chars().all(ok) {
        return Err(format!("{name:?}: a tier name is 1 to 16 letters, digits, '-', '_' or '.'"));
    }
    Ok(())
}

/// The advisory lock of tier `name`: `pg_try_advisory_lock(int4, int4)`
/// with a constant first key ("PLBT") and the name's FNV-1a hash, below
/// 2^31 (so `pg_locks.objid` reads it as written).
pub fn lock_key(name: &str) -> (i32, i32) {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (0x504c_4254, (h & 0x7fff_ffff) as i32)
}

/// Where a member stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// It follows (or waits for) a leader.
    Follower,
    /// It holds the lock on a majority of the replicas and runs the
    /// controller, at this generation.
    Leader { generation: u64 },
}

/// What one round on the control connection saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// A leader: whether it still holds the lock on a majority of the
    /// replicas; a follower: whether any control connection answered.
    pub answered: bool,
    /// A follower's `pg_try_advisory_lock` on every replica: `Some(true)`
    /// when it took a majority.
    pub won: Option<bool>,
    /// Who holds the lock on the most replicas, per the directories.
    pub holder: Option<Member>,
}

/// What a member does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Lead from now on, at this generation.
    Lead(u64),
    /// The leader holds the lock on less than a majority of the replicas
    /// now: it stops leading at once, before any other work.
    StepDown,
    /// Follow the leader at this feed address.
    Follow(SocketAddr),
    /// Nothing changes.
    Stay,
}

/// The locks a member must hold to lead a tier over `k` replicas: a
/// majority, so that two members never both lead.
pub fn majority_of(k: usize) -> usize {
    k / 2 + 1
}

/// The member other than `me` that holds the tier's lock on the most
/// replicas, per each replica's directory (`(member, holds it there, is
/// this connection)`); `None` when no other member holds it anywhere.
/// Ties go to the lower peer id (a follower that links to a member that
/// does not lead is turned away, and tries again next round).
pub fn holder_of(dirs: &[Vec<(Member, bool, bool)>], me: u8) -> Option<Member> {
    let mut count: Vec<(Member, usize)> = Vec::new();
    for (m, ..) in dirs.iter().flatten().filter(|(m, holds, _)| *holds && m.peer != me) {
        match count.iter_mut().find(|(c, _)| c.peer == m.peer) {
            Some((_, n)) => *n += 1,
            None => count.push((m.clone(), 1)),
        }
    }
    count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.peer.cmp(&b.0.peer)));
    count.into_iter().next().map(|(m, _)| m)
}

/// The step for member `me`, standing at `standing`, after `seen`;
/// `next_generation` is one above the last generation it followed.
pub fn decide(me: u8, standing: Standing, seen: &Seen, next_generation: u64) -> Step {
    match standing {
        Standing::Leader { .. } if !seen.answered => Step::StepDown,
        Standing::Leader { .. } => Step::Stay,
        Standing::Follower if seen.won == Some(true) => Step::Lead(next_generation),
        Standing::Follower => match &seen.holder {
            Some(m) if m.peer != me => Step::Follow(m.feed),
            _ => Step::Stay,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(peer: u8) -> Member {
        Member {
            tier: "t1".into(),
            peer,
            client: "127.0.0.1:6432".parse().unwrap(),
            feed: format!("127.0.0.1:{}", 7000 + u16::from(peer)).parse().unwrap(),
        }
    }

    #[test]
    fn a_directory_entry_reads_back() {
        let m = member(3);
        assert_eq!(m.app_name(), "plbtier t1 3 127.0.0.1:6432 127.0.0.1:7003");
        assert_eq!(Member::parse(&m.app_name()), Some(m));
        for other in ["psql", "plbtier t1 x 127.0.0.1:1 127.0.0.1:2", "plbtier t1 3 127.0.0.1:1", "premium-1"] {
            assert_eq!(Member::parse(other), None, "{other}");
        }
        assert_eq!(Member::parse("plbtier t1 3 127.0.0.1:1 127.0.0.1:2 extra"), None);
    }

    #[test]
    fn names_and_keys() {
        assert!(check_name("orders-eu.1").is_ok());
        for bad in ["", "a b", "x%", "seventeen-chars-x"] {
            assert!(check_name(bad).unwrap_err().contains("tier name"), "{bad}");
        }
        let (a, b) = (lock_key("t1"), lock_key("t2"));
        assert_eq!(a.0, b.0);
        assert_ne!(a.1, b.1, "tiers on one cluster do not share a lock");
        assert!(a.1 >= 0 && b.1 >= 0);
        assert_eq!(lock_key("t1"), a, "every member computes the same key");
    }

    /// A majority of five is three; of four, three; of one, one. The
    /// holder is whoever holds the lock on the most replicas.
    #[test]
    fn the_leader_holds_a_majority_of_the_locks() {
        assert_eq!([1, 2, 3, 4, 5, 7].map(majority_of), [1, 2, 2, 3, 3, 4]);
        let on = |holders: &[u8]| -> Vec<(Member, bool, bool)> {
            [1, 2, 3].map(|p| (member(p), holders.contains(&p), false)).to_vec()
        };
        assert_eq!(holder_of(&[on(&[]), on(&[])], 3), None);
        let dirs = [on(&[2]), on(&[2]), on(&[1]), on(&[])];
        assert_eq!(holder_of(&dirs, 3).map(|m| m.peer), Some(2));
        assert_eq!(holder_of(&[on(&[3]), on(&[1])], 2).map(|m| m.peer), Some(1), "a tie goes to the lower id");
        assert_eq!(holder_of(&[on(&[3]), on(&[3]), on(&[1])], 3).map(|m| m.peer), Some(1), "never itself");
        assert_eq!(holder_of(&[on(&[3])], 3), None);
    }

    #[test]
    fn who_leads_and_when_it_steps_down() {
        let none = Seen { answered: true, won: Some(false), holder: None };
        let f = Standing::Follower;
        assert_eq!(decide(1, f, &Seen { won: Some(true), ..none.clone() }, 4), Step::Lead(4));
        assert_eq!(decide(1, f, &none, 4), Step::Stay, "nobody holds it yet");
        let held = Seen { holder: Some(member(2)), ..none.clone() };
        assert_eq!(decide(1, f, &held, 4), Step::Follow(member(2).feed));
        let me = Seen { holder: Some(member(1)), ..none.clone() };
        assert_eq!(decide(1, f, &me, 4), Step::Stay, "its own stale entry is not a leader to follow");
        let l = Standing::Leader { generation: 3 };
        assert_eq!(decide(1, l, &Seen { answered: true, won: None, holder: None }, 4), Step::Stay);
        assert_eq!(decide(1, l, &Seen { answered: false, won: None, holder: None }, 4), Step::StepDown);
        let lost = Seen { answered: false, won: None, holder: None };
        assert_eq!(decide(1, f, &lost, 4), Step::Stay, "a follower with no connection waits");
    }
}
