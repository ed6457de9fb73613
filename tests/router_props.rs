//! Property tests of the routing core (design.md §2): random operation
//! sequences over random cluster sizes and reference splits must keep every
//! invariant the paper's policy promises.

use plbbench::core::model::{Class, ReplicaId, Role};
use plbbench::core::roles::{count, target};
use plbbench::core::router::{FreemiumBorrow, Router, RouterConfig, Strategy as Routing, PRESSURE_CPU};
use proptest::prelude::*;

/// The target vector restated independently from design.md §2 (floating
/// point, half away from zero), to check the integer implementation.
fn target_spec(n: usize, r: [usize; 3], k: usize) -> [usize; 3] {
    match n {
        0 => [0, 0, 0],
        1 => [0, 1, 0],
        2 => [1, 0, 1],
        3 => [2, 0, 1],
        _ => {
            let round = |x: f64| (x + 0.5).floor() as usize;
            let mut p = round(n as f64 * r[0] as f64 / k as f64).max(1);
            let mut f = if r[2] == 0 { 0 } else { round(n as f64 * r[2] as f64 / k as f64).max(1) };
            let ff = if r[2] == 0 { 0 } else { 1 };
            while p + f > n && (f > ff || p > 1) {
                if f > ff {
                    f -= 1
                } else {
                    p -= 1
                }
            }
            [p, n - p - f, f]
        }
    }
}

fn reference() -> impl Strategy<Value = (usize, [usize; 3])> {
    (1usize..=12)
        .prop_flat_map(|k| (0..=k).prop_flat_map(move |p| (0..=k - p).prop_map(move |m| (k, [p, m, k - p - m]))))
}

#[derive(Clone, Debug)]
enum Op {
    Admit(Class),
    Release(usize),
    Fail(usize),
    Heal(usize),
    /// A CPU reading: per replica a use in hundredths of the budget (from
    /// 0 to 1.27), `None` for a replica not measured.
    Cpu(Vec<Option<u8>>),
}

fn reading(max: u8) -> impl Strategy<Value = Op> {
    prop::collection::vec(prop::option::weighted(0.9, 0..=max), 12).prop_map(Op::Cpu)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => prop::bool::ANY.prop_map(|p| Op::Admit(if p { Class::P } else { Class::F })),
            3 => (0usize..64).prop_map(Op::Release),
            1 => (0usize..12).prop_map(Op::Fail),
            1 => (0usize..12).prop_map(Op::Heal),
            1 => reading(127),
        ],
        1..300,
    )
}

fn config(strategy: Routing, k: usize, reference: [usize; 3], split_p: usize) -> RouterConfig {
    RouterConfig {
        strategy,
        replicas: k,
        reference,
        split: (split_p, k - split_p),
        theta: 3,
        alpha: 0.7,
        mixed_bounded: split_p % 2 == 0,
        freemium_borrow: FreemiumBorrow::ALL[split_p % FreemiumBorrow::ALL.len()],
    }
}

/// Replicas of `class`'s own role or Mixed below theta: where bounded
/// admission must send a new session of `class` if there are any. On its
/// own role Premium does not count Freemium guests against theta.
fn below_theta(router: &Router, k: usize, class: Class) -> Vec<usize> {
    let own = if class == Class::P { Role::P } else { Role::F };
    let theta = router.config().theta;
    (0..k)
        .filter(|&x| {
            let r = ReplicaId(x);
            let load = router.active(r).iter().sum::<u32>();
            let guests = if class == Class::P && router.role(r) == Role::P { router.guests(r) } else { 0 };
            router.is_healthy(r) && matches!(router.role(r), Role::M) | (router.role(r) == own) && load - guests < theta
        })
        .collect()
}

/// The CPU share `replica` would use with one session more, restated from
/// design.md §2 as revised: the last reading scaled by its sessions now
/// plus one over its sessions then.
fn with_one_more(last: &[Option<(f64, u32)>], router: &Router, x: usize) -> Option<f64> {
    let (used, then) = last[x]?;
    Some(used * f64::from(router.active(ReplicaId(x)).iter().sum::<u32>() + 1) / f64::from(then.max(1)))
}

