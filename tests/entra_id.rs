//! Entra ID sign-in to Blob Storage against Azurite in its OAuth mode (HTTPS; it checks each
//! bearer token's issuer, audience and lifetime). The tokens come from a local stand-in for the
//! platform's identity endpoint and for Entra ID's token endpoint
//! (`tests/python/identity_endpoint.py`), reached the way a deployed app reaches them:
//! `IDENTITY_ENDPOINT`/`IDENTITY_HEADER` (managed identity) or `AZURE_TENANT_ID`,
//! `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`, `AZURE_AUTHORITY_HOST` (service principal). Real
//! `hubhost checkpoints` processes write and read the checkpoint store through it; a wrong
//! identity gets the identity service's reason and never echoes the secret.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

const HEADER: &str = "identity-header-7f3a";
const SECRET: &str = "client-secret-9c2e";

struct IdentityEndpoint {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl IdentityEndpoint {
    fn start(dir: &Path) -> IdentityEndpoint {
        let port = common::free_port();
        let log = dir.join("identity.log");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/identity_endpoint.py");
        let child = Command::new(common::python())
            .arg(script)
            .args([&port.to_string(), HEADER, "tenant-1", "client-1", SECRET])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for_port(port, "the identity endpoint");
        IdentityEndpoint { child, port, log }
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for IdentityEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test CA and a certificate it signed for 127.0.0.1: (CA file, certificate, key), in `dir`.
/// (TLS clients refuse a self-signed CA certificate as a server's own.)
fn certificates(dir: &Path) -> (String, String, String) {
    let path = |f: &str| dir.join(f).display().to_string();
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(status.success(), "openssl {args:?}");
    };
    let (ca, ca_key) = (path("ca.pem"), path("ca-key.pem"));
    let (cert, key, csr) = (path("cert.pem"), path("key.pem"), path("cert.csr"));
    let ext = path("ext.cnf");
    std::fs::write(
        &ext,
        "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=hubhost test CA",
        "-keyout",
        &ca_key,
        "-out",
        &ca,
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    (ca, cert, key)
}

fn checkpoints(storage: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut all = vec!["checkpoints"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--storage",
        storage,
        "--namespace",
        "myns.servicebus.windows.net",
        "--hub",
        "sensors",
    ]);
    common::hubhost(&all, env)
}

#[test]
fn checkpoints_live_in_blob_storage_signed_in_with_entra_id() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(dir.path());
    let port = common::free_port();
    let _azurite = common::Azurite::start_with(
        &dir.path().join("azurite"),
        port,
        &["--oauth", "basic", "--cert", &cert, "--key", &key],
    );
    let identity = IdentityEndpoint::start(dir.path());
    let storage = format!("https://127.0.0.1:{port}/devstoreaccount1");
    let endpoint = format!("http://127.0.0.1:{}/msi/token", identity.port);
    let authority = format!("http://127.0.0.1:{}", identity.port);
    let managed = [
        ("SSL_CERT_FILE", ca.as_str()),
        ("IDENTITY_ENDPOINT", endpoint.as_str()),
        ("IDENTITY_HEADER", HEADER),
    ];

    // Managed identity: write checkpoints, read them back.
    let (code, _, err) = checkpoints(
        &storage,
        &["reset", "--to", "start", "--yes", "--partition-count", "4"],
        &managed,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = checkpoints(&storage, &["list", "--json"], &managed);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["partitionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3"], "{out}");
    // Tokens were asked for Blob Storage, once per process (then cached).
    let asked = identity.requests();
    assert!(!asked.is_empty());
    assert!(
        asked
            .iter()
            .all(|r| r["query"]["resource"] == "https://storage.azure.com/"),
        "{asked:?}"
    );
    assert!(
        asked.len() <= 2,
        "a token per request instead of per process: {}",
        asked.len()
    );

    // A service principal (environment first, as in the SDKs' default chain).
    let principal = [
        ("SSL_CERT_FILE", ca.as_str()),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "client-1"),
        ("AZURE_CLIENT_SECRET", SECRET),
        ("AZURE_AUTHORITY_HOST", authority.as_str()),
    ];
    let (code, out, err) = checkpoints(&storage, &["list", "--json"], &principal);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert!(identity.requests().iter().any(
        |r| r["kind"] == "client secret" && r["scope"] == "https://storage.azure.com/.default"
    ));

    // Wrong identities: the identity service's reason, never the secret given.
    let wrong_header = [
        ("SSL_CERT_FILE", ca.as_str()),
        ("IDENTITY_ENDPOINT", endpoint.as_str()),
        ("IDENTITY_HEADER", "wrong-header-0b1d"),
    ];
    let (code, out, err) = checkpoints(&storage, &["list", "--json"], &wrong_header);
    assert_ne!(code, 0);
    assert!(err.contains("X-IDENTITY-HEADER is wrong"), "{err}");
    assert!(
        !format!("{out}{err}").contains("wrong-header-0b1d"),
        "{err}"
    );
    let wrong_secret = [
        ("SSL_CERT_FILE", ca.as_str()),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "client-1"),
        ("AZURE_CLIENT_SECRET", "not-the-secret-5e6f"),
        ("AZURE_AUTHORITY_HOST", authority.as_str()),
    ];
    let (code, out, err) = checkpoints(&storage, &["list", "--json"], &wrong_secret);
    assert_ne!(code, 0);
    assert!(err.contains("Invalid client secret"), "{err}");
    assert!(
        !format!("{out}{err}").contains("not-the-secret-5e6f"),
        "{err}"
    );
    // No identity at all: what to set.
    let (code, _, err) = checkpoints(&storage, &["list", "--json"], &[("SSL_CERT_FILE", &ca)]);
    assert_ne!(code, 0);
    assert!(err.contains("IDENTITY_ENDPOINT"), "{err}");
}
