//! `plbbench proxy` (issue 20, in progress): a session-level PostgreSQL
//! router that puts PLB in front of clients plbbench did not write (psql,
//! pgbench, applications). A session's class comes from its startup
//! packet; the replica is chosen once, when the client connects, by the
//! same run controller as `run`; after authentication bytes flow both ways
//! unparsed. What exists so far is the pure part: reading a client's first
//! packet as a server does ([`startup`]) and the class rule
//! ([`class_rule`]).

pub mod class_rule;
pub mod startup;
