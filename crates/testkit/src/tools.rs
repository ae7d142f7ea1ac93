//! The tools a test may need beyond Rust, where the test command (`scripts/test.sh`) installs
//! them, and what a test does where one is missing.
//!
//! `cargo test --workspace` on a machine with nothing but Rust skips the tests that need
//! Azurite, the Python SDK, Chromium or cargo-zigbuild, each saying in one line what it needs;
//! `scripts/test.sh` installs them all and sets `HUBHOST_REQUIRE_TOOLS=1`, under which a missing
//! tool fails the test instead, so the full suite never passes by skipping.

use std::io::Write;
use std::path::PathBuf;

use crate::process::on_path;
use crate::repository;

/// A tool beyond Rust that some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// Azurite's blob service (npm), the local Azure Storage.
    Azurite,
    /// A Python with the official `azure-eventhub` and `azure-eventhub-checkpointstoreblob`.
    PythonSdk,
    /// Debian's Chromium driven by `playwright-core` (npm).
    Browser,
    /// Node.js with the official `@azure/event-hubs` package and `ws` (npm).
    JsSdk,
    /// Kafka clients in the Python of `PythonSdk`: `confluent-kafka` (librdkafka) and the pure
    /// Python `kafka-python`.
    KafkaClients,
    /// OpenTelemetry in the Python of `PythonSdk`: the SDK with its OTLP/HTTP exporter,
    /// `azure-core-tracing-opentelemetry` (the Azure SDK's tracing), and `opentelemetry-proto`
    /// with `grpcio` (an OTLP receiver).
    OpenTelemetry,
    /// `cargo-zigbuild` and Zig, to build for glibc 2.28.
    Zigbuild,
    /// A JDK with the official Java Event Hubs SDK and its blob checkpoint store (Maven
    /// Central), in `.tools/java/eventhubs`.
    JavaSdk,
    /// A JDK with Apache Kafka's own Java client, each version of [`KAFKA_JAVA_VERSIONS`] in
    /// `.tools/java/kafka-clients-VERSION`.
    KafkaJava,
    /// Go with the official Go Event Hubs SDK's modules (the Go module proxy), in
    /// `.tools/go`.
    GoSdk,
    /// `openssl`, `unshare` and `ip`: certificates, keys and network namespaces.
    SystemTools,
}

impl Tool {
    /// What it is, for the line a skipped test prints.
    pub fn describe(self) -> &'static str {
        match self {
            Tool::Azurite => "Azurite",
            Tool::PythonSdk => "the official Python Event Hubs SDK",
            Tool::Browser => "Chromium and playwright-core",
            Tool::JsSdk => "Node.js with the official JavaScript Event Hubs SDK",
            Tool::KafkaClients => "confluent-kafka and kafka-python",
            Tool::OpenTelemetry => "the Python OpenTelemetry SDK, opentelemetry-proto and grpcio",
            Tool::Zigbuild => "cargo-zigbuild and Zig",
            Tool::JavaSdk => "a JDK with the official Java Event Hubs SDK",
            Tool::KafkaJava => "a JDK with Apache Kafka's Java client (kafka-clients)",
            Tool::GoSdk => "Go with the official Go Event Hubs SDK (azeventhubs)",
            Tool::SystemTools => "openssl, unshare and ip",
        }
    }

    /// Whether it is installed where the tests look for it.
    pub fn is_installed(self) -> bool {
        match self {
            Tool::Azurite => azurite_path().exists(),
            Tool::PythonSdk => python_path().exists(),
            Tool::Browser => {
                node_modules_path().join("playwright-core").exists()
                    && on_path("chromium").is_some()
            }
            Tool::JsSdk => {
                node_modules_path().join("@azure/event-hubs").exists()
                    && node_modules_path().join("ws").exists()
                    && on_path("node").is_some()
            }
            Tool::KafkaClients => python_has(&["confluent_kafka", "kafka"]),
            Tool::OpenTelemetry => python_has(&[
                "opentelemetry/sdk",
                "opentelemetry/proto",
                "opentelemetry/exporter/otlp/proto/http",
                "azure/core/tracing/ext/opentelemetry_span",
                "grpc",
            ]),
            Tool::Zigbuild => {
                let tools = repository().join(".tools");
                tools.join("zig-venv/bin/cargo-zigbuild").exists()
                    && tools.join("zig-venv/bin/python").exists()
            }
            Tool::JavaSdk => {
                on_path("java").is_some() && java_libraries("eventhubs").join(".complete").exists()
            }
            Tool::KafkaJava => {
                on_path("java").is_some()
                    && KAFKA_JAVA_VERSIONS.iter().all(|version| {
                        java_libraries(&format!("kafka-clients-{version}"))
                            .join(".complete")
                            .exists()
                    })
            }
            Tool::GoSdk => {
                on_path("go").is_some() && repository().join(".tools/go/.complete").exists()
            }
            Tool::SystemTools => ["openssl", "unshare", "ip"]
                .into_iter()
                .all(|program| on_path(program).is_some()),
        }
    }
}

