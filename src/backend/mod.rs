//! The backends that execute a run's sessions: the simulator in virtual time
//! ([`sim`]) and the real driver over tokio-postgres ([`driver`], with its
//! Prometheus endpoint in [`live_metrics`]). Both are adapters around the one
//! run controller (`core::control`): they carry out its decisions and feed
//! it what happens; neither decides routing, roles, health, admission or
//! modes itself. The real clusters they run against are in `cluster`.

pub(crate) mod clock;
pub(crate) mod closed_loop;
pub(crate) mod driver;
pub(crate) mod generator_feed;
pub(crate) mod live_metrics;
pub(crate) mod probe;
pub(crate) mod proxy_feed;
pub(crate) mod remote;
pub(crate) mod signals;
pub(crate) mod sim;
pub(crate) mod waiting;
pub(crate) mod wire;
