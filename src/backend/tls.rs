//! The TLS client configuration every connection of one client shares.
//!
//! Built once, at `ClientBuilder::build()`, so that a certificate that cannot be read fails
//! there and not at the first lock. Without [`TlsCertificates`] a client trusts the webpki
//! root certificates (those a browser trusts); with a `root_cert` it trusts that CA only, and
//! with a `client_tls` it proves itself with that certificate (mutual TLS).
//! The cluster connection's node connections get it through `LinkSettings::scoped`.

#[cfg(feature = "tls")]
use std::sync::Arc;

#[cfg(feature = "tls")]
use redis::TlsCertificates;

#[cfg(feature = "tls")]
use crate::error::Result;

/// How a client's connections do TLS (nothing, in a build without the `tls` feature).
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsConfig {
    /// `None`: the webpki roots, no client certificate.
    #[cfg(feature = "tls")]
    custom: Option<Arc<rustls::ClientConfig>>,
}

impl TlsConfig {
    /// The configuration for these certificates; a certificate or key that cannot be parsed
    /// is an `InvalidArgument`.
    #[cfg(feature = "tls")]
    pub fn new(certs: &TlsCertificates) -> Result<TlsConfig> {
        Ok(TlsConfig {
            custom: Some(build(Some(certs))?),
        })
    }

    /// The rustls configuration to connect with.
    #[cfg(feature = "tls")]
    pub fn rustls(&self) -> Arc<rustls::ClientConfig> {
        static DEFAULT: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
        match &self.custom {
            Some(config) => config.clone(),
            None => DEFAULT
                .get_or_init(|| build(None).expect("the webpki roots are valid"))
                .clone(),
        }
    }
}

#[cfg(feature = "tls")]
fn build(certs: Option<&TlsCertificates>) -> Result<Arc<rustls::ClientConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::Error;

    let invalid = |what: &str, e: &dyn std::fmt::Display| Error::invalid(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match certs.and_then(|c| c.root_cert.as_ref()) {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| invalid("TLS root certificate", &e))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid("TLS root certificate", &e))?;
            }
            if roots.is_empty() {
                return Err(Error::invalid(
                    "TLS root certificate: no PEM certificate found",
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS", &e))?
        .with_root_certificates(roots);
    let config = match certs.and_then(|c| c.client_tls.as_ref()) {
        Some(client) => {
            let chain = CertificateDer::pem_slice_iter(&client.client_cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| invalid("TLS client certificate", &e))?;
            if chain.is_empty() {
                return Err(Error::invalid(
                    "TLS client certificate: no PEM certificate found",
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(&client.client_key)
                .map_err(|e| invalid("TLS client key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid("TLS client certificate and key", &e))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
