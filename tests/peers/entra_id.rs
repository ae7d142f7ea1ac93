//! Entra ID sign-in through the `azure_identity` crate, with real processes:
//!
//! - Blob Storage: Azurite in its OAuth mode (HTTPS; it checks each bearer token's issuer,
//!   audience and lifetime) holds the checkpoint store of `hubhost checkpoints`;
//! - Event Hubs: `hubhost hub` told to trust one issuer (its JWKS) accepts the RS256 tokens the
//!   Rust SDK puts on `$cbs`, for `simulate`, `checkpoints reset --to end` and `emulate`.
//!
//! Tokens come from a local stand-in for the identity endpoints (`tests/python/identity_endpoint.py`):
//! the App Service / Functions managed identity endpoint (`IDENTITY_ENDPOINT`), Entra ID's token
//! endpoint for a client secret (`AZURE_AUTHORITY_HOST`), and the VM metadata endpoint (IMDS) at
//! its fixed address 169.254.169.254, inside a network namespace of the test's own. The
//! identity is chosen as the Functions host chooses it: the connection's `__credential`,
//! `__clientId`, `__tenantId`, `__clientSecret` settings, else the default chain. Wrong
//! identities get the identity service's reason, and no secret is ever echoed.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

const HEADER: &str = "identity-header-7f3a";
const SECRET: &str = "client-secret-9c2e";
const TENANT: &str = "tenant-1";
const CLIENT: &str = "client-1";
/// The user-assigned managed identity the stand-in knows.
const MANAGED_CLIENT: &str = "managed-client-2";
const ISSUER: &str = "https://sts.windows.net/tenant-1/";

/// Keys and certificates a test makes for itself, in `dir`.
struct Pki {
    /// A CA, and a certificate it signed for 127.0.0.1 with its key (TLS for Azurite and the
    /// stand-in; clients trust the CA through SSL_CERT_FILE).
    ca: String,
    cert: String,
    key: String,
    /// The stand-in's token signing key (PEM), and its public half as a JWKS file.
    signing_key: String,
    jwks: String,
    /// Another key's JWKS: a hub trusting it must refuse the stand-in's tokens.
    other_jwks: String,
}

fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl {args:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A JWKS document for an RSA key in PEM (exponent 65537, what openssl makes).
fn jwks_of(key: &str, path: &str) {
    let modulus = openssl(&["rsa", "-in", key, "-noout", "-modulus"]);
    let hex = modulus.trim().trim_start_matches("Modulus=");
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    std::fs::write(
        path,
        format!(
            r#"{{"keys":[{{"kty":"RSA","use":"sig","kid":"test-key","n":"{n}","e":"AQAB"}}]}}"#
        ),
    )
    .unwrap();
}

fn pki(dir: &Path) -> Pki {
    let path = |f: &str| dir.join(f).display().to_string();
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
    let (signing_key, jwks) = (path("signing.pem"), path("jwks.json"));
    let (other_key, other_jwks) = (path("other.pem"), path("other-jwks.json"));
    for (k, j) in [(&signing_key, &jwks), (&other_key, &other_jwks)] {
        openssl(&["genrsa", "-out", k, "2048"]);
        jwks_of(k, j);
    }
    Pki {
        ca,
        cert,
        key,
        signing_key,
        jwks,
        other_jwks,
    }
}

/// The stand-in for the identity endpoints, over HTTPS on a free port, killed on drop.
struct IdentityEndpoint {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl IdentityEndpoint {
    fn start(dir: &Path, pki: &Pki) -> IdentityEndpoint {
        let port = common::free_port();
        let log = dir.join("identity.log");
        let child = Command::new(common::python())
            .arg(identity_script())
            .args(stand_in_args(pki, "127.0.0.1", port))
            .args(["--tls", &pki.cert, &pki.key])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        common::wait_for_port(port, "the identity endpoint");
        IdentityEndpoint { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The requests it answered so far, each a JSON object.
    fn requests(&self) -> Vec<Value> {
        read_requests(&self.log)
    }

    /// A connection's settings for a service principal of this endpoint's: `(prefix, where
    /// property, where value)` — e.g. `("AzureWebJobsStorage", "blobServiceUri", url)` — and its
    /// `__tenantId`, `__clientId`, `__clientSecret`.
    fn service_principal(
        &self,
        ca: &str,
        (prefix, property, location): (&str, &str, &str),
        secret: &str,
    ) -> Vec<(String, String)> {
        vec![
            ("SSL_CERT_FILE".into(), ca.into()),
            ("AZURE_AUTHORITY_HOST".into(), self.url("")),
            (format!("{prefix}__{property}"), location.into()),
            (format!("{prefix}__tenantId"), TENANT.into()),
            (format!("{prefix}__clientId"), CLIENT.into()),
            (format!("{prefix}__clientSecret"), secret.into()),
        ]
    }

    /// The managed identity endpoint of App Service and Functions, as the platform sets it.
    fn managed_identity(&self, ca: &str) -> Vec<(String, String)> {
        vec![
            ("SSL_CERT_FILE".into(), ca.into()),
            ("IDENTITY_ENDPOINT".into(), self.url("/msi/token")),
            ("IDENTITY_HEADER".into(), HEADER.into()),
        ]
    }
}

impl Drop for IdentityEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn identity_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/identity_endpoint.py")
}

fn stand_in_args(pki: &Pki, bind: &str, port: u16) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        bind,
        "--header",
        HEADER,
        "--tenant",
        TENANT,
        "--client-id",
        CLIENT,
        "--secret",
        SECRET,
        "--managed-client-id",
        MANAGED_CLIENT,
        "--issuer",
        ISSUER,
        "--key",
        &pki.signing_key,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn read_requests(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn env_refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn checkpoints(args: &[&str], env: &[(String, String)]) -> (i32, String, String) {
    let mut all = vec!["checkpoints"];
    all.extend_from_slice(args);
    all.extend_from_slice(&[
        "--namespace",
        "myns.servicebus.windows.net",
        "--hub",
        "sensors",
    ]);
    common::hubhost(&all, &env_refs(env))
}

fn with(base: &[(String, String)], more: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = base.to_vec();
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

#[test]
fn checkpoints_live_in_blob_storage_signed_in_with_entra_id() {
    common::require!(Tool::Azurite, Tool::PythonSdk, Tool::SystemTools);
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let port = common::free_port();
    let _azurite = common::Azurite::start_with(
        &dir.path().join("azurite"),
        port,
        &["--oauth", "basic", "--cert", &pki.cert, "--key", &pki.key],
    );
    let identity = IdentityEndpoint::start(dir.path(), &pki);
    let storage = format!("https://127.0.0.1:{port}/devstoreaccount1");
    let managed = identity.managed_identity(&pki.ca);

    // The default chain, on App Service / Functions: the managed identity endpoint.
    let (code, _, err) = checkpoints(
        &[
            "reset",
            "--to",
            "start",
            "--yes",
            "--partition-count",
            "4",
            "--storage",
            &storage,
        ],
        &managed,
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = checkpoints(&["list", "--json", "--storage", &storage], &managed);
    assert_eq!(code, 0, "{err}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["partitionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3"], "{out}");
    // Tokens were asked for Blob Storage, once per process (then cached by the credential).
    let asked = identity.requests();
    assert!(!asked.is_empty());
    assert!(
        asked.iter().all(|r| r["kind"] == "managed identity"
            && r["query"]["resource"] == "https://storage.azure.com"
            && r["query"].get("client_id").is_none()),
        "{asked:?}"
    );
    assert!(
        asked.len() <= 2,
        "a token per request instead of per process: {}",
        asked.len()
    );

    // The default chain with a service principal in the environment (it comes first).
    let principal = vec![
        ("SSL_CERT_FILE".to_string(), pki.ca.clone()),
        ("AZURE_TENANT_ID".into(), TENANT.into()),
        ("AZURE_CLIENT_ID".into(), CLIENT.into()),
        ("AZURE_CLIENT_SECRET".into(), SECRET.into()),
        ("AZURE_AUTHORITY_HOST".into(), identity.url("")),
    ];
    let (code, out, err) = checkpoints(&["list", "--json", "--storage", &storage], &principal);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["kind"] == "client secret"
                && r["scope"] == "https://storage.azure.com/.default"
                && r["client_id"] == CLIENT)
    );

    // The host's settings forms, without --storage: the connection's own identity settings.
    let user_assigned = with(
        &managed,
        &[
            ("AzureWebJobsStorage__blobServiceUri", &storage),
            ("AzureWebJobsStorage__credential", "managedidentity"),
            ("AzureWebJobsStorage__clientId", MANAGED_CLIENT),
        ],
    );
    let (code, _, err) = checkpoints(&["list", "--json"], &user_assigned);
    assert_eq!(code, 0, "{err}");
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["query"]["client_id"] == MANAGED_CLIENT),
        "the user-assigned identity was not asked for"
    );
    let secret_settings = identity.service_principal(
        &pki.ca,
        ("AzureWebJobsStorage", "blobServiceUri", &storage),
        SECRET,
    );
    let before = identity.requests().len();
    let (code, _, err) = checkpoints(&["list", "--json"], &secret_settings);
    assert_eq!(code, 0, "{err}");
    assert!(
        identity.requests()[before..]
            .iter()
            .all(|r| r["kind"] == "client secret"),
        "the settings' service principal was not the one used"
    );

    // Wrong identities: the identity service's reason, never the secret given.
    let wrong_header = with(&managed, &[("IDENTITY_HEADER", "wrong-header-0b1d")]);
    let (code, out, err) = checkpoints(&["list", "--json", "--storage", &storage], &wrong_header);
    assert_ne!(code, 0);
    assert!(err.contains("X-IDENTITY-HEADER is wrong"), "{err}");
    assert!(
        !format!("{out}{err}").contains("wrong-header-0b1d"),
        "{err}"
    );
    let unknown = with(
        &managed,
        &[
            ("AzureWebJobsStorage__blobServiceUri", &storage),
            ("AzureWebJobsStorage__credential", "managedidentity"),
            ("AzureWebJobsStorage__clientId", "nobody-9"),
        ],
    );
    let (code, _, err) = checkpoints(&["list", "--json"], &unknown);
    assert_ne!(code, 0);
    assert!(err.contains("has not been assigned"), "{err}");
    let wrong_secret = with(
        &principal,
        &[("AZURE_CLIENT_SECRET", "not-the-secret-5e6f")],
    );
    let (code, out, err) = checkpoints(&["list", "--json", "--storage", &storage], &wrong_secret);
    assert_ne!(code, 0);
    assert!(err.contains("Invalid client secret"), "{err}");
    assert!(
        !format!("{out}{err}").contains("not-the-secret-5e6f"),
        "{err}"
    );
    // On a developer's machine the default chain ends with the Azure CLI's sign-in: a stand-in
    // `az` that answers `az account get-access-token` with a token of the identity endpoint's.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let az = bin.join("az");
    std::fs::write(
        &az,
        format!(
            r#"#!{python}
import json, ssl, sys, urllib.parse, urllib.request
scope = sys.argv[sys.argv.index("--scope") + 1]
query = urllib.parse.urlencode({{"api-version": "2019-08-01", "via": "az", "resource": scope.removesuffix("/.default")}})
request = urllib.request.Request("{url}?" + query, headers={{"X-IDENTITY-HEADER": "{HEADER}"}})
token = json.load(urllib.request.urlopen(request, context=ssl.create_default_context(cafile="{ca}")))
print(json.dumps({{"accessToken": token["access_token"], "expires_on": int(token["expires_on"]), "tokenType": "Bearer"}}))
"#,
            python = common::python().display(),
            url = identity.url("/msi/token"),
            ca = pki.ca,
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &az,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let developer = vec![
        ("SSL_CERT_FILE".to_string(), pki.ca.clone()),
        ("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())),
    ];
    let (code, _, err) = checkpoints(&["list", "--json", "--storage", &storage], &developer);
    assert_eq!(code, 0, "{err}");
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["query"]["via"] == "az"),
        "the Azure CLI was not asked"
    );

    // No identity at all: what the default chain tried, and why each failed.
    let (code, _, err) = checkpoints(
        &["list", "--json", "--storage", &storage],
        &[
            ("SSL_CERT_FILE".into(), pki.ca.clone()),
            ("PATH".into(), "/nonexistent".into()),
        ],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("ManagedIdentity") && err.contains("DeveloperTools"),
        "{err}"
    );
}

/// `hubhost hub` trusting the stand-in's issuer, in memory, on a free port.
fn hub_trusting(jwks: &str) -> common::Hub {
    common::Hub::start_with_flags(&["--entra-issuer", ISSUER, "--entra-jwks", jwks])
}

/// A hub with more flags whose log (what it refused, and why) goes to `log`.
struct LoggedHub {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl LoggedHub {
    fn start(dir: &Path, name: &str, flags: &[&str]) -> LoggedHub {
        let port = common::free_port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(["hub", "--in-memory", "--port", &port.to_string()])
            .args(flags)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_for_port(port, "hubhost hub");
        LoggedHub { child, port, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LoggedHub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn simulate(namespace: &str, events: u32, env: &[(String, String)]) -> (i32, String, String) {
    common::hubhost(
        &[
            "simulate",
            "--fully-qualified-namespace",
            namespace,
            "--hub",
            "sensors",
            "--homes",
            "50",
            "--unthrottled",
            "--events",
            &events.to_string(),
            "--json",
        ],
        &env_refs(env),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_based_event_hubs_connections_reach_the_local_hub() {
    common::require!(Tool::PythonSdk, Tool::SystemTools);
    use hubhost_testkit::pool::{AppFolder, EmulatePool};

    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let identity = IdentityEndpoint::start(dir.path(), &pki);
    let hub = hub_trusting(&pki.jwks);
    let namespace = format!("localhost:{}", hub.port);
    let managed = identity.managed_identity(&pki.ca);

    // simulate: --fully-qualified-namespace, the default chain (managed identity).
    let (code, out, err) = simulate(&namespace, 200, &managed);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["events"], 200, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["kind"] == "managed identity"
                && r["query"]["resource"] == "https://eventhubs.azure.net")
    );

    // checkpoints reset --to end: the host's settings forms, a user-assigned identity.
    let store = dir.path().join("store");
    let store = store.display().to_string();
    let settings = with(
        &managed,
        &[
            ("EventHubConnection__fullyQualifiedNamespace", &namespace),
            ("EventHubConnection__credential", "managedidentity"),
            ("EventHubConnection__clientId", MANAGED_CLIENT),
        ],
    );
    let local_checkpoints = |args: &[&str], env: &[(String, String)]| {
        let mut all = vec!["checkpoints"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--storage",
            &store,
            "--namespace",
            "localhost",
            "--hub",
            "sensors",
        ]);
        common::hubhost(&all, &env_refs(env))
    };
    let (code, _, err) = local_checkpoints(&["reset", "--to", "end", "--yes"], &settings);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = local_checkpoints(&["list", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let at_end: i64 = serde_json::from_str::<Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["sequenceNumber"].as_i64().unwrap() + 1)
        .sum();
    assert_eq!(
        at_end, 200,
        "every partition's end, read as that identity: {out}"
    );
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["query"]["resource"] == "https://eventhubs.azure.net"
                && r["query"]["client_id"] == MANAGED_CLIENT)
    );

    // emulate: the trigger's connection as a service principal's settings; it reads all 200.
    let app = dir.path().join("app");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_hubhost"));
    AppFolder {
        handler: (&exe, &["serve"]),
        functions: &[(
            "SensorAggregator",
            include_str!("../../function_app/SensorAggregator/function.json"),
        )],
        max_batch: 100,
        prefetch: 300,
        ownership_expiry: None,
        values: &[
            (
                "AzureWebJobsStorage",
                dir.path().join("app-data").display().to_string(),
            ),
            ("EventHubName", "sensors".into()),
            (
                "EventHubConnection__fullyQualifiedNamespace",
                namespace.clone(),
            ),
            ("EventHubConnection__tenantId", TENANT.into()),
            ("EventHubConnection__clientId", CLIENT.into()),
            ("EventHubConnection__clientSecret", SECRET.into()),
        ],
    }
    .write(&app)
    .unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let mut pool = EmulatePool::new(&exe, &app, &logs);
    pool.start(
        "e1",
        &[
            ("SSL_CERT_FILE", pki.ca.clone()),
            ("AZURE_AUTHORITY_HOST", identity.url("")),
        ],
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let processed = loop {
        let processed: f64 = match pool.metrics("e1").await {
            Ok((_, samples)) => samples
                .iter()
                .filter(|s| s.name == "hubhost_events_processed_total")
                .map(|s| s.value)
                .sum(),
            Err(_) => 0.0,
        };
        if processed >= 200.0 || Instant::now() > deadline {
            break processed;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    pool.stop_all().await.unwrap();
    assert_eq!(processed, 200.0, "{}", pool.log("e1"));
    let log = pool.log("e1");
    assert!(!log.contains(SECRET), "the client secret reached a log");
    assert!(
        identity
            .requests()
            .iter()
            .any(|r| r["kind"] == "client secret"
                && r["scope"] == "https://eventhubs.azure.net/.default")
    );

    // Refused: a hub that trusts another issuer's keys, and one that trusts none. The SDK
    // reports only that authorizing failed; the hub's log says why.
    let stranger = LoggedHub::start(
        dir.path(),
        "stranger",
        &["--entra-issuer", ISSUER, "--entra-jwks", &pki.other_jwks],
    );
    let (code, out, err) = simulate(&format!("localhost:{}", stranger.port), 5, &managed);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("authoriz"), "{err}");
    assert!(
        stranger.log().contains("signature does not verify"),
        "{}",
        stranger.log()
    );
    let plain = LoggedHub::start(dir.path(), "plain", &[]);
    let (code, _, err) = simulate(&format!("localhost:{}", plain.port), 5, &managed);
    assert_ne!(code, 0);
    assert!(err.contains("authoriz"), "{err}");
    assert!(
        plain.log().contains("accepts SAS tokens only"),
        "{}",
        plain.log()
    );
    let log = stranger.log() + &plain.log();
    assert!(!log.contains("eyJ"), "a token reached the hub's log");
    // And a secret that is wrong never reaches the output.
    let wrong = identity.service_principal(
        &pki.ca,
        ("EventHubConnection", "fullyQualifiedNamespace", &namespace),
        "wrong-secret-77aa",
    );
    let (code, out, err) = common::hubhost(
        &[
            "simulate",
            "--hub",
            "sensors",
            "--events",
            "5",
            "--homes",
            "5",
            "--unthrottled",
        ],
        &env_refs(&wrong),
    );
    assert_ne!(code, 0);
    assert!(err.contains("Invalid client secret"), "{err}");
    assert!(!format!("{out}{err}").contains("wrong-secret-77aa"));
}

/// On a VM or an AKS node the managed identity comes from the instance metadata endpoint at
/// 169.254.169.254, which the default chain probes when `IDENTITY_ENDPOINT` is not set. The
/// test gives a network namespace of its own that address, serves the stand-in there, and runs
/// a hub and `hubhost simulate` inside it.
#[test]
fn managed_identity_on_a_vm_comes_from_the_metadata_endpoint() {
    common::require!(Tool::PythonSdk, Tool::SystemTools);
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let log = dir.path().join("imds.log");
    let hub_port = common::free_port();
    let python = common::python();
    let script = format!(
        r#"set -e
trap 'kill $(jobs -p) 2>/dev/null' EXIT
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
"{python}" "{standin}" {args} > "{log}" 2>/dev/null &
"{hubhost}" hub --in-memory --port {hub_port} --entra-issuer "{issuer}" --entra-jwks "{jwks}" > /dev/null 2>&1 &
for i in $(seq 1 200); do
  (echo > /dev/tcp/169.254.169.254/80) 2>/dev/null && (echo > /dev/tcp/127.0.0.1/{hub_port}) 2>/dev/null && break
  sleep 0.05
done
"{hubhost}" simulate --fully-qualified-namespace localhost:{hub_port} --hub sensors --homes 20 --unthrottled --events 40 --json
"#,
        python = python.display(),
        standin = identity_script().display(),
        args = stand_in_args(&pki, "169.254.169.254", 80).join(" "),
        log = log.display(),
        hubhost = env!("CARGO_BIN_EXE_hubhost"),
        issuer = ISSUER,
        jwks = pki.jwks,
    );
    let out = common::output_within(
        Command::new("unshare")
            .args(["--net", "--kill-child", "--", "bash", "-c", &script])
            .env_remove("IDENTITY_ENDPOINT")
            .env_remove("IDENTITY_HEADER")
            .env_remove("AZURE_CLIENT_SECRET"),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("simulate's summary ({e}): {stderr}"));
    assert_eq!(summary["events"], 40, "{summary}");
    let asked = read_requests(&log);
    assert!(
        asked.iter().any(|r| r["kind"] == "imds"
            && r["query"]["resource"] == "https://eventhubs.azure.net"),
        "{asked:?}"
    );
}

/// Kafka clients sign in to the hub's Kafka endpoint with OAUTHBEARER and an Entra ID token, as
/// Event Hubs accepts: librdkafka takes each token from the managed identity endpoint; a hub
/// trusting another key refuses the same token with the reason.
#[test]
fn a_kafka_client_signs_in_with_an_entra_id_token() {
    common::require!(Tool::PythonSdk, Tool::SystemTools, Tool::KafkaClients);
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let identity = IdentityEndpoint::start(dir.path(), &pki);
    for (jwks, accepted) in [(&pki.jwks, true), (&pki.other_jwks, false)] {
        let kafka_port = common::free_port();
        let _hub = common::Hub::start_with_flags(&[
            "--entra-issuer",
            ISSUER,
            "--entra-jwks",
            jwks,
            "--kafka-port",
            &kafka_port.to_string(),
        ]);
        common::wait_for_port(kafka_port, "the Kafka endpoint");
        let out = common::python_json(
            "kafka_peer.py",
            &[
                "oauth-produce",
                &format!("127.0.0.1:{kafka_port}"),
                &identity.url("/msi/token"),
                HEADER,
                &pki.ca,
                "sensors",
            ],
        );
        let errors = out["errors"].to_string();
        if accepted {
            assert_eq!(out["placed"].as_array().unwrap().len(), 5, "{out}");
            assert_eq!(errors, "[]");
        } else {
            assert!(out["placed"].as_array().unwrap().is_empty(), "{out}");
            assert!(
                errors.contains("Entra ID token is refused") && errors.contains("signature"),
                "{errors}"
            );
        }
    }
}

/// `hubhost hub --identity-port 0` is a managed identity endpoint of its own: with the
/// IDENTITY_ENDPOINT and IDENTITY_HEADER it prints, an app's identity-based connection signs in
/// to that hub as it would to Event Hubs on Azure (docs/identity.md); a wrong header is
/// refused with the endpoint's reason.
#[test]
fn the_hubs_own_identity_endpoint_signs_apps_in_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let out = dir.path().join("hub.out");
    let mut hub = common::KilledOnDrop(
        Command::new(env!("CARGO_BIN_EXE_hubhost"))
            .args(["hub", "--in-memory", "--port", &port.to_string()])
            .args(["--identity-port", "0"])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    common::wait_for_port(port, "hubhost hub");
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let printed = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(line) = printed
            .lines()
            .find(|l| l.starts_with("managed identity: "))
        {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no managed identity line: {printed}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let value = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} in {line}"))
            .to_string()
    };
    let (endpoint, header) = (value("IDENTITY_ENDPOINT"), value("IDENTITY_HEADER"));
    let namespace = format!("localhost:{port}");
    let env = |header: &str| {
        vec![
            ("IDENTITY_ENDPOINT".to_string(), endpoint.clone()),
            ("IDENTITY_HEADER".to_string(), header.to_string()),
        ]
    };
    let (code, stdout, stderr) = simulate(&namespace, 50, &env(&header));
    assert_eq!(code, 0, "{stderr}");
    let summary: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["events"], 50, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");

    let (code, _, stderr) = simulate(&namespace, 5, &env("not-the-header"));
    assert_ne!(code, 0, "a wrong IDENTITY_HEADER signs nobody in");
    assert!(stderr.contains("X-IDENTITY-HEADER"), "{stderr}");
    assert!(
        !stderr.contains(&header),
        "the secret never reaches the output"
    );
    hub.stop();
}
