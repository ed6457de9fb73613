//! `run --generators N` ([scale](docs/scale.md#several-generators-through-one-proxy)):
//! what passes between the run and its generator children (processes or
//! containers). The child says it is ready; the parent reads the child's
//! monotonic clock a few times ([`Word::Ping`], [`Line::Pong`]) to learn its
//! offset, then tells it when time zero is on its own clock and where the
//! proxy listens ([`Word::Go`]; one JSON line each on the child's stdin);
//! the child sends back every raw record its clients produce, then its
//! books ([`Line`], one JSON line each on its stdout). The parent feeds the
//! records into its one collector, so phases, series and summary are
//! computed exactly as for a single generator (the histograms are filled
//! from every record; no percentile is ever averaged). Both ends use the
//! types here, so the format has one definition.

use crate::core::metrics::{LoginRecord, QueryRecord, SessionRecord};
use crate::core::model::{Class, ReplicaId};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A child sends its records when this many bytes wait ...
const BATCH_BYTES: usize = 32 * 1024;
/// ... or when the oldest has waited this long, whichever comes first.
pub const BATCH_WAIT: Duration = Duration::from_millis(50);

/// A line from the parent to a child.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Word {
    /// Read your monotonic clock now and say it ([`Line::Pong`]).
    Ping,
    /// Start.
    Go(Go),
}

impl Word {
    /// The line written for this message (no newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("a word to a generator serialises")
    }

    /// Reads one line.
    pub fn parse(line: &str) -> Result<Word, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// The parent's word to a child: start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Go {
    /// The run's time zero on the child's CLOCK_MONOTONIC, nanoseconds (the
    /// parent's time zero plus the child's measured clock offset): the
    /// child counts from it, so every record is on the run's clock.
    pub start_mono_ns: u64,
    /// Where the proxy accepts the run's clients (in a tier, its first
    /// member).
    pub proxy: SocketAddr,
    /// In a tier of proxies: every member's address, in peer order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tier: Vec<SocketAddr>,
    /// The user the clients log in as.
    pub user: String,
    /// The password the proxy asks, when it listens off loopback (for
    /// containers on a remote engine); none on loopback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The database, if the cluster names one.
    pub dbname: Option<String>,
    /// The replicas as libpq DSNs (the child only counts them: the proxy
    /// reaches them).
    pub dsns: Vec<String>,
}

/// One line from a child.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// The first line, before [`Go`]: the child's wall clock minus its
    /// monotonic clock, seconds (the parent compares it with its own).
    Ready {
        /// CLOCK_REALTIME - CLOCK_MONOTONIC at the child.
        wall_minus_mono_s: f64,
    },
    /// The child's CLOCK_MONOTONIC when it read a [`Word::Ping`].
    Pong {
        /// Nanoseconds.
        mono_ns: u64,
    },
    /// The child read [`Go`] this long after the run's time zero, seconds.
    Started {
        /// Its lateness.
        late_s: f64,
    },
    /// A finished query (its session number is the child's own).
    Query(QueryRecord),
    /// A session the proxy placed: class, replica, run time.
    Session {
        /// Class.
        class: Class,
        /// Replica.
        replica: ReplicaId,
        /// Run time, seconds.
        t_s: f64,
    },
    /// An ended session.
    Ended(SessionRecord),
    /// A step of a session's login.
    Login(LoginRecord),
    /// Schedule lag of a session start or query, seconds.
    Lag {
        /// Seconds late.
        s: f64,
    },
    /// The last line: sessions still open per class, whether the child
    /// was stopped by a signal, and how hard it worked.
    Done {
        /// Open sessions `[P, F]` at the end.
        in_flight: [u64; 2],
        /// Stopped by SIGINT or SIGTERM.
        interrupted: bool,
        /// The child's own saturation guard (its CPU, its clients' lags).
        #[serde(default)]
        generator: Option<crate::core::saturation::GeneratorReport>,
        /// In a tier of proxies: sessions `[opened, lost]` through each
        /// peer (index peer - 1).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        through: Vec<[u64; 2]>,
    },
}

impl Line {
    /// The line written for this message (no newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("a generator line serialises")
    }

    /// Reads one line.
    pub fn parse(line: &str) -> Result<Line, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// A child's monotonic clock against the parent's, from [`Word::Ping`]
