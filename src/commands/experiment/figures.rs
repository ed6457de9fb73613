//! The paper's figures from an experiment's runs (figures.json; docs/paper.md reads them):
//! RQ1 (Premium-side fault, plb vs rr-split), RQ2 (cascade, plb vs rr per
//! phase, Fig. 4/5 style) and RQ3 (cascade, plb's p95 against each class's
//! own baseline, Fig. 6 style). Pure functions over run summaries, kept
//! apart from the grid runner so reports and the README can reuse them.

use crate::core::model::Class;
use crate::core::router::Strategy;
use crate::report::experiment::{metric, DECIMALS};
use crate::report::summary::Summary;
use crate::stats::{self, Spread};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The phases of the cascade preset, in order (RQ2, RQ3).
pub const CASCADE_PHASES: [&str; 5] = ["baseline", "down1", "down2", "rejoin1", "rejoin2"];

/// The paper's figures as data (figures.json): RQ1 from `premium-fault`
/// runs, RQ2 and RQ3 from `cascade` runs. Every spread is median and
/// quartiles across repeats (see `quantiles`); `seeds` name the runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Quantile definition.
    pub quantiles: String,
    /// RQ1, one entry per mix with both plb and rr-split runs.
    pub rq1: Vec<Rq1>,
    /// RQ2 (Fig. 4/5 style), one entry per mix with both plb and rr runs.
    pub rq2: Vec<Rq2>,
    /// RQ3 (Fig. 6 style), one entry per mix with plb runs.
    pub rq3: Vec<Rq3>,
}

/// RQ1: a Premium-side fault, plb vs rr-split, in phase `down1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq1 {
    /// Mix `P:F`.
    pub mix: String,
    /// Always `down1`.
    pub phase: String,
    /// PLB.
    pub plb: Rq1Side,
    /// The static split (3RR+2RR by default).
    pub rr_split: Rq1Side,
    /// Median Premium retention of plb minus that of rr-split, percentage points.
    pub retention_gain_pp: Option<f64>,
}

/// RQ1 figures of one strategy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq1Side {
    /// Seeds of the runs it comes from.
    pub seeds: Vec<u64>,
    /// Premium goodput retention in down1.
    pub premium_retention: Spread,
    /// u_mean over available replicas in down1.
    pub u_mean: Spread,
    /// CV of u in down1.
    pub cv: Spread,
}

/// RQ2: the cascade, plb vs rr, for one mix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq2 {
    /// Mix `P:F`.
    pub mix: String,
    /// Seeds of the plb runs.
    pub plb_seeds: Vec<u64>,
    /// Seeds of the rr runs.
    pub rr_seeds: Vec<u64>,
    /// Median Premium goodput in down2, plb / rr.
    pub premium_goodput_ratio_down2: Option<f64>,
    /// One row per phase and class.
    pub rows: Vec<Rq2Row>,
}

/// One figure for plb and rr.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Versus {
    /// PLB.
    pub plb: Spread,
    /// Shared round robin.
    pub rr: Spread,
}

/// RQ2 figures of one phase and class.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq2Row {
    /// Phase.
    pub phase: String,
    /// Class.
    pub class: Class,
    /// Goodput, queries/s.
    pub goodput_qps: Versus,
    /// p95 latency, ms.
    pub p95_ms: Versus,
    /// Mean session lifetime, s.
    pub lifetime_mean_s: Versus,
    /// Median p95 of plb relative to rr, percent (negative: plb lower).
    pub p95_change_pct: Option<f64>,
}

/// RQ3: plb's p95 per class and phase relative to the class's own baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq3 {
    /// Mix `P:F`.
    pub mix: String,
    /// Seeds of the plb runs.
    pub seeds: Vec<u64>,
    /// One row per class and post-fault phase.
    pub rows: Vec<Rq3Row>,
}

/// RQ3 figures of one class and phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rq3Row {
    /// Class.
    pub class: Class,
    /// Phase.
    pub phase: String,
    /// p95 in the phase, ms.
    pub p95_ms: Spread,
    /// Median p95 of the class in the baseline, ms.
    pub baseline_p95_ms: Option<f64>,
    /// Median p95 relative to the median baseline p95, percent.
    pub change_pct: Option<f64>,
}

