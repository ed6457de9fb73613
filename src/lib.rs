//! plbbench: measures how a replicated PostgreSQL service degrades when
//! replicas fail, and whether a service-class-aware router (PLB) protects
//! Premium users. `run(cli)` is the whole program; `main.rs` only calls it.

pub mod core;
