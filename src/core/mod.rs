//! The pure core: vocabulary, PLB roles, strategies, workload and fault
//! schedules, the run controller, phase cutting and metric aggregation.
//! Nothing in here performs I/O or reads a clock, so every backend (and
//! every test) drives the same code with its own notion of time.

pub mod admission;
pub mod calibration;
pub mod chacha;
pub mod control;
pub mod degradation;
pub mod detect;
pub mod faults;
pub mod health;
pub mod metrics;
pub mod model;
pub mod operating_point;
pub mod outcome;
pub mod phases;
pub mod proxy_tier;
pub mod recovery;
pub mod roles;
pub mod router;
pub mod saturation;
pub mod schedule;
pub mod second_latency;
pub mod settings;
pub mod status;
pub mod stream;
pub mod tier;
pub mod validity;
pub mod watch;
pub mod workload;
