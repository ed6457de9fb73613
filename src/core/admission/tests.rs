//! The gate's rules, each tested against the step of issue 64's causal
//! chain it answers, and the SRE rule as a property over random
//! sequences of requests, ends, expiries and mode changes.

use super::*;
use crate::core::degradation::{Priority, Thresholds};
use crate::core::router::{RouterConfig, Strategy as Routing};
use proptest::prelude::*;

fn sizing(replicas: usize, replica_sessions: u32) -> Sizing {
    Sizing { replicas, replica_sessions, service_ms: 1.0 }
}

/// A gate over `k` replicas of `per` sessions each, no minimum time in a
/// mode, a queue of 3 and a 2 s deadline.
fn gate(k: usize, per: u32) -> Gate {
    let knobs = DegradationKnobs {
        queue_capacity: 3,
        queue_deadline_ms: 2000,
        min_mode_duration_s: Some(0.0),
        ..Default::default()
    };
    Gate::new(knobs, 1.0, sizing(k, per))
}

/// A replica of `role` with no session.
fn at(role: Role) -> Place {
    Place { role, active: [0; 2] }
}

fn cpu(v: f64) -> Load {
    Load { cpu_pct: Some(v), ..Default::default() }
}

/// Every replica of `router` by role, for `observe`.
fn roles(router: &Router) -> Vec<Role> {
    (0..router.config().replicas).map(|r| router.role(ReplicaId(r))).collect()
}

fn survival(g: &mut Gate) {
    g.observe(1.0, cpu(99.0));
    assert_eq!(g.mode(), Mode::Survival);
}

fn admits(g: &mut Gate, r: &mut Router, clients: std::ops::Range<u32>, class: Class, t: f64) -> usize {
    clients.filter(|c| matches!(g.request(r, *c, class, t), Decision::Admit(_))).count()
}

#[test]
fn survival_caps_the_lower_class_on_the_top_class_replicas_never_the_top_one() {
    // Causal step 2: the mode's share capped Premium too. rr over two
    // replicas (both shared, Mixed) of 10 sessions: in Survival Freemium
    // gets 30 %, 3 a replica; Premium its whole 10 a replica.
    let mut g = gate(2, 10);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Rr, [1, 0, 1]));
    survival(&mut g);
    assert_eq!(admits(&mut g, &mut r, 0..6, Class::F, 1.0), 6, "2 replicas x 30 % of 10");
    assert_eq!(g.request(&mut r, 10, Class::F, 1.0), Decision::Queued);
    let _ = g.expire(10.0);
    assert_eq!(admits(&mut g, &mut r, 20..40, Class::P, 10.0), 20, "Premium: 10 a replica, whatever the mode");
    assert_eq!(g.rejections, [[0, 0], [1, 0]]);
}

#[test]
fn the_cap_binds_only_where_the_top_class_is_served() {
    // Causal step 1's other half: a Freemium replica is Freemium's.
    // rr-split over (1, 0, 1): in Survival Freemium fills its own replica
    // as without the gate; only where Premium is served is it held.
    let mut g = gate(2, 10);
    let mut r = Router::new(RouterConfig::for_tests(Routing::RrSplit, [1, 0, 1]));
    survival(&mut g);
    assert_eq!(admits(&mut g, &mut r, 0..30, Class::F, 1.0), 30, "rr-split's F replica: no limit but its own");
    assert_eq!(g.statement_limit(Class::F, at(Role::F)), None);
    assert_eq!(g.statement_limit(Class::F, at(Role::P)), Some(1), "30 % of 4 slots, at least one");
    assert_eq!(g.statement_limit(Class::F, at(Role::M)), Some(1));
    assert_eq!(g.statement_limit(Class::P, at(Role::P)), None, "the top class is never held");
    let pinned = Place { role: Role::F, active: [3, 40] };
    assert_eq!(g.statement_limit(Class::F, pinned), Some(1), "an F replica holding Premium sessions is shared");
}

#[test]
fn a_full_first_choice_passes_to_the_next_replica_with_room() {
    // Causal step 3: Premium waited for r3 while r5 had room. PLB over
    // (1, 1, 1), 3 sessions a replica: the Premium replica is full, so
    // the fourth Premium session goes to Mixed instead of queueing.
    let mut g = gate(3, 3);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Plb, [1, 1, 1]));
    assert_eq!(admits(&mut g, &mut r, 0..3, Class::P, 0.0), 3);
    assert_eq!(r.active(ReplicaId(0)), [3, 0]);
    assert_eq!(g.request(&mut r, 3, Class::P, 0.0), Decision::Admit(ReplicaId(1)), "Mixed has room");
    // Round robin whose turn is a full replica passes to the next.
    let mut g = gate(2, 1);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Rr, [1, 0, 1]));
    assert_eq!(g.request(&mut r, 0, Class::P, 0.0), Decision::Admit(ReplicaId(0)));
    r.release(ReplicaId(0), Class::P);
    r.place(ReplicaId(1), Class::P);
    assert_eq!(g.request(&mut r, 1, Class::P, 0.0), Decision::Admit(ReplicaId(0)), "r1's turn, r1 full");
}

