//! A redis-server that speaks TLS, with a CA, a server and a client certificate made for the
//! run (nothing is checked in). The server also keeps a plain port, for the test's own admin
//! connection.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use super::RedisServer;

/// PEM files of one run: a CA, and a server and a client certificate it signed.
pub struct Certificates {
    pub dir: PathBuf,
    pub ca: Vec<u8>,
    pub client_cert: Vec<u8>,
    pub client_key: Vec<u8>,
}

impl Certificates {
    pub fn generate() -> Certificates {
        let dir = std::env::temp_dir().join(format!("redlatch-tls-{}", super::unique("run")));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = ca("redlatch test CA");
        let (server_cert, server_key) = signed(
            &ca,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) =
            signed(&ca, &["client"], ExtendedKeyUsagePurpose::ClientAuth);
        // The client pair on disk too: servers that demand client certificates present it
        // to each other (replication, sentinels).
        for (name, pem) in [
            ("ca.crt", ca.pem()),
            ("server.crt", server_cert),
            ("server.key", server_key),
            ("client.crt", client_cert.clone()),
            ("client.key", client_key.clone()),
        ] {
            std::fs::write(dir.join(name), pem).unwrap();
        }
        Certificates {
            dir,
            ca: ca.pem().into_bytes(),
            client_cert: client_cert.into_bytes(),
            client_key: client_key.into_bytes(),
        }
    }

    /// Another CA's certificate, which signed nothing of this run.
    pub fn stranger_ca() -> Vec<u8> {
        ca("a CA nobody here uses").pem().into_bytes()
    }

    /// The file `name` of this run (`ca.crt`, `server.crt`, `server.key`, `client.crt`,
    /// `client.key`).
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// A certificate for `names` signed by `ca`, and its key, in PEM.
fn signed(
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names.clone()).unwrap();
    params
        .distinguished_name
        .push(DnType::CommonName, &names[0]);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// A client's TLS settings: trust `ca`, and present `client`'s certificate if given.
#[cfg(feature = "tls")]
pub fn trusting(ca: &[u8], client: Option<&Certificates>) -> redlatch::TlsCertificates {
    redlatch::TlsCertificates {
        root_cert: Some(ca.to_vec()),
        client_tls: client.map(|c| redlatch::ClientTlsConfig {
            client_cert: c.client_cert.clone(),
            client_key: c.client_key.clone(),
        }),
    }
}

/// The TLS settings of a redis-server or sentinel of this run, as `(name, value)` pairs (for
/// a command line or a config file), without the TLS port: replication and Sentinel's links
/// over TLS, a client certificate presented, and with `auth_clients` demanded.
pub fn server_settings(certs: &Certificates, auth_clients: bool) -> Vec<(String, String)> {
    let mut settings = vec![
        ("tls-cert-file", certs.path("server.crt")),
        ("tls-key-file", certs.path("server.key")),
        ("tls-ca-cert-file", certs.path("ca.crt")),
        ("tls-replication", "yes".into()),
        (
            "tls-auth-clients",
            if auth_clients { "yes" } else { "no" }.into(),
        ),
    ];
    // The server certificate is for servers only (ServerAuth): a replica, a sentinel or a
    // cluster node that connects needs the client one (the cluster bus demands it even
    // without `tls-auth-clients`).
    settings.push(("tls-client-cert-file", certs.path("client.crt")));
    settings.push(("tls-client-key-file", certs.path("client.key")));
    settings
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// A redis-server listening on a plain port (`server.port`, for admin) and on `tls_port`.
pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
    pub certs: Certificates,
}

impl TlsServer {
    /// `auth_clients`: whether the server demands a client certificate.
    pub fn start(auth_clients: bool) -> TlsServer {
        let certs = Certificates::generate();
        let mut tls_port = 0;
        let server = RedisServer::start_with_port(|_| {
            tls_port = super::free_port();
            vec![
                "--tls-port".into(),
                tls_port.to_string(),
                "--tls-cert-file".into(),
                certs.path("server.crt"),
                "--tls-key-file".into(),
                certs.path("server.key"),
                "--tls-ca-cert-file".into(),
                certs.path("ca.crt"),
                "--tls-auth-clients".into(),
                if auth_clients { "yes" } else { "no" }.into(),
            ]
        });
        TlsServer {
            server,
            tls_port,
            certs,
        }
    }

    /// The TLS address, by IP (the server certificate names 127.0.0.1 and localhost).
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port)
    }
}
