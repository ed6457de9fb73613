//! The paper's findings read from one map cell's figures (issue 49), each
//! with the band the paper reports, so a map can outline where a finding
//! holds. Pure: figures in, numbers out.

use crate::commands::experiment::figures::Figures;
use crate::core::model::Class;

/// One finding of the paper, and its band.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finding {
    /// Column name in map.csv and the figure's file name.
    pub id: &'static str,
    /// What it is, for the figure's title.
    pub title: &'static str,
    /// The paper's band, inclusive (`f64::INFINITY` for "at least").
    pub band: (f64, f64),
    /// Where it comes from in the figures.
    source: Source,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Source {
    /// RQ1: Premium retention gain of plb over rr-split in down1, pp.
    Rq1,
    /// RQ2: Premium goodput of plb over rr in down2.
    Rq2Ratio,
    /// Fig. 5: (p95 of rr - p95 of plb) / p95 of rr, percent.
    Fig5(&'static str, Class),
    /// RQ3: plb's p95 against the class's own baseline, percent.
    Rq3(&'static str, Class),
}

/// Every finding the map draws. Bands: docs/paper.md, "What the paper
/// reports" (RQ1 +26..+28 pp at every mix; RQ2's ratio above 2 and its
/// Premium p95 18.2% below 5RR's; Fig. 5 and RQ3 from the figures' ranges).
pub const FINDINGS: [Finding; 9] = [
    Finding {
        id: "rq1_gain_pp",
        title: "RQ1: Premium retention gain over 3RR+2RR in down1 (pp)",
        band: (26.0, 28.0),
        source: Source::Rq1,
    },
    Finding {
        id: "rq2_goodput_ratio",
        title: "RQ2: Premium goodput, PLB / 5RR, in down2",
        band: (2.0, f64::INFINITY),
        source: Source::Rq2Ratio,
    },
    Finding {
        id: "fig5_p_down1_pct",
        title: "Fig. 5: Premium p95 below 5RR's in down1 (%)",
        band: (6.0, 33.4),
        source: Source::Fig5("down1", Class::P),
    },
    Finding {
        id: "fig5_p_down2_pct",
        title: "Fig. 5 / RQ2: Premium p95 below 5RR's in down2 (%)",
        band: (6.0, 33.4),
        source: Source::Fig5("down2", Class::P),
    },
    Finding {
        id: "fig5_f_down1_pct",
        title: "Fig. 5: Freemium p95 below 5RR's in down1 (%)",
        band: (-31.8, -14.0),
        source: Source::Fig5("down1", Class::F),
    },
    Finding {
        id: "fig5_f_down2_pct",
        title: "Fig. 5: Freemium p95 below 5RR's in down2 (%)",
        band: (-31.8, -14.0),
        source: Source::Fig5("down2", Class::F),
    },
    Finding {
        id: "rq3_p_down1_pct",
        title: "RQ3: Premium p95 against its baseline in down1 (%)",
        band: (-18.6, -4.7),
        source: Source::Rq3("down1", Class::P),
    },
    Finding {
        id: "rq3_p_down2_pct",
        title: "RQ3: Premium p95 against its baseline in down2 (%)",
        band: (-23.0, -15.3),
        source: Source::Rq3("down2", Class::P),
    },
    Finding {
        id: "rq3_f_down2_pct",
        title: "RQ3: Freemium p95 against its baseline in down2 (%)",
        band: (21.6, 33.9),
        source: Source::Rq3("down2", Class::F),
    },
];

impl Finding {
    /// Its value at `mix` in `fig`, if the figures have it.
    pub fn value(&self, fig: &Figures, mix: &str) -> Option<f64> {
        match self.source {
            Source::Rq1 => fig.rq1.iter().find(|r| r.mix == mix)?.retention_gain_pp,
            Source::Rq2Ratio => fig.rq2.iter().find(|r| r.mix == mix)?.premium_goodput_ratio_down2,
            Source::Fig5(phase, class) => {
                let rq2 = fig.rq2.iter().find(|r| r.mix == mix)?;
                let row = rq2.rows.iter().find(|r| r.phase == phase && r.class == class)?;
                row.p95_change_pct.map(|c| -c)
            }
            Source::Rq3(phase, class) => {
                let rq3 = fig.rq3.iter().find(|r| r.mix == mix)?;
                rq3.rows.iter().find(|r| r.phase == phase && r.class == class)?.change_pct
            }
        }
    }

    /// Whether `v` lies in the paper's band.
    pub fn holds(&self, v: f64) -> bool {
        v >= self.band.0 && v <= self.band.1
    }

    /// The band as text: `26..28`, `>= 2`.
    pub fn band_text(&self) -> String {
        match self.band.1.is_finite() {
            true => format!("{}..{}", self.band.0, self.band.1),
            false => format!(">= {}", self.band.0),
        }
    }
}

/// The share of a session's CPU spent connecting (set-up and exit) at a
/// `premium_pct` mix, from the workload's costs: what the paper's regime
/// spends on connection churn.
pub fn connect_share(w: &crate::core::workload::Workload, premium_pct: u32) -> f64 {
    let s = &w.session;
    let n = f64::from(s.queries_min + s.queries_max) / 2.0;
    let p = f64::from(premium_pct) / 100.0;
    let mean = p * w.mean_cpu_ms(Class::P) + (1.0 - p) * w.mean_cpu_ms(Class::F);
    let conn = s.connect_cpu_ms + s.close_cpu_ms;
    conn / (n * mean + conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_hold_inclusively_and_read_as_text() {
        let rq1 = FINDINGS[0];
        assert!(rq1.holds(26.0) && rq1.holds(28.0) && !rq1.holds(25.9));
        assert_eq!(rq1.band_text(), "26..28");
        assert_eq!(FINDINGS[1].band_text(), ">= 2");
        assert!(FINDINGS[1].holds(9.0));
        let ids: std::collections::BTreeSet<_> = FINDINGS.iter().map(|f| f.id).collect();
        assert_eq!(ids.len(), FINDINGS.len(), "ids are unique");
    }

    #[test]
    fn the_paper_workloads_spend_seven_and_twelve_percent_connecting() {
        // docs/paper.md's fit table: 11.8% for the pick (24 queries), 7.4%
        // for the closed population it replaced (40 queries).
        let share = |i: usize| {
            let w = crate::core::workload::Workload::parse(crate::commands::run::plan::BUILT_IN_WORKLOADS[i].1);
            connect_share(&w.unwrap(), 25)
        };
        assert!((0.11..0.125).contains(&share(0)), "paper {}", share(0));
        assert!((0.06..0.08).contains(&share(1)), "paper-closed {}", share(1));
    }
}
