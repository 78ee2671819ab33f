//! TLS for `rediss://`: the certificates a connection presents and trusts, read from PEM files.

use crate::error::{Error, Result};

/// Certificates for TLS (`rediss://`): verification is always on; `ca` replaces the system's
/// roots with the CA that signed the server's certificate, and `cert` with `key` is the client
/// certificate for mutual TLS. PEM files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    pub ca: Option<std::path::PathBuf>,
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
}

impl Tls {
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    pub(crate) fn certificates(&self) -> Result<redis::TlsCertificates> {
        let read = |what: &str, p: &std::path::Path| {
            std::fs::read(p).map_err(|e| {
                Error::InvalidInput(format!("cannot read the TLS {what} {}: {e}", p.display()))
            })
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("client certificate", c)?,
                client_key: read("client key", k)?,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::InvalidInput(
                    "a TLS client certificate needs its key, and a key its certificate: give both --tls-cert and --tls-key".into(),
                ))
            }
        };
        let root_cert = self.ca.as_deref().map(|p| read("CA file", p)).transpose()?;
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert,
        })
    }
}