/// The versions of Apache Kafka's Java client the tests run, newest 3.x and newest 4.x:
/// `scripts/install-test-tools.sh` installs each.
pub const KAFKA_JAVA_VERSIONS: [&str; 2] = ["3.9.2", "4.4.0"];

/// The folder of jars `scripts/install-test-tools.sh` copied from Maven Central for one Java
/// peer (`eventhubs`, `kafka-clients-VERSION`): the classpath `DIR/*` of a program in
/// `tests/java/`.
pub fn java_libraries(name: &str) -> PathBuf {
    repository().join(".tools/java").join(name)
}

/// Release-profile settings that build in a fraction of the time, for the tests that run the
/// README's `cargo install` and `cargo run --release` (Cargo takes them from the environment,
/// the commands unchanged): no link-time optimization, sixteen codegen units, opt-level 0. What
/// those tests check does not depend on optimization, and the release profile proper optimizes
/// the whole program at once, the longest build of the suite. `hubhost package` takes such a
/// setting as the user's, so the package tests build with the full profile instead: the size of
/// the deployed executable is one of the things they check.
pub const QUICK_RELEASE: &[(&str, &str)] = &[
    ("CARGO_PROFILE_RELEASE_LTO", "false"),
    ("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16"),
    ("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0"),
];

/// Whether the tests' Python has each of `packages` (paths under site-packages).
fn python_has(packages: &[&str]) -> bool {
    let lib = repository().join(".tools/venv/lib");
    std::fs::read_dir(lib)
        .into_iter()
        .flatten()
        .flatten()
        .any(|python| {
            let site = python.path().join("site-packages");
            packages.iter().all(|package| site.join(package).exists())
        })
}

/// Whether every tool in `needs` is installed; where one is not, prints
/// `skipped TEST: needs …` on the terminal (past the test harness's capture) and returns
/// false, or fails the test under `HUBHOST_REQUIRE_TOOLS=1`. Use it through [`require!`](crate::require).
pub fn available(test: &str, needs: &[Tool]) -> bool {
    let missing: Vec<&str> = needs
        .iter()
        .filter(|tool| !tool.is_installed())
        .map(|tool| tool.describe())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let test = test.replace("::{{closure}}", "");
    let line = format!(
        "skipped {test}: needs {} — run scripts/test.sh, which installs them",
        missing.join(", ")
    );
    if std::env::var_os("HUBHOST_REQUIRE_TOOLS").is_some_and(|v| v != "0") {
        panic!("{line} (HUBHOST_REQUIRE_TOOLS is set: the full suite runs every test)");
    }
    let _ = writeln!(std::io::stderr(), "{line}");
    false
}

/// Skips the rest of the test (returns) unless every tool named is installed:
/// `hubhost_testkit::require!(Tool::Azurite, Tool::PythonSdk);`. See [`available`].
#[macro_export]
macro_rules! require {
    ($($tool:expr),+ $(,)?) => {
        if !$crate::tools::available(
            {
                fn here() {}
                let name = ::std::any::type_name_of_val(&here);
                name.strip_suffix("::here").unwrap_or(name)
            },
            &[$($tool),+],
        ) {
            return;
        }
    };
}

fn tool_path(override_var: &str, relative: &str) -> PathBuf {
    match std::env::var_os(override_var) {
        Some(path) => PathBuf::from(path),
        None => repository().join(relative),
    }
}

fn azurite_path() -> PathBuf {
    tool_path(
        "HUBHOST_AZURITE_BIN",
        ".tools/node_modules/.bin/azurite-blob",
    )
}

fn python_path() -> PathBuf {
    tool_path("HUBHOST_PYTHON", ".tools/venv/bin/python")
}

fn node_modules_path() -> PathBuf {
    tool_path("HUBHOST_NODE_MODULES", ".tools/node_modules")
}

fn installed(tool: Tool, path: PathBuf) -> PathBuf {
    assert!(
        tool.is_installed(),
        "{} is not installed at {}: run scripts/test.sh (it installs it); a test that needs it starts with require!({tool:?})",
        tool.describe(),
        path.display()
    );
    path
}

/// Azurite's `azurite-blob` (HUBHOST_AZURITE_BIN, else where `scripts/test.sh` installs it).
pub fn azurite_bin() -> PathBuf {
    installed(Tool::Azurite, azurite_path())
}

/// The `node_modules` that holds `playwright-core` (HUBHOST_NODE_MODULES, else where
/// `scripts/test.sh` installs it).
pub fn node_modules() -> PathBuf {
    installed(Tool::Browser, node_modules_path())
}

/// The `node_modules` that holds `@azure/event-hubs` and `ws` (HUBHOST_NODE_MODULES, else where
/// `scripts/test.sh` installs them).
pub fn js_sdk_node_modules() -> PathBuf {
    installed(Tool::JsSdk, node_modules_path())
}

/// The Python that has the official Azure SDK packages (HUBHOST_PYTHON, else the virtualenv
/// `scripts/test.sh` makes).
pub fn python() -> PathBuf {
    installed(Tool::PythonSdk, python_path())
}
