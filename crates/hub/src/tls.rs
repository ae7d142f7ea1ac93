//! TLS for the hub's AMQPS and `wss` listeners: the certificate it serves and the rustls
//! configuration around it.
//!
//! Event Hubs speaks AMQP over TLS on 5671 (and over `wss` on 443). A client that is not told
//! it talks to an emulator goes there and checks the certificate, so the hub serves one for
//! `localhost`, `127.0.0.1` and `::1`. Unless the user brings a certificate and key, the hub makes
//! its own certificate authority and a server certificate signed by it, and writes them to a
//! folder the user can point clients at: `ca.pem` is the one file to trust. The authority's key
//! is never written, so nothing else can be signed by what the user trusted. The files are kept
//! and served again on later starts (trust once), and made anew when one is missing or the
//! server certificate is about to expire.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// The file clients trust.
pub const CA_FILE: &str = "ca.pem";
/// The server's certificate chain (its certificate, then the authority's).
pub const CERT_FILE: &str = "server.pem";
/// The server's private key (PKCS#8), readable by its owner only.
pub const KEY_FILE: &str = "server.key";

/// How long a made certificate is valid: 825 days, the most some platforms accept for a
/// server certificate.
const VALIDITY_DAYS: i64 = 825;
/// A made certificate with fewer days left than this is made anew at start.
const RENEW_DAYS: i64 = 30;

/// Where the hub's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSource {
    /// Made by the hub in this folder (or read from it, when made before).
    Generated { dir: PathBuf },
    /// The user's own PEM files: a certificate chain and its private key.
    Files { cert: PathBuf, key: PathBuf },
}

/// The certificate a TLS listener serves, loaded.
pub struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// The file to trust, when the hub made the certificate.
    pub ca_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("{path} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    NoKey { path: String },
    #[error("making the hub's certificate failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("the certificate and key cannot be served: {0}")]
    Config(#[from] rustls::Error),
}

impl Identity {
    /// Loads the certificate `source` names, making it first where the hub makes its own.
    pub fn load(source: &CertificateSource) -> Result<Identity, TlsError> {
        match source {
            CertificateSource::Files { cert, key } => Ok(Identity {
                chain: read_chain(cert)?,
                key: read_key(key)?,
                ca_file: None,
            }),
            CertificateSource::Generated { dir } => {
                let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
                if !made_certificate_usable(dir) {
                    generate(dir)?;
                }
                Ok(Identity {
                    chain: read_chain(&cert)?,
                    key: read_key(&key)?,
                    ca_file: Some(dir.join(CA_FILE)),
                })
            }
        }
    }

    /// A TLS acceptor serving this certificate (TLS 1.2 and 1.3, no client certificates).
    pub fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(self.chain.clone(), self.key.clone_key())?;
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.display().to_string(),
        });
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| TlsError::NoKey {
        path: path.display().to_string(),
    })
}

/// Whether the folder holds all three files of a certificate the hub made, with more than
/// `RENEW_DAYS` left. The expiry is remembered beside them (`not-after`), so that checking it
/// needs no X.509 parser.
fn made_certificate_usable(dir: &Path) -> bool {
    let all_there = [CA_FILE, CERT_FILE, KEY_FILE]
        .iter()
        .all(|f| dir.join(f).is_file());
    let not_after = std::fs::read_to_string(dir.join("not-after"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok());
    let now = chrono::Utc::now().timestamp();
    all_there && not_after.is_some_and(|t| t - now > RENEW_DAYS * 86_400)
}

/// Makes an authority and a server certificate for the loopback names, signed by it, and
/// writes `ca.pem`, `server.pem` (server, then authority) and `server.key`.
fn generate(dir: &Path) -> Result<(), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let now = chrono::Utc::now();
    let day = |at: chrono::DateTime<chrono::Utc>| {
        use chrono::Datelike;
        rcgen::date_time_ymd(at.year(), at.month() as u8, at.day() as u8)
    };
    let not_before = day(now - chrono::Duration::days(1));
    let expires = now + chrono::Duration::days(VALIDITY_DAYS);

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "hubhost hub local authority");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = not_before;
    ca.not_after = day(expires + chrono::Duration::days(1));
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    server.is_ca = IsCa::ExplicitNoCa;
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.use_authority_key_identifier_extension = true;
    server.not_before = not_before;
    server.not_after = day(expires);
    let server_cert = server.signed_by(&server_key, &issuer)?;

    std::fs::create_dir_all(dir).map_err(|source| TlsError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    write(&dir.join(KEY_FILE), &server_key.serialize_pem(), true)?;
    write(
        &dir.join(CERT_FILE),
        &format!("{}{}", server_cert.pem(), ca_cert.pem()),
        false,
    )?;
    write(&dir.join(CA_FILE), &ca_cert.pem(), false)?;
    write(
        &dir.join("not-after"),
        &format!("{}\n", expires.timestamp()),
        false,
    )?;
    tracing::info!(dir = %dir.display(), "made a certificate authority and a certificate for localhost");
    Ok(())
}

/// Writes a file whole (to a temporary name, then renamed), readable by its owner only when
/// `private`.
fn write(path: &Path, text: &str, private: bool) -> Result<(), TlsError> {
    let fail = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    let temporary = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(&temporary).map_err(fail)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(fail)?;
    std::fs::rename(&temporary, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_certificate_is_kept_and_served_again() {
        let dir = tempfile::tempdir().unwrap();
        let source = CertificateSource::Generated {
            dir: dir.path().join("tls"),
        };
        let first = Identity::load(&source).unwrap();
        assert_eq!(
            first.chain.len(),
            2,
            "the server's certificate, then the authority's"
        );
        assert!(first.acceptor().is_ok());
        let ca = std::fs::read(dir.path().join("tls").join(CA_FILE)).unwrap();
        let again = Identity::load(&source).unwrap();
        assert_eq!(
            again.chain, first.chain,
            "a second start serves the same certificate"
        );
        assert_eq!(
            std::fs::read(dir.path().join("tls").join(CA_FILE)).unwrap(),
            ca,
            "and the authority users trusted stays"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("tls").join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o077, 0, "the key is readable by its owner only");
        }
    }

    #[test]
    fn a_certificate_close_to_expiry_is_made_anew() {
        let dir = tempfile::tempdir().unwrap();
        let source = CertificateSource::Generated {
            dir: dir.path().to_path_buf(),
        };
        let first = Identity::load(&source).unwrap();
        let soon = chrono::Utc::now().timestamp() + 86_400;
        std::fs::write(dir.path().join("not-after"), soon.to_string()).unwrap();
        let renewed = Identity::load(&source).unwrap();
        assert_ne!(renewed.chain, first.chain);
    }

    #[test]
    fn files_without_pem_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, "not a certificate").unwrap();
        std::fs::write(&key, "not a key").unwrap();
        let source = CertificateSource::Files {
            cert: cert.clone(),
            key,
        };
        match Identity::load(&source) {
            Err(TlsError::NoCertificate { path }) => assert_eq!(path, cert.display().to_string()),
            other => panic!("expected NoCertificate, got {:?}", other.err()),
        }
    }
}
