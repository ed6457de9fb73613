//! The proxy's config file (issue 20), validated as the workload is: TOML,
//! every key known (an unknown one is refused with its line and field), and
//! PgBouncer's users file (`"name" "secret"` per line) it may point to.
//! Pure: text in, typed settings or a one-line error out.

use super::class_rule::ClassRule;
use super::scram::Secret;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;

/// `plbbench proxy --config FILE`.
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
    /// How a session's class is read from its startup packet.
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
}

fn login_timeout_s() -> f64 {
    10.0
}
fn server_connect_timeout_s() -> f64 {
    5.0
}
fn drain_s() -> f64 {
    10.0
}

impl ProxyConfig {
    /// Parses and checks the file's text.
    pub fn parse(text: &str) -> Result<ProxyConfig, String> {
        let c: ProxyConfig = crate::core::workload::from_toml(text)?;
        for (field, v) in
            [("login_timeout_s", c.login_timeout_s), ("server_connect_timeout_s", c.server_connect_timeout_s)]
        {
            if !(v > 0.0 && v <= 3600.0) {
                return Err(format!("{field}: must be above 0 and at most 3600 seconds, not {v}"));
            }
        }
        if !(0.0..=3600.0).contains(&c.drain_s) {
            return Err(format!("drain_s: must be 0 to 3600 seconds, not {}", c.drain_s));
        }
        if c.class.premium_prefix.is_empty() {
            return Err("class.premium_prefix: must not be empty".into());
        }
        Ok(c)
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
        assert!(c.dsns.is_empty() && c.users_file.is_none() && c.listen.is_none());
    }

    #[test]
    fn bad_files_are_refused_naming_the_field() {
        let e = ProxyConfig::parse(&format!("drain = 3\n{MIN}")).unwrap_err();
        assert!(e.contains("drain") && e.contains("line 1"), "{e}");
        let e = ProxyConfig::parse(&format!("login_timeout_s = 0\n{MIN}")).unwrap_err();
        assert!(e.starts_with("login_timeout_s"), "{e}");
        let e = ProxyConfig::parse("listen = \"nowhere\"\n").unwrap_err();
        assert!(e.contains("listen"), "{e}");
        let e = ProxyConfig::parse("[class]\nparam = \"user\"\npremium_prefix = \"\"\n").unwrap_err();
        assert!(e.contains("premium_prefix"), "{e}");
        assert!(ProxyConfig::parse("").unwrap_err().contains("class"));
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