fn select<'a>(all: &'a [Summary], fault: &str, mix: &str, strategy: Strategy) -> Vec<&'a Summary> {
    all.iter()
        .filter(|s| s.settings.faults == fault && s.settings.mix == mix && s.settings.strategy == strategy.name())
        .collect()
}

fn spread_of(runs: &[&Summary], phase: &str, class: Class, m: &str) -> Spread {
    Spread::of_options(runs.iter().map(|s| s.phase(phase, class).and_then(|r| metric(r, m)))).rounded(DECIMALS)
}

fn seeds(runs: &[&Summary]) -> Vec<u64> {
    runs.iter().map(|s| s.settings.seed).collect()
}

/// Derived figures (ratios, percent changes) to 4 decimals.
fn round(v: Option<f64>) -> Option<f64> {
    v.map(|v| (v * 1e4).round() / 1e4)
}

fn mixes_of(all: &[Summary], fault: &str) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in all.iter().filter(|s| s.settings.faults == fault) {
        if !v.contains(&s.settings.mix) {
            v.push(s.settings.mix.clone());
        }
    }
    v
}

/// Computes the paper's figures from per-run summaries (any order). Pure.
pub fn figures(all: &[Summary]) -> Figures {
    let rq1 = mixes_of(all, "premium-fault")
        .into_iter()
        .filter_map(|mix| {
            let side = |st| {
                let runs = select(all, "premium-fault", &mix, st);
                (!runs.is_empty()).then(|| Rq1Side {
                    seeds: seeds(&runs),
                    premium_retention: spread_of(&runs, "down1", Class::P, "retention"),
                    u_mean: spread_of(&runs, "down1", Class::P, "cpu_mean"),
                    cv: spread_of(&runs, "down1", Class::P, "cpu_cv"),
                })
            };
            let (plb, rr_split) = (side(Strategy::Plb)?, side(Strategy::RrSplit)?);
            let gain =
                plb.premium_retention.median.zip(rr_split.premium_retention.median).map(|(a, b)| (a - b) * 100.0);
            let gain = round(gain);
            Some(Rq1 { mix, phase: "down1".into(), plb, rr_split, retention_gain_pp: gain })
        })
        .collect();
    let rq2 = mixes_of(all, "cascade").into_iter().filter_map(|mix| rq2(all, mix)).collect();
    let rq3 = mixes_of(all, "cascade").into_iter().filter_map(|mix| rq3(all, mix)).collect();
    Figures { quantiles: stats::QUANTILE_DEFINITION.into(), rq1, rq2, rq3 }
}

fn rq2(all: &[Summary], mix: String) -> Option<Rq2> {
    let plb = select(all, "cascade", &mix, Strategy::Plb);
    let rr = select(all, "cascade", &mix, Strategy::Rr);
    if plb.is_empty() || rr.is_empty() {
        return None;
    }
    let vs = |phase: &str, class, m: &str| Versus {
        plb: spread_of(&plb, phase, class, m),
        rr: spread_of(&rr, phase, class, m),
    };
    let mut rows = Vec::new();
    for phase in CASCADE_PHASES {
        for class in Class::ALL {
            let p95 = vs(phase, class, "p95_ms");
            rows.push(Rq2Row {
                phase: phase.into(),
                class,
                goodput_qps: vs(phase, class, "goodput_qps"),
                p95_change_pct: round(stats::pct_change(p95.plb.median, p95.rr.median)),
                p95_ms: p95,
                lifetime_mean_s: vs(phase, class, "lifetime_mean_s"),
            });
        }
    }
    let g = vs("down2", Class::P, "goodput_qps");
    Some(Rq2 {
        mix,
        plb_seeds: seeds(&plb),
        rr_seeds: seeds(&rr),
        premium_goodput_ratio_down2: round(stats::ratio(g.plb.median, g.rr.median)),
        rows,
    })
}

fn rq3(all: &[Summary], mix: String) -> Option<Rq3> {
    let plb = select(all, "cascade", &mix, Strategy::Plb);
    if plb.is_empty() {
        return None;
    }
    let mut rows = Vec::new();
    for class in Class::ALL {
        let base = spread_of(&plb, "baseline", class, "p95_ms").median;
        for phase in &CASCADE_PHASES[1..] {
            let p95 = spread_of(&plb, phase, class, "p95_ms");
            rows.push(Rq3Row {
                class,
                phase: phase.to_string(),
                change_pct: round(stats::pct_change(p95.median, base)),
                p95_ms: p95,
                baseline_p95_ms: base,
            });
        }
    }
    Some(Rq3 { mix, seeds: seeds(&plb), rows })
}

