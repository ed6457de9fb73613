//! Property tests of what counts as failure evidence (docs/resilience.md,
//! "What counts as failure evidence"): no sequence of client sessions that
//! the server ends with its own error, of lost connections and refused
//! connects whose confirming probe answers, of fast answers and of
//! session starts and ends changes any replica's health or PLB's roles,
//! under either evidence-reading detector. And a replica whose confirming
//! probe is refused is removed at once.

use plbbench::core::control::{Admission, Confirm, Controller};
use plbbench::core::health::{Evidence, HealthConfig};
use plbbench::core::model::{Class, ConnectError, EventKind, QueryError, ReplicaId, Role};
use plbbench::core::router::{FreemiumBorrow, Router, RouterConfig, Strategy as Routing};
use plbbench::core::watch::{Recovery, Watch};
use proptest::prelude::*;

const K: usize = 5;

/// One thing a client can make happen.
#[derive(Clone, Debug)]
enum Op {
    /// A session of this class asks to start.
    Start(bool),
    /// The oldest open session ends normally.
    End,
    /// A query on the oldest open session: the server ends the session
    /// with its own error (08P01, 57P01, 57014: any SQLSTATE).
    ServerEnded,
    /// A query on replica r answers fast.
    Answer(usize, u8),
    /// A connection to r is lost or refused with no word from the server,
    /// and the confirming probe asked for answers.
    LostThenAlive(usize, bool),
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        any::<bool>().prop_map(Op::Start),
        Just(Op::End),
        Just(Op::ServerEnded),
        (0..K, any::<u8>()).prop_map(|(r, ms)| Op::Answer(r, ms)),
        (0..K, any::<bool>()).prop_map(|(r, refused)| Op::LostThenAlive(r, refused)),
    ]
}

fn controller(strategy: Routing, suspicion: bool) -> Controller {
    let cfg = RouterConfig {
        strategy,
        replicas: K,
        reference: [2, 1, 2],
        split: (3, 2),
        theta: 10,
        alpha: 0.7,
        mixed_bounded: true,
        freemium_borrow: FreemiumBorrow::Never,
    };
    let health = HealthConfig::default();
    let watch =
        if suspicion { Watch::suspicion(K, Recovery::None, health) } else { Watch::probe(K, Recovery::None, health) };
    Controller::new(Router::new(cfg), watch, None, 1.0, 30_000.0)
}

fn roles(c: &Controller) -> Vec<Role> {
    ReplicaId::all(K).map(|r| c.role(r)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_session_a_client_can_end_changes_any_replica(
        strategy in prop::sample::select(vec![Routing::Plb, Routing::Rr, Routing::Lc, Routing::RrSplit]),
        suspicion in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let mut c = controller(strategy, suspicion);
        let before = roles(&c);
        let mut open: std::collections::VecDeque<(ReplicaId, Class)> = Default::default();
        let mut t = 0.0;
        for (i, op) in ops.into_iter().enumerate() {
            t += 0.01;
            match op {
                Op::Start(premium) => {
                    let class = if premium { Class::P } else { Class::F };
                    if let Admission::Route(r) = c.request(i as u32, class, t) {
                        open.push_back((r, class));
                    }
                }
                Op::End => {
                    if let Some((r, class)) = open.pop_front() {
                        let _ = c.session_ended(r, class, t);
                    }
                }
                Op::ServerEnded => {
                    if let Some((r, class)) = open.pop_front() {
                        prop_assert_eq!(c.query_answered(r, Err(QueryError::Failed), t - 0.005, t), None);
                        let _ = c.session_ended(r, class, t);
                    }
                }
                Op::Answer(r, ms) => {
                    let asked = c.query_answered(ReplicaId(r), Ok(f64::from(ms)), t - 0.005, t);
                    prop_assert_eq!(asked, None);
                }
                Op::LostThenAlive(r, refused) => {
                    let r = ReplicaId(r);
                    let asked = if refused {
                        c.connect_failed(r, ConnectError::Refused, t).1
                    } else {
                        c.query_answered(r, Err(QueryError::ConnectionLost), t - 0.005, t)
                    };
                    prop_assert_eq!(asked, Some(Confirm(r)));
                    c.confirmed(r, Evidence::ProbeOk { ms: 1.0 }, t, t + 0.001);
                }
            }
            prop_assert_eq!(c.survivors(), K, "after op {}", i);
        }
        prop_assert_eq!(roles(&c), before);
        let changes: Vec<_> = c
            .drain_events()
            .into_iter()
            .filter(|e| matches!(e, plbbench::core::control::ControlEvent::Log { kind: EventKind::Detect | EventKind::Health | EventKind::Role, .. }))
            .collect();
        prop_assert!(changes.is_empty(), "{:?}", changes);
    }

    #[test]
    fn a_refused_confirming_probe_removes_the_replica_at_once(r in 0..K, suspicion in any::<bool>(), lost in any::<bool>()) {
        let mut c = controller(Routing::Plb, suspicion);
        let r = ReplicaId(r);
        let asked = if lost {
            c.query_answered(r, Err(QueryError::ConnectionLost), 1.0, 2.0)
        } else {
            c.connect_failed(r, ConnectError::Refused, 2.0).1
        };
        prop_assert_eq!(asked, Some(Confirm(r)));
        prop_assert!(c.is_healthy(r));
        c.confirmed(r, Evidence::Refused, 2.0, 2.001);
        prop_assert!(!c.is_healthy(r));
        prop_assert_eq!(c.survivors(), K - 1);
    }
}
