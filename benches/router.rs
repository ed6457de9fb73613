//! Router micro-benchmarks (issue 7): one admission decision plus its
//! release, for plb and rr, at K = 5, 50 and 1,000 replicas, with the
//! router holding a realistic number of active sessions (10 per replica,
//! mix 25:75, about what T=1000 at 70% of the budget keeps open at K=5;
//! scaled with K). Targets: <= 1 us at K=5 and <= 20 us at K=1,000.
//!
//! `cargo bench --bench router` (criterion; the medians are in the README).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use plbbench::core::model::Class;
use plbbench::core::router::{FreemiumBorrow, Router, RouterConfig, Strategy};

/// A router over `k` replicas (reference and split scaled from 2,1,2 and
/// 3:2) with 10 sessions per replica already admitted, one in four Premium.
fn loaded(strategy: Strategy, k: usize) -> Router {
    let p = (2 * k).div_ceil(5);
    let m = (k / 5).max(if k >= 3 { 1 } else { 0 });
    let cfg = RouterConfig {
        strategy,
        replicas: k,
        reference: [p, m, k - p - m],
        split: ((3 * k).div_ceil(5), k - (3 * k).div_ceil(5)),
        theta: 10,
        alpha: 0.7,
        mixed_bounded: false,
        freemium_borrow: FreemiumBorrow::Surplus,
    };
    let mut router = Router::new(cfg);
    for i in 0..10 * k {
        let class = if i % 4 == 0 { Class::P } else { Class::F };
        router.admit(class).expect("capacity while every replica is up");
    }
    router
}

fn admit_release(c: &mut Criterion) {
    let mut group = c.benchmark_group("admit+release");
    for strategy in [Strategy::Plb, Strategy::Rr] {
        for k in [5usize, 50, 1000] {
            let mut router = loaded(strategy, k);
            let mut i = 0u64;
            group.bench_function(BenchmarkId::new(strategy.name(), k), |b| {
                b.iter(|| {
                    i += 1;
                    let class = if i % 4 == 0 { Class::P } else { Class::F };
                    let r = router.admit(black_box(class)).expect("capacity");
                    router.release(r, class);
                    // As the driver does after every decision (borrow and return log role changes).
                    black_box(router.drain_changes());
                    black_box(r)
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, admit_release);
criterion_main!(benches);