/// `v` at `prec` decimals, `-` when missing (also the cell summary's).
pub(super) fn num(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.prec$}"))
}

fn signed(v: Option<f64>, prec: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:+.prec$}"))
}

fn spread_text(s: &Spread, prec: usize) -> String {
    format!("{} [{}, {}]", num(s.median, prec), num(s.q1, prec), num(s.q3, prec))
}

/// The figures as a compact text table (printed at the end of `plbbench experiment`).
pub fn render_figures(f: &Figures) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\nRQ1  premium-fault, phase down1, plb vs rr-split: median [q1, q3] over n runs");
    if f.rq1.is_empty() {
        let _ = writeln!(o, "  (needs premium-fault runs of plb and rr-split)");
    } else {
        let _ = writeln!(
            o,
            "  {:<6} {:<9} {:>2}  {:<24} {:<24} {:<24}",
            "mix", "strategy", "n", "P retention", "u_mean", "cv"
        );
    }
    for r in &f.rq1 {
        for (name, s) in [("plb", &r.plb), ("rr-split", &r.rr_split)] {
            let _ = writeln!(
                o,
                "  {:<6} {:<9} {:>2}  {:<24} {:<24} {:<24}",
                r.mix,
                name,
                s.seeds.len(),
                spread_text(&s.premium_retention, 3),
                spread_text(&s.u_mean, 3),
                spread_text(&s.cv, 3)
            );
        }
        let _ = writeln!(o, "  {:<6} P retention gain plb - rr-split: {} pp", r.mix, signed(r.retention_gain_pp, 1));
    }
    render_rq2(&mut o, &f.rq2);
    render_rq3(&mut o, &f.rq3);
    let _ = writeln!(o, "\nquantiles: {}", f.quantiles);
    o
}

fn render_rq2(o: &mut String, rq2: &[Rq2]) {
    let _ = writeln!(o, "\nRQ2  cascade, plb vs rr: medians; dp95 = p95 of plb relative to rr (negative: plb lower)");
    if rq2.is_empty() {
        let _ = writeln!(o, "  (needs cascade runs of plb and rr)");
    }
    for m in rq2 {
        let _ = writeln!(
            o,
            "  mix {} ({} plb, {} rr runs): Premium goodput in down2 plb/rr = {}",
            m.mix,
            m.plb_seeds.len(),
            m.rr_seeds.len(),
            num(m.premium_goodput_ratio_down2, 2)
        );
        let _ = writeln!(
            o,
            "    {:<8} {:<2} {:>16} {:>20} {:>8} {:>16}",
            "phase", "c", "goodput plb/rr", "p95_ms plb/rr", "dp95%", "life_s plb/rr"
        );
        for r in &m.rows {
            let pair = |v: &Versus, p| format!("{}/{}", num(v.plb.median, p), num(v.rr.median, p));
            let _ = writeln!(
                o,
                "    {:<8} {:<2} {:>16} {:>20} {:>8} {:>16}",
                r.phase,
                r.class.to_string(),
                pair(&r.goodput_qps, 2),
                pair(&r.p95_ms, 1),
                signed(r.p95_change_pct, 1),
                pair(&r.lifetime_mean_s, 2)
            );
        }
    }
}

