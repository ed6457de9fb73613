//! Bounded harm from one client (docs/proxy.md, "Clients that break the
//! protocol"). A session the server ends with a protocol violation
//! (SQLSTATE 08P01: an unknown message type, an impossible length) is that
//! session's end, never evidence against the replica; but each one costs
//! the replica a backend's fork and start. So a client, known by its
//! address and user name, has a bucket of [`BURST`] violations that refills
//! at [`REFILL_PER_S`] a second. When its bucket runs empty the proxy says
//! so once per episode; only with `refuse_protocol_violators` in the
//! config are its logins then refused with SQLSTATE 53400 before any
//! replica is asked (about one violation a second after its burst). That
//! refusal is off by default: an address and a user name are shared by
//! every application instance on a host, so it would refuse the
//! well-behaved neighbours of a buggy one. The cost of a violation is
//! bounded where it falls instead: the replica's fork, as any login's; one
//! confirming probe per replica at a time; one log line per episode. The
//! roles are never touched. A client that changes its user name for every
//! session gets a bucket per name; the map is bounded ([`KEPT`]) by
//! forgetting full buckets first.

use std::collections::HashMap;
use std::net::IpAddr;

/// Violations a client may make in a burst (10).
pub const BURST: f64 = 10.0;
/// How fast its allowance comes back: one violation a second.
pub const REFILL_PER_S: f64 = 1.0;
/// Buckets kept before full ones are forgotten (4,096).
const KEPT: usize = 4096;

/// A client as the proxy tells them apart: its address and user name.
pub type Who = (IpAddr, String);

/// One client's allowance.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f64,
    at_s: f64,
    /// Its logins are being refused (logged once per episode).
    refusing: bool,
}

impl Bucket {
    fn refill(&mut self, now_s: f64) {
        self.tokens = (self.tokens + (now_s - self.at_s).max(0.0) * REFILL_PER_S).min(BURST);
        self.at_s = now_s;
    }
}

/// Every client's allowance; see the module doc.
#[derive(Debug, Default)]
pub struct Violations {
    by: HashMap<Who, Bucket>,
}

/// What [`Violations::admit`] decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    /// Let it log in.
    Admit,
    /// Refuse it: its allowance is back in this many seconds; `first` when
    /// this starts an episode of refusals (to be logged).
    Refuse { retry_s: f64, first: bool },
}

impl Violations {
    /// A session of `who` ended in a protocol violation at `now_s`.
    pub fn record(&mut self, who: &Who, now_s: f64) {
        if !self.by.contains_key(who) && self.by.len() >= KEPT {
            self.by.retain(|_, b| {
                b.refill(now_s);
                b.tokens < BURST
            });
            if self.by.len() >= KEPT {
                // Many clients at once: keep only those being refused.
                self.by.retain(|_, b| b.tokens < 1.0);
            }
            if self.by.len() >= KEPT {
                self.by.clear();
            }
        }
        let b = self.by.entry(who.clone()).or_insert(Bucket { tokens: BURST, at_s: now_s, refusing: false });
        b.refill(now_s);
        b.tokens = (b.tokens - 1.0).max(0.0);
    }

    /// Whether `who` may log in at `now_s`: refused while its allowance is
    /// spent (less than one violation left).
    pub fn admit(&mut self, who: &Who, now_s: f64) -> Verdict {
        let Some(b) = self.by.get_mut(who) else { return Verdict::Admit };
        b.refill(now_s);
        if b.tokens >= 1.0 {
            b.refusing = false;
            return Verdict::Admit;
        }
        let first = !b.refusing;
        b.refusing = true;
        Verdict::Refuse { retry_s: (1.0 - b.tokens) / REFILL_PER_S, first }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn who(user: &str) -> Who {
        (IpAddr::V4(Ipv4Addr::LOCALHOST), user.to_string())
    }

    #[test]
    fn a_burst_is_allowed_then_about_one_a_second() {
        let mut v = Violations::default();
        let (m, a) = (who("mallory"), who("alice"));
        for i in 0..10 {
            assert_eq!(v.admit(&m, 0.0), Verdict::Admit, "violation {i} is within the burst");
            v.record(&m, 0.0);
        }
        assert!(matches!(v.admit(&m, 0.0), Verdict::Refuse { first: true, .. }));
        assert!(matches!(v.admit(&m, 0.5), Verdict::Refuse { first: false, .. }), "logged once");
        assert_eq!(v.admit(&a, 0.5), Verdict::Admit, "another user at the same address is not refused");
        assert_eq!(v.admit(&m, 1.0), Verdict::Admit, "a second later, one more");
        v.record(&m, 1.0);
        let Verdict::Refuse { retry_s, first } = v.admit(&m, 1.25) else { panic!("spent again") };
        assert!(first && (retry_s - 0.75).abs() < 1e-9, "{retry_s}");
        // Over 100 s of one attempt every 10 ms, at most BURST + 100 get in.
        let mut v = Violations::default();
        let admitted = (0..10_000)
            .map(|i| f64::from(i) * 0.01)
            .filter(|&t| {
                let ok = v.admit(&m, t) == Verdict::Admit;
                if ok {
                    v.record(&m, t);
                }
                ok
            })
            .count();
        assert!((100..=111).contains(&admitted), "{admitted}");
    }

    #[test]
    fn the_map_stays_bounded_by_forgetting_full_buckets() {
        let mut v = Violations::default();
        for i in 0..3 * KEPT {
            v.record(&who(&format!("u{i}")), i as f64);
        }
        assert!(v.by.len() <= KEPT, "{}", v.by.len());
        for i in 0..3 * KEPT {
            v.record(&who(&format!("w{i}")), 1e9);
        }
        assert!(v.by.len() <= KEPT, "all at once: {}", v.by.len());
    }
}
