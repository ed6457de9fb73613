//! The plan's tests: flags validated into a plan, workloads and loads resolved.

use super::*;

/// The derived splits keep K=5's 2,1,2 and 3:2, sum to K, and give
/// rr-split a replica per class whenever K allows.
#[test]
fn splits_derived_from_k() {
    assert_eq!(default_reference(5), [2, 1, 2]);
    assert_eq!(default_reference(7), [3, 1, 3]);
    assert_eq!(default_split(5), (3, 2));
    assert_eq!(default_split(7), (4, 3));
    assert_eq!(default_split(2), (1, 1));
    for k in 1..=40 {
        assert_eq!(default_reference(k).iter().sum::<usize>(), k, "K={k}");
        let (p, f) = default_split(k);
        assert_eq!(p + f, k, "K={k}");
        assert!(k < 2 || (p >= 1 && f >= 1), "K={k}: {p}:{f}");
    }
}

fn msg(e: Error) -> String {
    match e {
        Error::Input(m) => m,
        other => panic!("{other:?}"),
    }
}

/// The defaults are never "given", under any strategy; each flag given
/// passes under its reader and is refused, naming the reader, under
/// every other strategy.
#[test]
fn a_flag_the_strategy_does_not_read_is_refused_naming_its_reader() {
    let none = super::super::args::default_run_args().common;
    for s in Strategy::ALL {
        assert!(refuse_unread(&none, s).is_ok(), "{s}: the defaults are not given");
    }
    for f in StrategyFlag::ALL {
        let mut c = none.clone();
        c.reference = (f == StrategyFlag::Reference).then(|| "2,1,2".into());
        c.split = (f == StrategyFlag::Split).then(|| "3:2".into());
        c.theta = (f == StrategyFlag::Theta).then_some(9);
        c.mixed_unbounded = f == StrategyFlag::MixedUnbounded;
        c.freemium_borrow = (f == StrategyFlag::FreemiumBorrow).then_some(crate::core::router::FreemiumBorrow::Never);
        assert!(f.given(&c), "{f:?}");
        for s in Strategy::ALL {
            match refuse_unread(&c, s) {
                Ok(()) => assert_eq!(s, f.reader(), "{f:?} under {s}"),
                Err(e) => {
                    assert_ne!(s, f.reader());
                    let want = format!("{}: read only by --strategy {}; --strategy is {s}", f.flag(), f.reader());
                    assert_eq!(msg(e), want);
                }
            }
        }
        f.clear(&mut c);
        assert!(!f.given(&c), "{f:?} cleared");
    }
}

/// Values are checked against K before the strategy is considered.
#[test]
fn values_are_checked_against_k_whatever_the_strategy() {
    let mut c = super::super::args::default_run_args().common;
    c.split = Some("3:3".into());
    assert_eq!(msg(check_splits(&c).unwrap_err()), "--split: `3:3` sums to 6, but there are 5 replicas");
    c.split = Some("5:0".into());
    assert!(msg(check_splits(&c).unwrap_err()).starts_with("--split: 5:0 leaves Freemium no replica"));
    c.split = None;
    c.reference = Some("2,2,2".into());
    assert!(msg(check_splits(&c).unwrap_err()).starts_with("--reference: `2,2,2` sums to 6"));
    c.reference = Some("1,3,1".into());
    assert_eq!(check_splits(&c).unwrap(), ([1, 3, 1], (3, 2)));
}

fn msg_of(e: Error) -> String {
    match e {
        Error::Input(m) => m,
        other => panic!("{other:?}"),
    }
}