fn render_rq3(o: &mut String, rq3: &[Rq3]) {
    let _ = writeln!(o, "\nRQ3  cascade, plb: median p95 change vs the class's own baseline (%)");
    if rq3.is_empty() {
        let _ = writeln!(o, "  (needs cascade runs of plb)");
        return;
    }
    let _ = write!(o, "  {:<6} {:<2} {:>3} {:>12}", "mix", "c", "n", "base p95_ms");
    for p in &CASCADE_PHASES[1..] {
        let _ = write!(o, " {p:>8}");
    }
    let _ = writeln!(o);
    for m in rq3 {
        for class in Class::ALL {
            let rows: Vec<&Rq3Row> = m.rows.iter().filter(|r| r.class == class).collect();
            let base = rows.first().and_then(|r| r.baseline_p95_ms);
            let _ = write!(o, "  {:<6} {:<2} {:>3} {:>12}", m.mix, class.to_string(), m.seeds.len(), num(base, 1));
            for r in rows {
                let _ = write!(o, " {:>8}", signed(r.change_pct, 1));
            }
            let _ = writeln!(o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::run::args::default_run_args;

    /// A real cascade summary from a tiny simulated run, used as a template.
    fn template() -> Summary {
        let dir = std::env::temp_dir().join(format!("plbbench-figures-{}", std::process::id()));
        let mut a = default_run_args();
        a.common.cluster = crate::core::settings::ClusterKind::Sim;
        a.common.clients = 40;
        a.common.time_scale = 0.1;
        a.faults = Some("cascade".into());
        a.out = Some(dir.clone());
        a.force = true;
        a.common.quiet = true;
        let out = crate::commands::run::execute(&crate::commands::run::plan::Plan::new(a).unwrap()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        out.summary
    }

    /// `base` as a run of `strategy`, `mix`, `fault`, `seed` with P p95,
    /// goodput and retention set in every phase from `per_phase`.
    fn fake(
        base: &Summary,
        strategy: &str,
        fault: &str,
        seed: u64,
        per_phase: &dyn Fn(&str) -> (f64, f64, f64),
    ) -> Summary {
        let mut s = base.clone();
        s.settings.strategy = strategy.into();
        s.settings.faults = fault.into();
        s.settings.mix = "25:75".into();
        s.settings.seed = seed;
        for r in s.phases.iter_mut().filter(|r| r.class == Class::P) {
            let (p95, goodput, retention) = per_phase(&r.phase);
            r.p95_ms = Some(p95);
            r.goodput_qps = goodput;
            r.retention = Some(retention);
        }
        s
    }

    #[test]
    fn figures_from_hand_made_runs() {
        let base = template();
        let mut all = Vec::new();
        for (i, (ret_plb, ret_split)) in [(0.9, 0.6), (0.8, 0.5), (1.0, 0.7)].into_iter().enumerate() {
            let seed = i as u64 + 1;
            all.push(fake(&base, "plb", "premium-fault", seed, &|_| (1.0, 1.0, ret_plb)));
            all.push(fake(&base, "rr-split", "premium-fault", seed, &|_| (1.0, 1.0, ret_split)));
            let k = i as f64;
            all.push(fake(&base, "plb", "cascade", seed, &|p| match p {
                "baseline" => (50.0 + 10.0 * k, 1.0, 1.0),
                _ => (80.0 + 10.0 * k, 10.0 + 2.0 * k, 1.0),
            }));
            all.push(fake(&base, "rr", "cascade", seed, &|_| (100.0 + 10.0 * k, 5.0 + k, 1.0)));
        }
        let f = figures(&all);
        assert_eq!(f.rq1.len(), 1);
        let r = &f.rq1[0];
        assert_eq!(r.plb.seeds, [1, 2, 3]);
        assert_eq!((r.plb.premium_retention.q1, r.plb.premium_retention.median), (Some(0.85), Some(0.9)));
        assert_eq!(r.retention_gain_pp, Some(30.0));
        let m = &f.rq2[0];
        assert_eq!(m.premium_goodput_ratio_down2, Some(2.0));
        let down2 = m.rows.iter().find(|r| r.phase == "down2" && r.class == Class::P).unwrap();
        assert_eq!((down2.p95_ms.plb.median, down2.p95_ms.rr.median), (Some(90.0), Some(110.0)));
        assert_eq!(down2.p95_change_pct, Some(-18.1818));
        let rq3 = &f.rq3[0];
        let d2 = rq3.rows.iter().find(|r| r.phase == "down2" && r.class == Class::P).unwrap();
        assert_eq!((d2.baseline_p95_ms, d2.change_pct), (Some(60.0), Some(50.0)));
        let text = render_figures(&f);
        assert!(text.contains("+30.0 pp") && text.contains("plb/rr = 2.00") && text.contains("-18.2"), "{text}");
    }

    #[test]
    fn missing_strategies_leave_figures_empty() {
        let f = figures(&[]);
        assert!(f.rq1.is_empty() && f.rq2.is_empty() && f.rq3.is_empty());
        assert!(render_figures(&f).contains("needs premium-fault runs"));
    }
}
