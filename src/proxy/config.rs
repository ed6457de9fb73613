//! The proxy's config file (docs/proxy.md, "The config file"), validated as
//! the workload is: TOML, every key known (an unknown one is refused with
//! its line and field), every key with a default (no file is an empty one);
//! PgBouncer's users file (`"name" "secret"` per line) it may point to; and
//! the rule that keeps trust authentication on loopback unless the file
//! says `auth = "trust"`. Pure: text in, typed settings or a one-line error
//! out.

use super::class_rule::ClassRule;
use super::scram::Secret;
use super::tls::TlsConfig;
use serde::Deserialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `auth`: how clients log in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Auth {
    /// No password asked, on any listen address (PgBouncer's `auth_type = trust`).
    #[serde(rename = "trust")]
    Trust,
    /// SCRAM-SHA-256 against `users_file`.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
}

/// `plbbench proxy --config FILE`; no file: `ProxyConfig::parse("")`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Where to listen (`--listen` wins) [default 127.0.0.1:6432, PgBouncer's port].
    pub listen: Option<std::net::SocketAddr>,
    /// The replicas r1..rK as libpq DSNs: an external cluster (`--dsn` wins);
    /// absent: the cluster `--cluster` names.
    #[serde(default)]
    pub dsns: Vec<String>,
    /// PgBouncer's `auth_file` format; absent: clients are not asked for a
    /// password (trust), as PgBouncer's `auth_type = trust`.
    pub users_file: Option<PathBuf>,
    /// How clients log in [default: scram-sha-256 with a users file, else
    /// trust, on a loopback address only].
    pub auth: Option<Auth>,
    /// How a session's class is read from its startup packet [default:
    /// `application_name` starting with `premium`, else Freemium].
    #[serde(default)]
    pub class: ClassRule,
    /// A client must finish its startup and authentication within this.
    #[serde(default = "login_timeout_s")]
    pub login_timeout_s: f64,
    /// The proxy's connection to a replica must be ready within this.
    #[serde(default = "server_connect_timeout_s")]
    pub server_connect_timeout_s: f64,
    /// On SIGINT or SIGTERM, how long open sessions may go on before they
    /// are closed with an error.
    #[serde(default = "drain_s")]
    pub drain_s: f64,
    /// A client whose startup packet carries no class (no
    /// `application_name`, as pgjdbc's by default) is logged in by the
    /// proxy, which waits this long for a statement that names it
    /// (`SET application_name`) before routing it with the default class.
    #[serde(default = "late_class_timeout_ms")]
    pub late_class_timeout_ms: u64,
    /// TLS to clients [default: disabled, an SSLRequest is answered `N`].
    #[serde(default)]
    pub tls: TlsConfig,
    /// Server connections kept idle per replica for later sessions: a
    /// session whose client leaves with its server idle hands its
    /// connection, reset with `DISCARD ALL`, to the next session routed to
    /// that replica with the same database and startup parameters, so that
    /// session costs no login; 0 logs every session in [default 100].
    #[serde(default = "server_pool")]
    pub server_pool: usize,
    /// A kept server connection idle this long is closed [default 60].
    #[serde(default = "server_idle_timeout_s")]
    pub server_idle_timeout_s: f64,
    /// Refuse the logins (53400) of a client, known by its address and user
    /// name, whose sessions end in protocol violations faster than its
    /// allowance [default false: every application instance on a host
    /// shares both, so the refusal would deny the well-behaved ones too;
    /// violations are counted and logged either way].
    #[serde(default)]
    pub refuse_protocol_violators: bool,
    /// Membership of a tier of proxies (`--tier`, `--peer-id`,
    /// `--tier-feed` win) [default: none, a lone proxy].
    #[serde(default)]
    pub tier: TierSection,
}