#[test]
fn lower_class_statements_are_held_to_the_share_and_released() {
    // Causal step 4: Freemium sessions already placed kept their CPU. In
    // Restricted, Freemium runs 2 statements at once on a shared replica
    // (50 % of 4); the third waits for one to end; Premium is never held.
    let mut g = gate(1, 10);
    assert!((0..10).all(|_| g.begin_statement(Class::F, ReplicaId(0), at(Role::M))), "Normal: no limit");
    (0..10).for_each(|_| g.end_statement(Class::F, ReplicaId(0)));
    g.observe(1.0, cpu(91.0));
    assert_eq!(g.mode(), Mode::Restricted);
    assert!(g.begin_statement(Class::F, ReplicaId(0), at(Role::M)));
    assert!(g.begin_statement(Class::F, ReplicaId(0), at(Role::M)));
    assert!(!g.begin_statement(Class::F, ReplicaId(0), at(Role::M)), "the third is held");
    assert!((0..20).all(|_| g.begin_statement(Class::P, ReplicaId(0), at(Role::M))));
    g.end_statement(Class::F, ReplicaId(0));
    assert!(g.begin_statement(Class::F, ReplicaId(0), at(Role::M)), "a slot freed");
}

#[test]
fn a_freemium_replica_at_its_budget_with_premium_on_time_is_normal() {
    // Causal step 1: the mean CPU of every replica put Freemium's
    // designed saturation into the signal. PLB's roles P P M F F, the
    // Freemium and Mixed replicas at 100 %, Premium's at 40 % and its
    // queries answered in 1.5x their service time: Normal, however long.
    let mut g = gate(5, 200);
    let r = Router::new(RouterConfig::for_tests(Routing::Plb, [2, 1, 2]));
    let own = g.own_replicas(&roles(&r).into_iter().map(Some).collect::<Vec<_>>());
    assert_eq!(own, [true, true, false, false, false]);
    let util = [Some(0.4), Some(0.4), Some(1.0), Some(1.0), Some(1.0)];
    for t in 1..300 {
        g.served(Class::P, 1.5);
        g.served(Class::F, 900.0);
        let load = Load { cpu_pct: cpu_pct(&util, &own, 1.0), ..Default::default() };
        assert_eq!(g.observe(f64::from(t), load), None, "at {t} s");
    }
    assert_eq!(cpu_pct(&util, &[true; 5], 1.0), Some(76.0), "the old signal, near Cautious");
    // The same replicas with Premium's queries 25x their service time:
    // its own wait says Survival.
    g.served(Class::P, 25.0);
    let load = Load { cpu_pct: cpu_pct(&util, &own, 1.0), ..Default::default() };
    assert_eq!(g.observe(300.0, load).map(|t| t.to), Some(Mode::Survival));
}

#[test]
fn survival_entry_makes_no_flood_and_reentry_loop() {
    // Causal step 5: shedding cleared the signal, the mode left, the
    // queue flooded back, the mode re-entered. A plant: one shared
    // replica whose Premium query takes S x (1 + Freemium statements
    // running); Freemium wants 20 at once for 400 s, then 1. With the
    // seed's 30 s minimum, the mode enters once while the overload lasts
    // and leaves once after it: two transitions, no re-entry.
    let knobs = DegradationKnobs { queue_deadline_ms: 2000, ..Default::default() };
    let mut g = Gate::new(knobs, 1.0, sizing(1, 100));
    let mut running = 0u32;
    let mut changes = Vec::new();
    for t in 1..900 {
        let want = if t < 400 { 20 } else { 1 };
        while running > 0 {
            g.end_statement(Class::F, ReplicaId(0));
            running -= 1;
        }
        while running < want && g.begin_statement(Class::F, ReplicaId(0), at(Role::M)) {
            running += 1;
        }
        g.served(Class::P, 1.0 + f64::from(running));
        if let Some(tr) = g.observe(f64::from(t), Load::default()) {
            changes.push((t, tr.to));
        }
    }
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0].1, Mode::Survival);
    assert!(changes[1].0 >= 400 && changes[1].1 == Mode::Normal, "{changes:?}");
}

#[test]
fn a_top_class_waiter_holds_every_lower_admission_and_a_full_queue_refuses_the_lowest() {
    let mut g = gate(2, 1);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Lc, [1, 0, 1]));
    assert_eq!(admits(&mut g, &mut r, 0..2, Class::P, 0.0), 2);
    assert_eq!(g.request(&mut r, 2, Class::P, 0.0), Decision::Queued, "both full");
    r.release(ReplicaId(1), Class::P);
    r.place(ReplicaId(1), Class::F);
    // A Freemium session would fit nowhere anyway here; the point is it
    // queues behind the Premium waiter rather than being tried.
    assert_eq!(g.request(&mut r, 3, Class::F, 0.1), Decision::Queued);
    assert_eq!(g.request(&mut r, 4, Class::F, 0.2), Decision::Queued);
    assert_eq!(g.queued(), 3);
    assert_eq!(g.request(&mut r, 5, Class::F, 0.3), Decision::Rejected(REJECT_FULL), "full: Freemium refused");
    assert_eq!(g.request(&mut r, 6, Class::P, 0.3), Decision::Queued, "full of lower waiters: Premium queues");
    assert_eq!(g.waiting(), [2, 2]);
}

