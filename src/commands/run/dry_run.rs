//! `plbbench run --dry-run`: the resolved plan (what would run, its
//! timeline, phases and fault schedule, the routing parameters and the
//! load the workload offers) printed without starting anything, as text or
//! as one JSON object. The same validation as a run, so a plan that prints
//! is a plan that starts.

use super::plan::Plan;
use super::settings;
use crate::commands::Format;

/// The offered CPU, as fractions of the budgets (the cluster's, the
/// busier rr-split partition's).
pub fn offered(plan: &Plan) -> (f64, f64) {
    let w = &plan.workload;
    (
        w.offered_utilisation(plan.clients, plan.premium_pct, plan.replicas, plan.cpus),
        w.partition_utilisation(plan.clients, plan.premium_pct, plan.router.split, plan.cpus),
    )
}

/// How saturated a population of `clients` closed-loop clients is that
/// offers `offered` of the CPU budget at zero queueing: N* = T / offered
/// is the population the budget serves without queueing (the asymptotic
/// bound of a closed system), and T/N* says how far past it the run is.
pub fn load_line(clients: u32, offered: f64) -> String {
    let n_star = f64::from(clients) / offered.max(1e-9);
    let regime = if offered > 1.0 {
        "saturated: clients queue for the CPU, and latency is set by T, not by arrivals"
    } else {
        "below saturation: latency is set by service, not by queueing for the CPU"
    };
    format!(
        "load: offers {:.0}% of the CPU budget at zero queueing; T={clients} is {offered:.2}x N*={n_star:.0}, the clients it serves without queueing ({regime})",
        offered * 100.0
    )
}

/// The plan in `format`.
pub fn render(plan: &Plan, format: Format) -> String {
    let s = settings(plan);
    let (cluster, partition) = offered(plan);
    match format {
        Format::Json => serde_json::json!({
            "settings": s,
            "cpus": plan.cpus,
            "phases": plan.phases,
            "faults": plan.faults,
            "offered_utilisation": cluster,
            "rr_split_partition_utilisation": partition,
            "tier": plan.tier.map(|t| serde_json::json!({
                "routers": t.routers, "refresh_ms": t.refresh_s * 1e3, "quotas": t.quotas
            })),
            "out": plan.out,
        })
        .to_string(),
        Format::Text => {
            let mut out = format!(
                "{} · mix {} · T={} · faults {} · {} cluster · K={} · C={} · {:.0} s (time scale {})\n",
                s.strategy, s.mix, s.clients, s.faults, s.cluster, s.replicas, plan.cpus, s.duration_s, s.time_scale
            );
            out.push_str(&format!(
                "offered CPU: {:.0}% of the cluster's budget; {:.0}% of the busier rr-split {} partition\n",
                cluster * 100.0,
                partition * 100.0,
                s.split
            ));
            out.push_str(&load_line(plan.clients, cluster));
            out.push('\n');
            out.push_str(&format!(
                "routing: reference {} · theta {} · alpha {} · detection {} · admission {} · recovery {}\n",
                s.reference, s.theta, s.alpha, s.detection, s.admission, s.recovery
            ));
            if let Some(t) = plan.tier {
                out.push_str(&format!(
                    "tier: {} routers, a leader and {} followers on snapshots every {} ms{} (simulated)\n",
                    t.routers,
                    t.routers - 1,
                    t.refresh_s * 1e3,
                    if t.quotas { ", within quotas of theta / routers" } else { "" }
                ));
            }
            out.push_str("phases:\n");
            for p in &plan.phases {
                out.push_str(&format!("  {:<9} {:>7.1} - {:>7.1} s  {} up\n", p.name, p.start_s, p.end_s, p.survivors));
            }
            out.push_str("faults:\n");
            for f in &plan.faults {
                out.push_str(&format!("  {:>7.1} s  {}  {}\n", f.t_s, f.replica, f.action));
            }
            out.push_str(&format!("would write {}\n", plan.out.display()));
            out
        }
    }
}