/// Feeds a reading to the router and remembers it with each replica's
/// sessions, for [`with_one_more`].
fn observe(router: &mut Router, k: usize, cpu: &[Option<u8>], last: &mut [Option<(f64, u32)>]) {
    let used: Vec<Option<f64>> = cpu[..k].iter().map(|u| u.map(|u| f64::from(u) / 100.0)).collect();
    router.observe_cpu(&used);
    for x in 0..k {
        last[x] = used[x].map(|u| (u, router.active(ReplicaId(x)).iter().sum()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn target_matches_formula((k, r) in reference()) {
        for n in 0..=k {
            let t = target(n, r, k);
            prop_assert_eq!(t, target_spec(n, r, k), "K={} K+={} ref={:?}", k, n, r);
            prop_assert_eq!(t.iter().sum::<usize>(), n);
        }
    }

    #[test]
    fn router_invariants(
        (k, r) in reference(),
        strategy in prop::sample::select(Routing::ALL.to_vec()),
        split_seed in 0usize..100,
        ops in ops(),
    ) {
        let split_p = split_seed % (k + 1);
        let mut router = Router::new(config(strategy, k, r, split_p));
        let mut open: Vec<(usize, Class)> = Vec::new();
        let mut health_changed = false;
        let mut last: Vec<Option<(f64, u32)>> = vec![None; k];
        let mut premium_fell_back = false;
        let rule = router.config().freemium_borrow;
        for op in ops {
            match op {
                Op::Cpu(cpu) => {
                    observe(&mut router, k, &cpu, &mut last);
                    premium_fell_back = false;
                }
                Op::Admit(class) => {
                    let below = below_theta(&router, k, class);
                    let room: Vec<Option<f64>> = (0..k).map(|x| with_one_more(&last, &router, x)).collect();
                    let roles_before: Vec<Role> = (0..k).map(|x| router.role(ReplicaId(x))).collect();
                    let bounded = strategy == Routing::Plb && router.config().mixed_bounded;
                    let own = if class == Class::P { Role::P } else { Role::F };
                    let own_role_up = (0..k).any(|x| router.is_healthy(ReplicaId(x)) && router.role(ReplicaId(x)) == own);
                    if let Some(rep) = router.admit(class) {
                        prop_assert!(router.is_healthy(rep), "routed to a down replica");
                        if bounded && !below.is_empty() {
                            prop_assert!(below.contains(&rep.idx()), "past theta on {} while {:?} were below it", rep, below);
                        }
                        if bounded && below.is_empty() && own_role_up {
                            prop_assert!(router.role(rep) != Role::M, "Mixed {} admitted past theta", rep);
                        }
                        if strategy == Routing::RrSplit {
                            let own = if class == Class::P { rep < ReplicaId(split_p) } else { rep >= ReplicaId(split_p) };
                            prop_assert!(own, "rr-split crossed its partition");
                        }
                        let x = rep.idx();
                        if strategy == Routing::Plb && class == Class::F && roles_before[x] == Role::P && router.role(rep) == Role::P {
                            // A Freemium guest on a Premium replica: only
                            // under a pressure rule, only with CPU room,
                            // never after a Premium fallback under
                            // pressure-fallback (step 4 never picks a P
                            // replica while Freemium's role or Mixed is up).
                            let f_role_up = (0..k).any(|y| router.is_healthy(ReplicaId(y)) && roles_before[y] == Role::F);
                            if f_role_up {
                                prop_assert!(rule.takes_guests(), "Freemium on a Premium replica under {:?}", rule);
                                prop_assert!(room[x].is_some_and(|u| u < PRESSURE_CPU), "guest on {} at {:?}", rep, room[x]);
                                prop_assert!(!(premium_fell_back && rule == FreemiumBorrow::PressureFallback), "guest after a Premium fallback");
                            }
                        }
                        let mixed_up = (0..k).any(|y| router.is_healthy(ReplicaId(y)) && roles_before[y] == Role::M);
                        if class == Class::P && below.is_empty() && (bounded || !mixed_up) {
                            premium_fell_back = true;
                        }
                        open.push((rep.idx(), class));
                    } else if strategy != Routing::RrSplit {
                        prop_assert_eq!(router.survivors(), 0, "no capacity with healthy replicas");
                    }
                }
                Op::Release(i) if !open.is_empty() => {
                    let (rep, class) = open.swap_remove(i % open.len());
                    router.release(ReplicaId(rep), class);
                }
                Op::Release(_) => {}
                Op::Fail(i) | Op::Heal(i) => {
                    let rep = i % k;
                    let healthy = matches!(op, Op::Heal(_));
                    let changed = router.is_healthy(ReplicaId(rep)) != healthy;
                    health_changed |= changed;
                    router.set_health(ReplicaId(rep), healthy);
                    // Roles start at the reference split; repair (and so the
                    // target) applies from the first change of survivors on.
                    if strategy == Routing::Plb && changed {
                        let roles: Vec<Option<Role>> =
                            (0..k).map(|x| router.is_healthy(ReplicaId(x)).then(|| router.role(ReplicaId(x)))).collect();
                        prop_assert_eq!(count(&roles), target(router.survivors(), r, k), "after repair");
                    }
                }
            }
            let sessions: u32 = (0..k).map(|x| router.active(ReplicaId(x)).iter().sum::<u32>()).sum();
            prop_assert_eq!(sessions as usize, open.len());
        }
        // Pressure subsides: once every session has left, each borrowed
        // replica is back in its home role, so the roles are again what the
        // last repair (or the start) made them.
        if strategy == Routing::Plb {
            for (rep, class) in open.drain(..) {
                router.release(ReplicaId(rep), class);
            }
            let roles: Vec<Option<Role>> =
                (0..k).map(|x| router.is_healthy(ReplicaId(x)).then(|| router.role(ReplicaId(x)))).collect();
            let want = if health_changed { target(router.survivors(), r, k) } else { r };
            prop_assert_eq!(count(&roles), want, "after every session left");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Where no CPU is measured (a backend that does not read it), the
    /// pressure rules never lend: PLB decides exactly as with `never`.
    #[test]
    fn pressure_without_cpu_is_never((k, r) in reference(), ops in ops(), fallback in any::<bool>()) {
        let rule = if fallback { FreemiumBorrow::PressureFallback } else { FreemiumBorrow::Pressure };
        let mut a = Router::new(RouterConfig { freemium_borrow: rule, ..config(Routing::Plb, k, r, 0) });
        let mut b = Router::new(RouterConfig { freemium_borrow: FreemiumBorrow::Never, ..config(Routing::Plb, k, r, 0) });
        let mut open: Vec<(usize, Class)> = Vec::new();
        for op in ops {
            match op {
                Op::Admit(class) => {
                    let got = a.admit(class);
                    prop_assert_eq!(got, b.admit(class));
                    if let Some(rep) = got {
                        open.push((rep.idx(), class));
                    }
                }
                Op::Release(i) if !open.is_empty() => {
                    let (rep, class) = open.swap_remove(i % open.len());
                    a.release(ReplicaId(rep), class);
                    b.release(ReplicaId(rep), class);
                }
                Op::Fail(i) | Op::Heal(i) => {
                    a.set_health(ReplicaId(i % k), matches!(op, Op::Heal(_)));
                    b.set_health(ReplicaId(i % k), matches!(op, Op::Heal(_)));
                }
                Op::Release(_) | Op::Cpu(_) => {
                    a.observe_cpu(&vec![None; k]);
                }
            }
            let roles = |x: &Router| (0..k).map(|y| x.role(ReplicaId(y))).collect::<Vec<_>>();
            prop_assert_eq!(roles(&a), roles(&b));
        }
    }
}

/// An operation of the index comparison: the invariants' operations, and
/// a share set by the health watch (0, a half, or full).
#[derive(Clone, Debug)]
enum IndexOp {
    Op(Op),
    Share(usize, Class, u8),
}

fn index_ops(k: usize) -> impl Strategy<Value = Vec<IndexOp>> {
    prop::collection::vec(
        prop_oneof![
            8 => prop::bool::ANY.prop_map(|p| IndexOp::Op(Op::Admit(if p { Class::P } else { Class::F }))),
            6 => (0usize..512).prop_map(|i| IndexOp::Op(Op::Release(i))),
            1 => (0..k).prop_map(|x| IndexOp::Op(Op::Fail(x))),
            1 => (0..k).prop_map(|x| IndexOp::Op(Op::Heal(x))),
            2 => prop::collection::vec(prop::option::weighted(0.9, 0u8..=90), k).prop_map(|c| IndexOp::Op(Op::Cpu(c))),
            1 => (0..k, prop::bool::ANY, 0u8..=2).prop_map(|(x, p, s)| IndexOp::Share(x, if p { Class::P } else { Class::F }, s)),
        ],
        1..600,
    )
}

/// Everything a router shows of its replicas.
fn view(router: &Router, k: usize) -> Vec<(bool, Role, [u32; 2], u32)> {
    (0..k)
        .map(|x| {
            let r = ReplicaId(x);
            (router.is_healthy(r), router.role(r), router.active(r), router.guests(r))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The indexed router makes exactly the choices of the scan of every
    /// replica (ties to the lowest id) through any sequence of admissions,
    /// releases, failures, rejoins, CPU readings and shares, for every
    /// strategy and borrowing rule, at sizes where ties and spills are many.
    #[test]
    fn indexed_choices_equal_the_scans(
        (k, ops) in (1usize..=80).prop_flat_map(|k| (Just(k), index_ops(k))),
        strategy in prop::sample::select(Routing::ALL.to_vec()),
        rule in prop::sample::select(FreemiumBorrow::ALL.to_vec()),
        bounded in prop::bool::ANY,
        theta in 1u32..=4,
    ) {
        let (p, f) = (k / 3, k / 3);
        let cfg = RouterConfig {
            strategy,
            replicas: k,
            reference: [p, k - p - f, f],
            split: (k / 2, k - k / 2),
            theta,
            alpha: 0.7,
            mixed_bounded: bounded,
            freemium_borrow: rule,
        };
        let (mut indexed, mut scans) = (Router::new(cfg.clone()), Router::with_scans(cfg));
        let mut open: Vec<(ReplicaId, Class)> = Vec::new();
        for op in ops {
            match op {
                IndexOp::Op(Op::Admit(class)) => {
                    let pick = indexed.admit(class);
                    prop_assert_eq!(pick, scans.admit(class));
                    open.extend(pick.map(|r| (r, class)));
                }
                IndexOp::Op(Op::Release(i)) if !open.is_empty() => {
                    let (r, class) = open.swap_remove(i % open.len());
                    indexed.release(r, class);
                    scans.release(r, class);
                }
                IndexOp::Op(Op::Release(_)) => {}
                IndexOp::Op(Op::Fail(x)) | IndexOp::Op(Op::Heal(x)) if x >= k => {}
                IndexOp::Op(Op::Fail(x)) => {
                    indexed.set_health(ReplicaId(x), false);
                    scans.set_health(ReplicaId(x), false);
                }
                IndexOp::Op(Op::Heal(x)) => {
                    indexed.set_health(ReplicaId(x), true);
                    scans.set_health(ReplicaId(x), true);
                }
                IndexOp::Op(Op::Cpu(cpu)) => {
                    let used: Vec<Option<f64>> = (0..k).map(|x| cpu.get(x).copied().flatten().map(|u| f64::from(u) / 100.0)).collect();
                    indexed.observe_cpu(&used);
                    scans.observe_cpu(&used);
                }
                IndexOp::Share(x, class, s) => {
                    let mut shares = indexed.shares(ReplicaId(x));
                    shares[class.idx()] = f64::from(s) / 2.0;
                    indexed.set_shares(ReplicaId(x), shares);
                    scans.set_shares(ReplicaId(x), shares);
                }
            }
            prop_assert_eq!(view(&indexed, k), view(&scans, k));
            prop_assert_eq!(indexed.survivors(), scans.survivors());
            prop_assert_eq!(indexed.drain_changes(), scans.drain_changes());
        }
    }
}