#[test]
fn the_queue_drains_the_highest_priority_first() {
    // Both replicas at their 10 Premium sessions: a Premium session waits,
    // and a Freemium one, which would fit (Premium's sessions are not its
    // load), waits behind it. One Premium session ends: the Premium waiter
    // starts first, then the Freemium one.
    let mut g = gate(2, 10);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Lc, [1, 0, 1]));
    assert_eq!(admits(&mut g, &mut r, 0..20, Class::P, 0.0), 20);
    assert_eq!(g.request(&mut r, 21, Class::P, 0.0), Decision::Queued);
    assert_eq!(g.request(&mut r, 20, Class::F, 0.1), Decision::Queued, "Premium waits for both: both shared");
    assert!(g.drain(&mut r).is_empty(), "Premium stuck: nothing below it starts");
    r.release(ReplicaId(0), Class::P);
    let admitted = g.drain(&mut r);
    assert_eq!(admitted.iter().map(|(w, _)| w.client).collect::<Vec<_>>(), [21, 20], "Premium first");
    assert_eq!(g.queued(), 0);
}

#[test]
fn retries_are_no_fresh_demand_and_thresholds_reach_the_gate() {
    let mut g = gate(2, 1);
    let mut r = Router::new(RouterConfig::for_tests(Routing::Lc, [1, 0, 1]));
    assert_eq!(admits(&mut g, &mut r, 0..2, Class::P, 0.0), 2);
    assert_eq!(g.request(&mut r, 2, Class::P, 0.0), Decision::Queued);
    assert_eq!(g.expire(2.0).len(), 1);
    assert_eq!(g.request(&mut r, 2, Class::P, 2.0), Decision::Queued);
    assert!(g.queue.iter().all(|w| w.retry));
    let th = Thresholds::preset(crate::core::degradation::Preset::Default);
    assert_eq!(g.manager().thresholds().cpu_pct, th.cpu_pct);
    assert_eq!(g.observe(3.0, Load::default()), None, "a retry holds no mode");
    assert_eq!(g.query_timeout_s(30.0), 30.0);
    assert_eq!(g.floor(), Priority::Background);
}

/// One step of a random admission history.
#[derive(Clone, Debug)]
enum Op {
    Request(bool, u32),
    End(usize),
    Expire(f64),
    Mode(f64),
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..40u32).prop_map(|(p, c)| Op::Request(p, c)),
        3 => (0..64usize).prop_map(Op::End),
        1 => (0.0..3.0f64).prop_map(Op::Expire),
        1 => prop_oneof![Just(10.0), Just(85.0), Just(92.0), Just(99.0)].prop_map(Op::Mode),
        1 => Just(Op::Drain),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Premium is rejected only while every Freemium request for the
    /// capacity it could have had is rejected: no Freemium session was
    /// admitted to a replica of a role Premium is served by (its own or
    /// Mixed) during a rejected Premium session's wait, under every
    /// strategy.
    #[test]
    fn premium_is_rejected_only_while_every_freemium_request_is(
        ops in proptest::collection::vec(op(), 1..300),
        s in 0..4usize,
    ) {
        let strategy = Routing::ALL[s];
        let mut g = gate(3, 2);
        let mut r = Router::new(RouterConfig::for_tests(strategy, [1, 1, 1]));
        let mut on: Vec<(ReplicaId, Class)> = Vec::new();
        let mut freemium_admitted: Vec<f64> = Vec::new();
        let mut t = 0.0;
        for op in ops {
            t += 0.1;
            let mut admitted = Vec::new();
            match op {
                Op::Request(p, c) => {
                    let class = if p { Class::P } else { Class::F };
                    match g.request(&mut r, c, class, t) {
                        Decision::Admit(x) => admitted.push((x, class)),
                        Decision::Rejected(_) if p => {
                            prop_assert!(g.queue.iter().all(|w| w.class == Class::P), "Premium refused beside Freemium");
                        }
                        _ => {}
                    }
                }
                Op::End(i) if !on.is_empty() => {
                    let (x, class) = on.swap_remove(i % on.len());
                    r.release(x, class);
                    admitted.extend(g.drain(&mut r).into_iter().map(|(w, x)| (x, w.class)));
                }
                Op::End(_) => {}
                Op::Expire(dt) => {
                    t += dt;
                    for w in g.expire(t) {
                        if w.class == Class::P {
                            let during = freemium_admitted.iter().filter(|&&a| a >= w.since_s).count();
                            prop_assert_eq!(during, 0, "Freemium admitted while a rejected Premium waited");
                        }
                    }
                }
                Op::Mode(v) => {
                    g.observe(t, cpu(v));
                }
                Op::Drain => admitted.extend(g.drain(&mut r).into_iter().map(|(w, x)| (x, w.class))),
            }
            for (x, class) in admitted {
                if class == Class::F && g.serves_top(at(r.role(x))) {
                    freemium_admitted.push(t);
                }
                on.push((x, class));
            }
        }
    }
}