/// round trips: the reading of the fastest round trip, taken as made half
/// way through it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Offset {
    /// Child's clock minus the parent's, nanoseconds.
    pub ns: i64,
    /// Half the fastest round trip, nanoseconds: the offset is within
    /// this of the truth.
    pub within_ns: u64,
}

impl Offset {
    /// The best estimate from round trips `(parent sent, child read, parent
    /// received)`, all in nanoseconds of their own clocks; `None` without any.
    pub fn of(trips: &[(u64, u64, u64)]) -> Option<Offset> {
        let &(sent, read, back) = trips.iter().min_by_key(|(sent, _, back)| back.saturating_sub(*sent))?;
        let rtt = back.saturating_sub(sent);
        let mid = sent as i128 + i128::from(rtt / 2);
        Some(Offset { ns: (read as i128 - mid) as i64, within_ns: rtt.div_ceil(2) })
    }

    /// The parent's monotonic instant `parent_ns` on the child's clock.
    pub fn to_child(self, parent_ns: u64) -> u64 {
        (parent_ns as i128 + i128::from(self.ns)).max(0) as u64
    }
}

/// A child's records on their way to the parent: [`Line`]s gathered and
/// written together, one `write` per [`BATCH_BYTES`] or [`BATCH_WAIT`]
/// rather than one per record (a query makes two records, so a flush per
/// record was two system calls per query). The parent's live figures lag
/// by at most [`BATCH_WAIT`]; dropping the tap sends what is left.
pub struct Tap {
    out: Box<dyn Write + Send>,
    buf: Vec<u8>,
    /// When the oldest unsent line was added.
    oldest: Option<Instant>,
}

impl Tap {
    /// A tap writing to `out` (a child's stdout).
    pub fn new(out: impl Write + Send + 'static) -> Tap {
        Tap { out: Box::new(out), buf: Vec::with_capacity(BATCH_BYTES + 512), oldest: None }
    }

    /// Adds `line`; sends the batch once it is [`BATCH_BYTES`] long.
    pub fn push(&mut self, line: &Line) {
        serde_json::to_writer(&mut self.buf, line).expect("a generator line serialises");
        self.buf.push(b'\n');
        self.oldest.get_or_insert_with(Instant::now);
        if self.buf.len() >= BATCH_BYTES {
            self.flush();
        }
    }

    /// When the batch must be sent (`None`: nothing waits).
    pub fn due(&self) -> Option<Instant> {
        self.oldest.map(|t| t + BATCH_WAIT)
    }

    /// Sends what waits (a parent gone is no error: the child is stopping
    /// too).
    pub fn flush(&mut self) {
        if !self.buf.is_empty() {
            let _ = self.out.write_all(&self.buf).and_then(|_| self.out.flush());
            self.buf.clear();
        }
        self.oldest = None;
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.flush();
    }
}

/// CLOCK_MONOTONIC now, nanoseconds: the clock every process on this host
/// shares (Rust's `Instant` reads it too).
pub fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC now, seconds.
pub fn wall_minus_mono_s() -> f64 {
    super::proxy_feed::unix_now() - mono_ns() as f64 / 1e9
}

/// The `Instant` of CLOCK_MONOTONIC value `mono_ns` (in the past).
pub fn instant_of(mono_ns_then: u64) -> std::time::Instant {
    let ago = mono_ns().saturating_sub(mono_ns_then);
    std::time::Instant::now() - std::time::Duration::from_nanos(ago)
}

