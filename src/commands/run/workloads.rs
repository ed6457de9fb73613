//! The workloads built into the binary (workloads/*.toml), by name:
//! `--workload NAME` finds them without a path. Their own module so that
//! the plan, the proxy child's flags and the findings map read them
//! without reaching into one another.

use std::path::Path;

/// The workloads built into the binary, by name: `--workload NAME` finds
/// them without a path (a file of that name, if one exists, wins).
pub const BUILT_IN_WORKLOADS: [(&str, &str); 5] = [
    ("paper", include_str!("../../../workloads/paper.toml")),
    ("paper-closed", include_str!("../../../workloads/paper-closed.toml")),
    ("analytics", include_str!("../../../workloads/analytics.toml")),
    ("closed-population", include_str!("../../../workloads/closed-population.toml")),
    ("held-sessions", include_str!("../../../workloads/held-sessions.toml")),
];

/// The text of the built-in workload `name` (one of [`BUILT_IN_WORKLOADS`]).
pub fn built_in(name: &str) -> &'static str {
    BUILT_IN_WORKLOADS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text).expect("a built-in workload")
}

/// The text of the built-in workload `name`, if `name` is one and no file
/// of that name exists.
pub fn built_in_workload(name: &Path) -> Option<&'static str> {
    if name.exists() {
        return None;
    }
    BUILT_IN_WORKLOADS.iter().find(|(n, _)| Path::new(n) == name).map(|(_, text)| *text)
}
