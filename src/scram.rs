//! SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL speaks it: the
//! primitives both sides share, and the client side with its salted
//! passwords kept. The key derivation (`Hi()`, 4,096 HMACs at PostgreSQL's
//! default) is the whole cost of a login on the client's side (about 1.2
//! ms of CPU here), and it depends only on the password, the salt and the
//! iteration count, which a server gives the same for every login of a
//! role. So the client keeps it, as PgBouncer keeps the SCRAM keys of a
//! server login: `plbbench proxy` logging into its replicas, and `bench`'s
//! connections, derive it once per server and role, not once per login.
//! Kept in memory only, by a hash of the password, for the process's life.
//! The server side is `proxy::scram`.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;

/// HMAC-SHA-256.
pub fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// SHA-256.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// `Hi()` of RFC 5802: PBKDF2 with HMAC-SHA-256 and one block.
pub fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut first = salt.to_vec();
    first.extend(1u32.to_be_bytes());
    let mut u = hmac(password, &first);
    let mut out = u;
    for _ in 1..iterations {
        u = hmac(password, &u);
        out.iter_mut().zip(u).for_each(|(o, b)| *o ^= b);
    }
    out
}

/// Salted passwords derived so far, by (hash of the password, salt,
/// iterations).
type Kept = HashMap<([u8; 32], Vec<u8>, u32), [u8; 32]>;

static KEPT: Mutex<Option<Kept>> = Mutex::new(None);

/// At most this many salted passwords are kept (then they are forgotten
/// and derived again): one per server and role in use.
const MAX_KEPT: usize = 256;

/// The salted password, from those kept, if it is there.
fn kept(password: &[u8], salt: &[u8], iterations: u32) -> Option<[u8; 32]> {
    let kept = KEPT.lock().expect("SCRAM keys lock");
    kept.as_ref()?.get(&(sha256(password), salt.to_vec(), iterations)).copied()
}

fn keep(password: &[u8], salt: &[u8], iterations: u32, salted: [u8; 32]) {
    let mut kept = KEPT.lock().expect("SCRAM keys lock");
    let map = kept.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_KEPT {
        map.clear();
    }
    map.insert((sha256(password), salt.to_vec(), iterations), salted);
}

/// Why the client side of an exchange failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The server's message is not SCRAM as PostgreSQL speaks it.
    #[error("SCRAM: the server's message is malformed ({0})")]
    Malformed(&'static str),
    /// The server's signature does not prove it knows the password.
    #[error("SCRAM: the server's signature does not match: it does not know the password")]
    BadServer,
}

/// The client's side of one exchange, after its first message.
pub struct Client {
    nonce: String,
    first_bare: String,
}

/// The client's side after its final message: what the server's final
/// message must carry.
pub struct Sent {
    signature: [u8; 32],
}

impl Client {
    /// Begins an exchange: the client's first message (`n,,n=,r=<nonce>`;
    /// PostgreSQL takes the user from the startup packet, not from here).
    pub fn start() -> (Client, String) {
        let mut b = [0u8; 18];
        rand::thread_rng().fill_bytes(&mut b);
        Client::with_nonce("", &B64.encode(b))
    }

    fn with_nonce(user: &str, nonce: &str) -> (Client, String) {
        let first_bare = format!("n={user},r={nonce}");
        let message = format!("n,,{first_bare}");
        (Client { nonce: nonce.to_string(), first_bare }, message)
    }