/// Session number `s` of generator `index` of `n` as a run-wide number:
/// every generator numbers its sessions 1, 2, ...; interleaved, they stay
/// unique.
pub fn run_session(s: u64, index: u32, n: u32) -> u64 {
    s.saturating_sub(1) * u64::from(n) + u64::from(index) + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::metrics::LoginStep;
    use crate::core::model::{AbortReason, ConnectError, QueryError};

    #[test]
    fn every_line_reads_back_as_written() {
        let lines = [
            Line::Ready { wall_minus_mono_s: 1.7e9 },
            Line::Pong { mono_ns: 12_345 },
            Line::Started { late_s: 0.004 },
            Line::Query(QueryRecord {
                session: 3,
                class: Class::P,
                replica: ReplicaId(1),
                intended_s: 1.25,
                start_s: 1.5,
                end_s: 1.75,
                error: Some(QueryError::ConnectionLost),
            }),
            Line::Session { class: Class::F, replica: ReplicaId(4), t_s: 2.0 },
            Line::Ended(SessionRecord {
                class: Class::F,
                replica: ReplicaId(4),
                start_s: 2.0,
                end_s: 3.0,
                abort: Some(AbortReason::Connect(ConnectError::Full)),
            }),
            Line::Login(LoginRecord { class: Class::P, intended_s: 1.5, step: LoginStep::LoggedIn(1.75) }),
            Line::Lag { s: 0.001 },
            Line::Done { in_flight: [1, 2], interrupted: false, generator: None, through: vec![[4, 1], [3, 0]] },
        ];
        for l in lines {
            assert_eq!(Line::parse(&l.line()).unwrap(), l);
        }
        assert!(Line::parse("{\"query\":{}}").is_err());
        let go = Go {
            start_mono_ns: 7,
            proxy: "127.0.0.1:6432".parse().unwrap(),
            tier: vec!["127.0.0.1:6432".parse().unwrap(), "127.0.0.1:6433".parse().unwrap()],
            user: "postgres".into(),
            password: Some("run's own".into()),
            dbname: None,
            dsns: vec!["host=x".into()],
        };
        for w in [Word::Ping, Word::Go(go)] {
            assert_eq!(Word::parse(&w.line()).unwrap(), w);
        }
    }

    #[test]
    fn a_clock_offset_comes_from_the_fastest_round_trip() {
        // The child's clock runs 1 ms ahead; the second trip is the fastest.
        let trips = [(1_000, 1_001_400, 1_900), (5_000, 1_005_100, 5_200), (9_000, 1_009_900, 9_950)];
        let o = Offset::of(&trips).unwrap();
        assert_eq!(o, Offset { ns: 1_000_000, within_ns: 100 });
        assert_eq!(o.to_child(20_000), 1_020_000);
        let behind = Offset { ns: -50, within_ns: 1 };
        assert_eq!(behind.to_child(20), 0, "clamped at the clock's zero");
        assert_eq!(Offset::of(&[]), None);
    }

    /// A writer that keeps what it is given and counts the writes.
    #[derive(Clone, Default)]
    struct Counted(std::sync::Arc<std::sync::Mutex<(Vec<u8>, usize)>>);

    impl Write for Counted {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut g = self.0.lock().unwrap();
            g.0.extend_from_slice(b);
            g.1 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_tap_sends_records_in_batches_and_all_of_them_in_order() {
        let out = Counted::default();
        let mut tap = Tap::new(out.clone());
        assert_eq!(tap.due(), None, "nothing waits");
        let lines: Vec<Line> = (0..5000).map(|i| Line::Lag { s: f64::from(i) }).collect();
        let before = Instant::now();
        tap.push(&lines[0]);
        let due = tap.due().expect("a line waits");
        assert!(due >= before + BATCH_WAIT && due <= Instant::now() + BATCH_WAIT);
        for l in &lines[1..] {
            tap.push(l);
        }
        let batches = out.0.lock().unwrap().1;
        assert!((1..10).contains(&batches), "{batches} writes for 5000 lines");
        drop(tap);
        let (bytes, writes) = out.0.lock().unwrap().clone();
        assert_eq!(writes, batches + 1, "dropping the tap sends the rest at once");
        let got: Vec<Line> = String::from_utf8(bytes).unwrap().lines().map(|l| Line::parse(l).unwrap()).collect();
        assert_eq!(got, lines);
    }

    #[test]
    fn a_flushed_tap_has_nothing_due() {
        let out = Counted::default();
        let mut tap = Tap::new(out.clone());
        tap.push(&Line::Lag { s: 0.5 });
        assert_eq!(out.0.lock().unwrap().1, 0, "one short line waits");
        tap.flush();
        assert_eq!(tap.due(), None);
        assert_eq!(out.0.lock().unwrap().1, 1);
        tap.flush();
        assert_eq!(out.0.lock().unwrap().1, 1, "nothing to send, no write");
    }

    #[test]
    fn sessions_of_different_generators_never_share_a_number() {
        let mut seen = std::collections::BTreeSet::new();
        for index in 0..3 {
            for s in 1..=50 {
                assert!(seen.insert(run_session(s, index, 3)));
            }
        }
        assert_eq!(run_session(1, 0, 1), 1);
    }

    #[test]
    fn an_instant_from_the_monotonic_clock_is_that_long_ago() {
        let then = mono_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let ago = instant_of(then).elapsed();
        assert!(ago >= std::time::Duration::from_millis(20) && ago < std::time::Duration::from_secs(1), "{ago:?}");
    }
}
