//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677; the primitives
//! and the client side are `crate::scram`) as PostgreSQL speaks it ([proxy](docs/proxy.md)): the proxy authenticates its clients itself, as
//! PgBouncer and PgCat do, against secrets from a users file. A secret is
//! either PostgreSQL's stored form (`SCRAM-SHA-256$<iterations>:<salt>$
//! <StoredKey>:<ServerKey>`, what `pg_authid.rolpassword` holds) or a
//! plain password turned into one with a random salt when the file is read.
//! Pure: messages in, messages or a verdict out; the caller does the I/O.
//! No channel binding (the proxy has no TLS), so a client asking for it
//! (`p=`) is refused. An unknown user goes through the same exchange with
//! a made-up secret and fails like a wrong password, as PostgreSQL does,
//! so the proxy does not tell which users exist.

use crate::scram::{hmac, salted_password, sha256};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use rand::RngCore;
use std::fmt;

/// PostgreSQL's default `scram_iterations`.
pub const ITERATIONS: u32 = 4096;
const PREFIX: &str = "SCRAM-SHA-256$";

/// A user's SCRAM secret: what the server keeps instead of the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    iterations: u32,
    salt: Vec<u8>,
    stored_key: [u8; 32],
    server_key: [u8; 32],
}

/// Never prints key material.
impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(SCRAM-SHA-256, {} iterations)", self.iterations)
    }
}

impl Secret {
    /// The secret of `password` with `salt` (PostgreSQL's SASLprep is the
    /// identity for the ASCII passwords a users file holds; other bytes are
    /// used as they are, as PostgreSQL does when SASLprep fails).
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Secret {
        let salted = salted_password(password.as_bytes(), salt, iterations);
        Secret {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&hmac(&salted, b"Client Key")),
            server_key: hmac(&salted, b"Server Key"),
        }
    }

    /// A users file's entry: the stored form, or a plain password salted
    /// at random now. An MD5 hash (`md5...`) cannot serve SCRAM.
    pub fn parse(text: &str) -> Result<Secret, String> {
        if let Some(rest) = text.strip_prefix(PREFIX) {
            return Secret::stored(rest).ok_or_else(|| {
                "a SCRAM secret must read SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>".to_string()
            });
        }
        if text.len() == 35 && text.starts_with("md5") {
            return Err("an md5 hash cannot be used for SCRAM-SHA-256; give the password or its SCRAM secret".into());
        }
        let mut salt = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut salt);
        Ok(Secret::from_password(text, &salt, ITERATIONS))
    }

    fn stored(rest: &str) -> Option<Secret> {
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt) = params.split_once(':')?;
        let (stored, server) = keys.split_once(':')?;
        Some(Secret {
            iterations: iterations.parse().ok().filter(|&i| i > 0)?,
            salt: B64.decode(salt).ok()?,
            stored_key: B64.decode(stored).ok()?.try_into().ok()?,
            server_key: B64.decode(server).ok()?.try_into().ok()?,
        })
    }

    /// The stored form (as `pg_authid.rolpassword`).
    pub fn to_stored(&self) -> String {
        let (salt, st, sv) = (B64.encode(&self.salt), B64.encode(self.stored_key), B64.encode(self.server_key));
        format!("{PREFIX}{}:{salt}${st}:{sv}", self.iterations)
    }
}

/// Why an exchange failed: the client broke the protocol (08P01) or did
/// not prove the password (28P01).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScramError {
    /// A message that is not SCRAM as PostgreSQL speaks it.
    Malformed(&'static str),
    /// The proof did not match (or the user is unknown).
    Failed,
}

/// One exchange, between the client's first message and its proof.
#[derive(Debug)]
pub struct Exchange {
    secret: Secret,
    /// The secret is made up (unknown user): the exchange must fail.
    mock: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    gs2: String,
}