/// `[tier]` of a proxy config (docs/proxy.md, "A tier of proxies").
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSection {
    /// The tier's name: members with the same name and cluster share roles.
    pub name: Option<String>,
    /// This member's id in the tier, 1 to 127, unique (it is written into
    /// the cancel keys the member hands out).
    pub peer_id: Option<u8>,
    /// Where the member serves its role feed when it leads [default: the
    /// listen address's IP, any free port].
    pub feed_listen: Option<SocketAddr>,
    /// How often a follower tries the lock and the leader checks its
    /// control connection, ms [default 500].
    #[serde(default = "retry_ms")]
    pub retry_ms: u64,
    /// The leader's lease, ms [default 5000, ten default rounds: on a
    /// saturated cluster a round's queries took up to 1.9 s]: a leader
    /// whose last round that confirmed a majority of its locks began longer
    /// ago stops leading (its own monotonic clock), and a follower that
    /// heard nothing from the leader this long may end the leader's
    /// lock-holding backends that were idle this long, and take the locks.
    /// At least twice `retry_ms` and 1500 (the leader speaks every second).
    #[serde(default = "lease_ms")]
    pub lease_ms: u64,
}

fn retry_ms() -> u64 {
    500
}

fn lease_ms() -> u64 {
    5000
}

impl Default for TierSection {
    fn default() -> TierSection {
        TierSection { name: None, peer_id: None, feed_listen: None, retry_ms: retry_ms(), lease_ms: lease_ms() }
    }
}

/// The longest any of the proxy's deadlines may be, seconds.
pub const MAX_DEADLINE_S: f64 = 3600.0;

fn login_timeout_s() -> f64 {
    10.0
}
fn server_connect_timeout_s() -> f64 {
    5.0
}
fn drain_s() -> f64 {
    10.0
}
fn late_class_timeout_ms() -> u64 {
    3000
}
fn server_pool() -> usize {
    100
}
fn server_idle_timeout_s() -> f64 {
    60.0
}

/// The most server connections `server_pool` may keep per replica.
pub const MAX_SERVER_POOL: usize = 10_000;

impl ProxyConfig {
    /// Parses and checks the file's text.
    pub fn parse(text: &str) -> Result<ProxyConfig, String> {
        let c: ProxyConfig = crate::core::workload::from_toml(text)?;
        for (field, v) in
            [("login_timeout_s", c.login_timeout_s), ("server_connect_timeout_s", c.server_connect_timeout_s)]
        {
            if !(v > 0.0 && v <= MAX_DEADLINE_S) {
                return Err(format!("{field}: must be above 0 and at most {MAX_DEADLINE_S} seconds, not {v}"));
            }
        }
        if c.server_pool > MAX_SERVER_POOL {
            return Err(format!("server_pool: must be 0 to {MAX_SERVER_POOL}, not {}", c.server_pool));
        }
        if !(c.server_idle_timeout_s > 0.0 && c.server_idle_timeout_s <= MAX_DEADLINE_S) {
            return Err(format!(
                "server_idle_timeout_s: must be above 0 and at most {MAX_DEADLINE_S} seconds, not {}",
                c.server_idle_timeout_s
            ));
        }
        if !(0.0..=3600.0).contains(&c.drain_s) {
            return Err(format!("drain_s: must be 0 to 3600 seconds, not {}", c.drain_s));
        }
        if !(1..=3_600_000).contains(&c.late_class_timeout_ms) {
            return Err(format!("late_class_timeout_ms: must be 1 to 3600000 ms, not {}", c.late_class_timeout_ms));
        }
        c.tls.check()?;
        if !(50..=60_000).contains(&c.tier.retry_ms) {
            return Err(format!("tier.retry_ms: must be 50 to 60000 ms, not {}", c.tier.retry_ms));
        }
        let least = (2 * c.tier.retry_ms).max(1500);
        if !(least..=600_000).contains(&c.tier.lease_ms) {
            return Err(format!(
                "tier.lease_ms: must be {least} to 600000 ms (at least twice retry_ms and 1500), not {}",
                c.tier.lease_ms
            ));
        }
        if let Some(name) = &c.tier.name {
            super::tier::election::check_name(name).map_err(|e| format!("tier.name: {e}"))?;
        }
        if let Some(p) = c.tier.peer_id {
            if !(1..=super::tier::cancel_key::MAX_PEER).contains(&p) {
                return Err(format!("tier.peer_id: must be 1 to {}, not {p}", super::tier::cancel_key::MAX_PEER));
            }
        }
        if c.class.premium_prefix.is_empty() {
            return Err("class.premium_prefix: must not be empty".into());
        }
        match (c.auth, &c.users_file) {
            (Some(Auth::Trust), Some(_)) => Err("auth: \"trust\" asks no password; remove users_file or auth".into()),
            (Some(Auth::ScramSha256), None) => Err("auth: \"scram-sha-256\" needs a users_file".into()),
            _ => Ok(c),
        }
    }