#[test]
fn named_workloads_resolve_without_a_path_and_an_unknown_name_is_refused() {
    assert_eq!(load_workload(None, DEFAULT_WORKLOAD).unwrap().name, "paper");
    for (name, _) in BUILT_IN_WORKLOADS {
        assert_eq!(load_workload(Some(Path::new(name)), DEFAULT_WORKLOAD).unwrap().name, name);
    }
    let e = msg_of(load_workload(Some(Path::new("analytic")), DEFAULT_WORKLOAD).unwrap_err());
    assert_eq!(
        e,
        "--workload: `analytic` is neither a file nor a built-in workload (paper, paper-closed, analytics, closed-population, held-sessions)"
    );
    let e = msg_of(load_workload(Some(Path::new("/nonexistent/w.toml")), DEFAULT_WORKLOAD).unwrap_err());
    assert!(e.starts_with("--workload: cannot read /nonexistent/w.toml"), "{e}");
}

#[test]
fn every_built_in_pause_is_its_operating_point_at_the_written_costs() {
    for (name, text) in BUILT_IN_WORKLOADS {
        let w = Workload::parse(text).unwrap();
        let Some(Ok(sized)) = w.between_at_operating_point(5, 0.3, (3, 2), 25) else { continue };
        let written = w.session.between_ms;
        assert!((sized / written - 1.0).abs() < 0.001, "{name}: between_ms {written}, the point's {sized}");
    }
}

#[test]
fn load_sets_the_pause_between_sessions_to_offer_that_share_of_the_cluster() {
    let mut paper = load_workload(Some(Path::new("paper-closed")), DEFAULT_WORKLOAD).unwrap();
    let closed = msg_of(set_load(&mut paper, 0.6, 1000, 25, 5, 0.3).unwrap_err());
    assert!(closed.starts_with("--load: the workload `paper-closed` is a closed population"), "{closed}");
    let w0 = load_workload(None, STEADY_WORKLOAD).unwrap();
    assert_eq!(w0.name, "analytics");
    for load in [0.2, 0.6, 1.2] {
        let mut w = w0.clone();
        set_load(&mut w, load, 1000, 25, 5, 0.3).unwrap();
        let got = w.offered_utilisation(1000, 25, 5, 0.3);
        assert!((got - load).abs() < 1e-6, "load {load}: offered {got}");
    }
    let mut a = w0.clone();
    set_load(&mut a, 0.6, 1000, 25, 5, 0.3).unwrap();
    let mut b = w0.clone();
    set_load(&mut b, 1.2, 1000, 25, 5, 0.3).unwrap();
    assert!(b.session.between_ms < a.session.between_ms && a.session.between_ms < w0.session.between_ms);
    let mut w = w0.clone();
    let msg = |e: Error| match e {
        Error::Input(m) => m,
        other => panic!("{other:?}"),
    };
    let too_much = msg(set_load(&mut w, 50.0, 10, 25, 5, 0.3).unwrap_err());
    assert!(too_much.starts_with("--load: 10 clients offer at most "), "{too_much}");
    assert!(msg(set_load(&mut w, 0.0, 10, 25, 5, 0.3).unwrap_err()).starts_with("--load: must be a positive"));
    assert!(msg(set_load(&mut w, f64::NAN, 10, 25, 5, 0.3).unwrap_err()).starts_with("--load: must be a positive"));
    assert_eq!(w.session.between_ms, w0.session.between_ms, "a refused load leaves the workload alone");
}

#[test]
fn local_refuses_a_partition_naming_the_event() {
    let ev = |t_s, action| FaultEvent { t_s, replica: crate::core::model::ReplicaId(0), action };
    let ok = [ev(1.0, Action::Slow(0.5)), ev(2.0, Action::Restore), ev(3.0, Action::Pause)];
    assert!(refuse_partition_on_local("x", &ok).is_ok());
    let cut = [ev(1.0, Action::Slow(0.5)), ev(2.0, Action::Partition), ev(3.0, Action::Heal)];
    let e = refuse_partition_on_local("cut.toml", &cut).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let msg = e.to_string();
    assert!(msg.starts_with("--faults: cut.toml: event[1]: the local backend cannot partition"), "{msg}");
}