impl Exchange {
    /// Takes the client's first message (`n,,n=...,r=<nonce>`) and answers
    /// with the server's (`r=<nonce+ours>,s=<salt>,i=<iterations>`).
    /// `secret` is `None` for a user the file does not know.
    pub fn start(
        secret: Option<&Secret>,
        client_first: &[u8],
        our_nonce: &str,
    ) -> Result<(Exchange, String), ScramError> {
        let text = std::str::from_utf8(client_first).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (gs2, bare) = split_gs2(text)?;
        let client_nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(ScramError::Malformed("no client nonce"))?;
        let (secret, mock) = match secret {
            Some(s) => (s.clone(), false),
            None => (Secret::from_password("", &sha256(client_nonce.as_bytes())[..16], ITERATIONS), true),
        };
        let nonce = format!("{client_nonce}{our_nonce}");
        let server_first = format!("r={nonce},s={},i={}", B64.encode(&secret.salt), secret.iterations);
        let ex = Exchange {
            secret,
            mock,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
            gs2: gs2.to_string(),
        };
        Ok((ex, server_first))
    }

    /// Checks the client's final message (`c=...,r=...,p=<proof>`); on
    /// success returns the server's final message (`v=<signature>`).
    pub fn finish(self, client_final: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(client_final).map_err(|_| ScramError::Malformed("not UTF-8"))?;
        let (without_proof, proof) =
            text.rsplit_once(",p=").ok_or(ScramError::Malformed("no proof in the client's final message"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs.next().and_then(|a| a.strip_prefix("c=")).ok_or(ScramError::Malformed("no c="))?;
        let nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or(ScramError::Malformed("no r="))?;
        if B64.decode(binding).ok().as_deref() != Some(self.gs2.as_bytes()) {
            return Err(ScramError::Malformed("channel binding does not match the first message"));
        }
        if nonce != self.nonce {
            return Err(ScramError::Malformed("nonce does not match"));
        }
        let proof: [u8; 32] = B64
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::Malformed("the proof is not 32 bytes of base64"))?;
        let auth = format!("{},{},{without_proof}", self.client_first_bare, self.server_first);
        let signature = hmac(&self.secret.stored_key, auth.as_bytes());
        let mut client_key = proof;
        client_key.iter_mut().zip(signature).for_each(|(k, s)| *k ^= s);
        if self.mock || sha256(&client_key) != self.secret.stored_key {
            return Err(ScramError::Failed);
        }
        Ok(format!("v={}", B64.encode(hmac(&self.secret.server_key, auth.as_bytes()))))
    }
}

/// Splits `n,,bare` (or `y,,bare`) into the GS2 header and the bare
/// message; `p=` (channel binding) is refused: the proxy has no TLS.
fn split_gs2(text: &str) -> Result<(&str, &str), ScramError> {
    let header_len = match text.as_bytes().first() {
        Some(b'n' | b'y') => text.match_indices(',').nth(1).map(|(i, _)| i + 1),
        Some(b'p') => return Err(ScramError::Malformed("channel binding requested, but the proxy has no TLS")),
        _ => None,
    }
    .ok_or(ScramError::Malformed("no GS2 header"))?;
    Ok(text.split_at(header_len))
}

/// A SASLInitialResponse's body: the mechanism and its data (length
/// checked against the data given).
pub fn initial_response(m: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = m.iter().position(|&b| b == 0)?;
    let (mech, rest) = (&m[..nul], &m[nul + 1..]);
    let len = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let data = &rest[4..];
    (usize::try_from(len).ok()? == data.len()).then_some((mech, data))
}

/// A fresh server nonce: 18 random bytes in base64, as PostgreSQL's.
pub fn nonce() -> String {
    let mut b = [0u8; 18];
    rand::thread_rng().fill_bytes(&mut b);
    B64.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres_protocol::authentication::sasl::{ChannelBinding, ScramSha256};

    /// Runs a real client (postgres-protocol's, the one tokio-postgres uses)
    /// against the server side; the client checks the server's signature.
    fn exchange(secret: Option<&Secret>, password: &str) -> Result<(), ScramError> {
        let mut client = ScramSha256::new(password.as_bytes(), ChannelBinding::unsupported());
        let (ex, server_first) = Exchange::start(secret, client.message(), &nonce())?;
        client.update(server_first.as_bytes()).expect("the client accepts our first message");
        let server_final = ex.finish(client.message())?;
        client.finish(server_final.as_bytes()).expect("the client accepts our signature");
        Ok(())
    }

    #[test]
    fn a_real_client_logs_in_with_the_password_and_not_without() {
        let secret = Secret::parse("s3cret").unwrap();
        assert_eq!(exchange(Some(&secret), "s3cret"), Ok(()));
        assert_eq!(exchange(Some(&secret), "s3cre"), Err(ScramError::Failed));
        assert_eq!(exchange(None, ""), Err(ScramError::Failed), "an unknown user fails even with an empty password");
    }

    /// Our own client (`crate::scram`, what the proxy and `bench` log into
    /// servers with) against the server side, the key derived and then kept.
    #[test]
    fn our_client_logs_in_and_then_logs_in_again_from_the_kept_key() {
        let secret = Secret::parse("s3cret").unwrap();
        for round in 0..2 {
            let (client, first) = crate::scram::Client::start();
            let (ex, server_first) = Exchange::start(Some(&secret), first.as_bytes(), &nonce()).unwrap();
            let challenge = client.challenge(&server_first).unwrap();
            let kept = challenge.kept(b"s3cret");
            assert_eq!(kept.is_some(), round == 1, "round {round}: derived once, then kept");
            let salted = kept.unwrap_or_else(|| challenge.derive(b"s3cret"));
            let (sent, last) = client.finish_with(b"s3cret", &challenge, salted);
            let server_final = ex.finish(last.as_bytes()).expect("the proof is accepted");
            assert_eq!(sent.verify(&server_final), Ok(()));
        }
        let (client, first) = crate::scram::Client::start();
        let (ex, server_first) = Exchange::start(Some(&secret), first.as_bytes(), &nonce()).unwrap();
        let challenge = client.challenge(&server_first).unwrap();
        let (_, last) = client.finish_with(b"wrong", &challenge, challenge.derive(b"wrong"));
        assert_eq!(ex.finish(last.as_bytes()), Err(ScramError::Failed));
    }

    #[test]
    fn the_stored_form_round_trips_and_hides_its_keys() {
        let s = Secret::from_password("pencil", b"0123456789abcdef", 4096);
        let back = Secret::parse(&s.to_stored()).unwrap();
        assert_eq!(back, s);
        assert_eq!(exchange(Some(&back), "pencil"), Ok(()));
        assert_eq!(format!("{back:?}"), "Secret(SCRAM-SHA-256, 4096 iterations)", "no key in Debug");
    }

    #[test]
    fn an_initial_response_splits_into_mechanism_and_data() {
        let mut m = b"SCRAM-SHA-256\0".to_vec();
        m.extend(3i32.to_be_bytes());
        m.extend(b"abc");
        assert_eq!(initial_response(&m), Some((&b"SCRAM-SHA-256"[..], &b"abc"[..])));
        m.push(b'x');
        assert_eq!(initial_response(&m), None, "length and data disagree");
        assert_eq!(initial_response(b"SCRAM"), None);
    }

    #[test]
    fn bad_secrets_and_messages_are_refused() {
        assert!(Secret::parse("SCRAM-SHA-256$x:abc$def").is_err());
        assert!(Secret::parse("md5d41d8cd98f00b204e9800998ecf8427e").unwrap_err().contains("md5"));
        let secret = Secret::parse("pw").unwrap();
        let start = |m: &[u8]| Exchange::start(Some(&secret), m, "srv").map(|_| ());
        assert_eq!(
            start(b"p=tls-server-end-point,,n=,r=abc").unwrap_err(),
            ScramError::Malformed("channel binding requested, but the proxy has no TLS")
        );
        assert!(start(b"x,,n=,r=abc").is_err());
        assert!(start(b"n,,n=,r=").is_err());
        assert!(start(b"\xff").is_err());
        let (ex, _) = Exchange::start(Some(&secret), b"n,,n=,r=abc", "srv").unwrap();
        assert_eq!(ex.finish(b"c=biws,r=abcXXX,p=AAAA").unwrap_err(), ScramError::Malformed("nonce does not match"));
        let (ex, _) = Exchange::start(Some(&secret), b"n,,n=,r=abc", "srv").unwrap();
        assert!(matches!(ex.finish(b"c=eSws,r=abcsrv,p=AAAA"), Err(ScramError::Malformed(_))), "binding differs");
    }
}