    /// How clients listening on `listen` log in: SCRAM with a users file;
    /// without one, trust, but only on a loopback address unless the file
    /// says `auth = "trust"` (else anyone who reaches the port is let in).
    pub fn auth_on(&self, listen: SocketAddr) -> Result<Auth, String> {
        match (self.users_file.is_some(), self.auth) {
            (true, _) => Ok(Auth::ScramSha256),
            (false, Some(a)) => Ok(a),
            (false, None) if listen.ip().is_loopback() => Ok(Auth::Trust),
            (false, None) => Err(format!(
                "{listen} is not a loopback address and there is no users_file, so anyone could log in without \
                 a password; name a users_file in --config, or set auth = \"trust\" there to allow it"
            )),
        }
    }
}

/// Reads a users file: `"name" "secret"` per line (a `""` inside quotes is
/// one `"`), blank lines and lines starting with `;` or `#` skipped; the
/// secret is a password or a `SCRAM-SHA-256$...` secret.
pub fn parse_users(text: &str) -> Result<HashMap<String, Secret>, String> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}", i + 1);
        let (name, rest) = quoted(line).ok_or_else(|| bad("expected \"name\" \"secret\""))?;
        let (secret, rest) = quoted(rest.trim_start()).ok_or_else(|| bad("expected \"name\" \"secret\""))?;
        if !rest.trim().is_empty() {
            return Err(bad("text after the secret"));
        }
        if name.is_empty() {
            return Err(bad("empty user name"));
        }
        let secret = Secret::parse(&secret).map_err(|e| bad(&format!("user \"{name}\": {e}")))?;
        if users.insert(name.clone(), secret).is_some() {
            return Err(bad(&format!("user \"{name}\" is listed twice")));
        }
    }
    Ok(users)
}