    /// The server's first message (`r=<nonce>,s=<salt>,i=<iterations>`),
    /// parsed once and checked: its nonce must extend ours.
    pub fn challenge(&self, server_first: &str) -> Result<Challenge, ClientError> {
        let (nonce, salt, iterations) = parse_first(server_first)?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ClientError::Malformed("the server's nonce does not extend ours"));
        }
        Ok(Challenge { text: server_first.to_string(), nonce: nonce.to_string(), salt, iterations })
    }

    /// The client's final message (`c=biws,r=<nonce>,p=<proof>`) for the
    /// server's challenge, with the salted password, which is kept.
    pub fn finish_with(self, password: &[u8], challenge: &Challenge, salted: [u8; 32]) -> (Sent, String) {
        keep(password, &challenge.salt, challenge.iterations, salted);
        let without_proof = format!("c=biws,r={}", challenge.nonce);
        let auth = format!("{},{},{without_proof}", self.first_bare, challenge.text);
        let client_key = hmac(&salted, b"Client Key");
        let mut proof = hmac(&sha256(&client_key), auth.as_bytes());
        proof.iter_mut().zip(client_key).for_each(|(p, k)| *p ^= k);
        let signature = hmac(&hmac(&salted, b"Server Key"), auth.as_bytes());
        (Sent { signature }, format!("{without_proof},p={}", B64.encode(proof)))
    }
}

/// A server's first message, parsed and checked by [`Client::challenge`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    text: String,
    nonce: String,
    salt: Vec<u8>,
    iterations: u32,
}

impl Challenge {
    /// The salted password for this challenge, if it is kept; else the
    /// caller derives it with [`Challenge::derive`] (off its event loop) and
    /// hands it to [`Client::finish_with`], which keeps it.
    pub fn kept(&self, password: &[u8]) -> Option<[u8; 32]> {
        kept(password, &self.salt, self.iterations)
    }

    /// Derives the salted password (`Hi()`: the whole CPU cost of a login).
    pub fn derive(&self, password: &[u8]) -> [u8; 32] {
        salted_password(password, &self.salt, self.iterations)
    }
}

impl Sent {
    /// Checks the server's final message (`v=<signature>`).
    pub fn verify(&self, server_final: &str) -> Result<(), ClientError> {
        let v = server_final
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .ok_or(ClientError::Malformed("no v= in the server's final message"))?;
        match B64.decode(v) {
            Ok(sig) if sig == self.signature => Ok(()),
            _ => Err(ClientError::BadServer),
        }
    }
}

/// The nonce, salt and iteration count of a server's first message.
fn parse_first(text: &str) -> Result<(&str, Vec<u8>, u32), ClientError> {
    let attr = |k: &str| text.split(',').find_map(|a| a.strip_prefix(k));
    let nonce = attr("r=").ok_or(ClientError::Malformed("no nonce"))?;
    let salt = attr("s=").and_then(|s| B64.decode(s).ok()).ok_or(ClientError::Malformed("no salt"))?;
    let iterations = attr("i=")
        .and_then(|i| i.parse().ok())
        .filter(|&i| i > 0)
        .ok_or(ClientError::Malformed("no iteration count"))?;
    Ok((nonce, salt, iterations))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example exchange (user "user", password "pencil").
    #[test]
    fn the_rfc_7677_exchange() {
        let (client, first) = Client::with_nonce("user", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(first, "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let challenge = client.challenge(server_first).unwrap();
        let salted = challenge.derive(b"pencil");
        let (sent, last) = client.finish_with(b"pencil", &challenge, salted);
        assert_eq!(
            last,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(sent.verify("v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="), Ok(()));
        assert_eq!(sent.verify("v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="), Err(ClientError::BadServer));
        let (again, _) = Client::with_nonce("user", "rOprNGfwEbeRWgbNEkqO");
        let challenge = again.challenge(server_first).unwrap();
        assert_eq!(challenge.kept(b"pencil"), Some(salted), "kept after the first login");
        assert_eq!(challenge.kept(b"pencils"), None, "another password");
    }

    #[test]
    fn a_server_first_message_that_is_not_scram_is_refused() {
        let (client, _) = Client::with_nonce("", "abc");
        for bad in ["r=abc,s=AAAA,i=4096", "r=xyzdef,s=AAAA,i=4096", "r=abcdef,i=4096", "r=abcdef,s=AAAA,i=0", ""] {
            assert!(client.challenge(bad).is_err(), "{bad}");
        }
        let c = client.challenge("r=abcdef,s=AAAA,i=10").unwrap();
        assert_eq!((c.nonce.as_str(), c.salt.as_slice(), c.iterations), ("abcdef", &[0u8, 0, 0][..], 10));
    }
}
