//! TLS to clients ([proxy](docs/proxy.md), "TLS to clients"): the `[tls]`
//! settings of the config file, the certificate and key read once at start
//! (a file that cannot be read is a one-line error before anything
//! starts), and a client's stream, plain or encrypted after its
//! SSLRequest, as one type the login and the relay read and write. The
//! proxy's connections to the replicas stay as they are.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// `[tls] mode`: whether clients may, or must, encrypt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// An SSLRequest is answered `N`, as by a server built without TLS.
    #[default]
    Disable,
    /// An SSLRequest is answered `S` and the session is encrypted; a
    /// client that does not ask logs in in plain text.
    Allow,
    /// As `allow`, and a plain-text login is refused with a FATAL.
    Require,
}

/// `[tls]` of a proxy config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// [default: disable]
    #[serde(default)]
    pub mode: Mode,
    /// The server certificate chain, PEM, relative to the config file.
    pub cert_file: Option<PathBuf>,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1), relative to the
    /// config file.
    pub key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Checks that a mode other than `disable` names both files.
    pub fn check(&self) -> Result<(), String> {
        match (self.mode, &self.cert_file, &self.key_file) {
            (Mode::Disable, _, _) | (_, Some(_), Some(_)) => Ok(()),
            (mode, _, _) => Err(format!("tls.mode {mode:?} needs tls.cert_file and tls.key_file").to_lowercase()),
        }
    }
}

/// TLS as the proxy serves it: the mode and the handshake's settings.
#[derive(Clone)]
pub struct Tls {
    pub mode: Mode,
    pub acceptor: TlsAcceptor,
}

/// Reads the certificate chain and the key; the error names the file, the
/// setting and the cause, on one line.
pub fn load(mode: Mode, cert: &Path, key: &Path) -> Result<Tls, String> {
    let bad = |field: &str, p: &Path, e: &dyn std::fmt::Display| format!("tls.{field}: {}: {e}", p.display());
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| bad("cert_file", cert, &e))?;
    if certs.is_empty() {
        return Err(bad("cert_file", cert, &"no PEM certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| bad("key_file", key, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls: the certificate and key do not go together: {e}"))?;
    Ok(Tls { mode, acceptor: TlsAcceptor::from(Arc::new(config)) })
}

/// A client's connection: plain, or TLS after its SSLRequest.
pub enum ClientStream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl ClientStream {
    /// Whether the stream is encrypted.
    pub fn is_tls(&self) -> bool {
        matches!(self, ClientStream::Tls(_))
    }
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_that_encrypts_needs_both_files() {
        let c = |mode, cert: Option<&str>, key: Option<&str>| TlsConfig {
            mode,
            cert_file: cert.map(PathBuf::from),
            key_file: key.map(PathBuf::from),
        };
        assert!(c(Mode::Disable, None, None).check().is_ok());
        assert!(c(Mode::Require, Some("c.pem"), Some("k.pem")).check().is_ok());
        let e = c(Mode::Require, Some("c.pem"), None).check().unwrap_err();
        assert!(e.contains("key_file") && e.contains("require"), "{e}");
        assert!(c(Mode::Allow, None, None).check().is_err());
    }

    #[test]
    fn a_missing_key_file_is_named_with_its_cause() {
        let e = load(Mode::Require, Path::new("/nonexistent/c.pem"), Path::new("/nonexistent/k.pem"))
            .err()
            .expect("no such files");
        assert!(e.starts_with("tls.cert_file: /nonexistent/c.pem: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