/// A `"..."` string at the start of `s` and what follows it.
fn quoted(s: &str) -> Option<(String, &str)> {
    let mut chars = s.strip_prefix('"')?.char_indices().peekable();
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            out.push(c);
        } else if chars.peek().is_some_and(|&(_, n)| n == '"') {
            out.push('"');
            chars.next();
        } else {
            return Some((out, &s[i + 2..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[class]\nparam = \"application_name\"\npremium_prefix = \"premium\"\n";

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let c = ProxyConfig::parse(MIN).unwrap();
        assert_eq!((c.login_timeout_s, c.server_connect_timeout_s, c.drain_s), (10.0, 5.0, 10.0));
        assert_eq!(c.late_class_timeout_ms, 3000);
        assert!(!c.refuse_protocol_violators, "no client is refused for another's violations unless asked");
        assert_eq!((c.server_pool, c.server_idle_timeout_s), (100, 60.0));
        assert!(c.dsns.is_empty() && c.users_file.is_none() && c.listen.is_none());
    }

    #[test]
    fn bad_files_are_refused_naming_the_field() {
        let e = ProxyConfig::parse(&format!("drain = 3\n{MIN}")).unwrap_err();
        assert!(e.contains("drain") && e.contains("line 1"), "{e}");
        let e = ProxyConfig::parse(&format!("login_timeout_s = 0\n{MIN}")).unwrap_err();
        assert!(e.starts_with("login_timeout_s"), "{e}");
        let e = ProxyConfig::parse("[tls]\nmode = \"require\"\ncert_file = \"c.pem\"\n").unwrap_err();
        assert!(e.contains("key_file"), "{e}");
        let e = ProxyConfig::parse("[tls]\nmode = \"sometimes\"\n").unwrap_err();
        assert!(e.contains("mode") && e.contains("sometimes"), "{e}");
        let e = ProxyConfig::parse("server_pool = 10001\n").unwrap_err();
        assert!(e.starts_with("server_pool") && e.contains("10001"), "{e}");
        let e = ProxyConfig::parse("server_idle_timeout_s = 0\n").unwrap_err();
        assert!(e.starts_with("server_idle_timeout_s"), "{e}");
        let e = ProxyConfig::parse("late_class_timeout_ms = 0\n").unwrap_err();
        assert!(e.starts_with("late_class_timeout_ms"), "{e}");
        let e = ProxyConfig::parse("listen = \"nowhere\"\n").unwrap_err();
        assert!(e.contains("listen"), "{e}");
        let e = ProxyConfig::parse("[class]\nparam = \"user\"\npremium_prefix = \"\"\n").unwrap_err();
        assert!(e.contains("premium_prefix"), "{e}");
        let e = ProxyConfig::parse("auth = \"md5\"\n").unwrap_err();
        assert!(e.contains("auth") && e.contains("md5"), "{e}");
        let e = ProxyConfig::parse("auth = \"trust\"\nusers_file = \"u.txt\"\n").unwrap_err();
        assert!(e.starts_with("auth:"), "{e}");
        let e = ProxyConfig::parse("[tier]\nname = \"a b\"\n").unwrap_err();
        assert!(e.starts_with("tier.name") && e.contains("tier name"), "{e}");
        let e = ProxyConfig::parse("[tier]\npeer_id = 0\n").unwrap_err();
        assert!(e.starts_with("tier.peer_id"), "{e}");
        let e = ProxyConfig::parse("[tier]\nretry_ms = 10\n").unwrap_err();
        assert!(e.starts_with("tier.retry_ms"), "{e}");
        let e = ProxyConfig::parse("[tier]\nretry_ms = 1000\nlease_ms = 1500\n").unwrap_err();
        assert!(e.starts_with("tier.lease_ms: must be 2000"), "{e}");
        let e = ProxyConfig::parse("[tier]\nleader = 1\n").unwrap_err();
        assert!(e.contains("leader"), "{e}");
        let t =
            ProxyConfig::parse("[tier]\nname = \"t1\"\npeer_id = 3\nfeed_listen = \"127.0.0.1:7000\"\n").unwrap().tier;
        assert_eq!((t.name.as_deref(), t.peer_id, t.retry_ms), (Some("t1"), Some(3), 500));
        let e = ProxyConfig::parse("auth = \"scram-sha-256\"\n").unwrap_err();
        assert!(e.starts_with("auth:") && e.contains("users_file"), "{e}");
    }

    #[test]
    fn no_file_is_the_documented_defaults() {
        let c = ProxyConfig::parse("").unwrap();
        assert_eq!(c.class, ClassRule::default());
        assert!(c.users_file.is_none() && c.auth.is_none() && c.listen.is_none() && c.dsns.is_empty());
    }

    /// Trust stays on loopback unless the file says so; a users file is
    /// SCRAM on any address.
    #[test]
    fn trust_only_on_loopback_unless_the_file_says_so() {
        let at = |a: &str| a.parse::<SocketAddr>().unwrap();
        let none = ProxyConfig::parse("").unwrap();
        for ok in ["127.0.0.1:6432", "127.8.9.1:1", "[::1]:6432"] {
            assert_eq!(none.auth_on(at(ok)), Ok(Auth::Trust), "{ok}");
        }
        for open in ["0.0.0.0:6432", "[::]:6432", "192.168.1.5:6432"] {
            let e = none.auth_on(at(open)).unwrap_err();
            assert!(e.contains("not a loopback address") && e.contains("auth = \"trust\""), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        let said = ProxyConfig::parse("auth = \"trust\"\n").unwrap();
        assert_eq!(said.auth_on(at("0.0.0.0:6432")), Ok(Auth::Trust));
        let users = ProxyConfig::parse("users_file = \"u.txt\"\n").unwrap();
        assert_eq!(users.auth_on(at("0.0.0.0:6432")), Ok(Auth::ScramSha256));
    }

    #[test]
    fn a_users_file_reads_as_pgbouncers() {
        let u = parse_users("; comment\n\n\"alice\" \"pw\"\n\"bo\"\"b\" \"x\" \n").unwrap();
        assert_eq!(u.len(), 2);
        assert!(u.contains_key("bo\"b"));
        assert!(parse_users("alice pw").unwrap_err().starts_with("line 1"));
        assert!(parse_users("\"a\" \"pw\" extra").unwrap_err().contains("after"));
        assert!(parse_users("\"a\" \"x\"\n\"a\" \"y\"").unwrap_err().contains("twice"));
        let e = parse_users("\"a\" \"md5d41d8cd98f00b204e9800998ecf8427e\"").unwrap_err();
        assert!(e.contains("line 1") && e.contains("md5") && !e.contains("d41d8"), "{e}");
    }
}
