//! `hubhost package` as a user runs it before deploying: it builds the reference app's handler
//! with cargo-zigbuild for glibc 2.28, zips the script root, and reads the zip back. Checked
//! here: the zip holds exactly host.json, the function folders and the executable (run bit
//! set, no local.settings.json); the executable asks for no glibc newer than 2.28 (read from
//! its ELF headers here as well as by the command) and runs; and the command refuses what the
//! platform would fail on — a binary linked against this machine's glibc, a zip carrying local
//! secrets, an executable without its run bit, a host.json naming a file that is not there.
//!
//! It builds with the full profile, as a user's `hubhost package` does, because the executable's
//! size is checked: at most 12 MB, since the platform copies and maps it on every cold start.
//! And the packaged handler exports its spans over OTLP/HTTP to a receiver built on
//! OpenTelemetry's own protobuf definitions, and says at start-up that it has no gRPC export
//! when asked for one (it is built without, to stay small). tests/docs.rs packages the
//! reference app with the same settings, reusing this build.
//!
//! cargo-zigbuild and Zig come from the registries into .tools/ (scripts/test.sh installs them).

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// PATH with the installed cargo-zigbuild and Zig first.
fn tool_path() -> String {
    let tools = repo().join(".tools");
    let zigbuild = tools.join("zig-venv/bin/cargo-zigbuild");
    assert!(
        zigbuild.exists(),
        "cargo-zigbuild is not installed in .tools/zig-venv (scripts/test.sh installs it)"
    );
    format!(
        "{}:{}",
        tools.join("zig-venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn package(args: &[&str]) -> (bool, String, String) {
    let out = common::output_within(
        common::without_test_run_env(&mut Command::new(env!("CARGO_BIN_EXE_hubhost")))
            .arg("package")
            .args(args)
            .env("PATH", tool_path())
            .current_dir(repo()),
        Duration::from_secs(2400),
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every entry of a zip: name → (content, Unix mode).
fn entries(zip: &Path) -> Vec<(String, Vec<u8>, Option<u32>)> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(zip).unwrap()).unwrap();
    (0..archive.len())
        .map(|i| {
            let mut e = archive.by_index(i).unwrap();
            let mut content = Vec::new();
            e.read_to_end(&mut content).unwrap();
            (e.name().unwrap().to_string(), content, e.unix_mode())
        })
        .collect()
}

/// A file to put in a zip: name, content, Unix mode.
type ZipFile<'a> = (&'a str, &'a [u8], u32);

/// A zip of `files`.
fn write_zip(path: &Path, files: &[ZipFile]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, content, mode) in files {
        zip.start_file(
            *name,
            zip::write::SimpleFileOptions::default().unix_permissions(*mode),
        )
        .unwrap();
        zip.write_all(content).unwrap();
    }
    zip.finish().unwrap();
}

/// The packaged handler `exe` under `hubhost invoke`, in the app folder as the zip has it (a
/// bare `defaultExecutablePath` is looked for there first): with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the invocation's span reaches a receiver over
/// HTTP; asked for gRPC, which it is built without, it says so and the invocation still runs.
fn exports_spans_over_http_and_names_grpc_missing(exe: &Path, dir: &Path) {
    let receiver = common::OtlpReceiver::start();
    let project = dir.join("project");
    common::copy_dir(&repo().join("function_app"), &project.join("function_app"));
    std::fs::copy(exe, project.join("function_app/hubhost-app")).unwrap();
    let settings = serde_json::json!({"IsEncrypted": false, "Values": {
        "FUNCTIONS_WORKER_RUNTIME": "custom",
        "EventHubName": "sensors",
        "AzureWebJobsStorage": "storage",
        // The handler's spans by name: `hubhost invoke` exports its own as `hubhost-emulate`.
        "OTEL_SERVICE_NAME": "packaged-handler",
        // Never dialled: invoke shows what the outputs would do without carrying them out.
        "EventHubConnection": "Endpoint=sb://localhost:1;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;",
    }});
    std::fs::write(
        project.join("function_app/local.settings.json"),
        settings.to_string(),
    )
    .unwrap();
    let reading = serde_json::json!({"homeId": "home-00007", "sensorId": "s", "type": "motion",
        "state": "motion", "ts": "2026-12-07T10:00:00Z"});
    std::fs::write(
        project.join("events.json"),
        serde_json::json!([{"body": reading.to_string()}]).to_string(),
    )
    .unwrap();
    let invoke = |protocol: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hubhost"));
        command
            .args(["invoke", "RawArchive", "--app", "function_app"])
            .args(["--events", "events.json"])
            .current_dir(&project)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.http_endpoint())
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .env_remove("OTEL_SERVICE_NAME")
            .env_remove("RUST_LOG");
        let out = common::output_within(&mut command, common::COMMAND_LIMIT);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    invoke("http/protobuf");
    let span = receiver.wait_for("the packaged handler's invocation span", |records| {
        common::OtlpReceiver::spans(records, "packaged-handler")
            .find(|s| s["attributes"]["faas.name"] == "RawArchive")
            .cloned()
    });
    assert_eq!(span["transport"], "http/protobuf", "{span}");
    let said = invoke("grpc");
    assert!(
        said.contains("built without OTLP over gRPC") && said.contains("http/protobuf"),
        "{said}"
    );
    // Said once, and not contradicted: nothing claims it exports.
    assert!(
        !said
            .lines()
            .any(|l| l.contains("exporting OpenTelemetry") && l.contains("Grpc")),
        "{said}"
    );
}

#[test]
fn the_reference_app_is_packaged_for_the_functions_linux_images() {
    common::require!(Tool::Zigbuild, Tool::OpenTelemetry);
    let dir = tempfile::tempdir().unwrap();
    let zip = dir.path().join("app.zip");
    let zip_arg = zip.display().to_string();
    let (ok, out, err) = package(&["--out", &zip_arg, "--json"]);
    assert!(ok, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["executable"], "hubhost-app");
    let functions: Vec<&str> = report["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(functions, ["Dashboard", "RawArchive", "SensorAggregator"]);

    let entries = entries(&zip);
    let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "host.json",
            "Dashboard/function.json",
            "RawArchive/function.json",
            "SensorAggregator/function.json",
            "hubhost-app"
        ]
    );
    let (_, binary, mode) = entries.iter().find(|(n, _, _)| n == "hubhost-app").unwrap();
    assert_eq!(mode.unwrap() & 0o777, 0o755);
    // Read independently of the command: nothing newer than GLIBC_2.28, only the C runtime.
    let needs = hubhost_project::package::elf::needs(binary).unwrap();
    assert!(needs.x86_64);
    assert!(needs.newest_glibc().unwrap() <= (2, 28), "{needs:?}");
    assert_eq!(report["newest_glibc"], {
        let (a, b) = needs.newest_glibc().unwrap();
        format!("{a}.{b}")
    });
    for library in &needs.libraries {
        assert!(
            [
                "libc.so.6",
                "libm.so.6",
                "libgcc_s.so.1",
                "libpthread.so.0",
                "libdl.so.2",
                "librt.so.1",
                "ld-linux-x86-64.so.2"
            ]
            .contains(&library.as_str()),
            "{library}"
        );
    }
    let host: Value = serde_json::from_slice(&entries[0].1).unwrap();
    assert_eq!(
        host["customHandler"]["description"]["defaultExecutablePath"],
        "hubhost-app"
    );
    assert_eq!(
        host["customHandler"]["description"]["arguments"],
        Value::Null
    );
    // The packaged executable runs (this machine's glibc is newer than 2.28), and it is the
    // handler alone: none of the local tools' commands.
    let exe = dir.path().join("hubhost-app");
    std::fs::write(&exe, binary).unwrap();
    std::fs::set_permissions(
        &exe,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    // Small: the platform copies and maps it on every cold start.
    assert!(
        binary.len() <= 12_000_000,
        "the packaged handler is {} bytes, over 12 MB",
        binary.len()
    );
    exports_spans_over_http_and_names_grpc_missing(&exe, dir.path());
    let version = Command::new(&exe).arg("--version").output().unwrap();
    assert!(version.status.success());
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("hubhost-app "));
    let help = Command::new(&exe).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for tool in ["emulate", "hub ", "bench", "simulate"] {
        assert!(
            !help.contains(tool),
            "the deployed handler offers {tool:?}: {help}"
        );
    }
    // --check agrees with what was written.
    let (ok, out, err) = package(&["--check", "--out", &zip_arg, "--json"]);
    assert!(ok, "{err}");
    let checked: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(checked["files"], report["files"]);

    // What the platform would fail on is refused, naming the problem.
    // A binary linked against this machine's glibc.
    let (ok, _, err) = package(&[
        "--out",
        &dir.path().join("local.zip").display().to_string(),
        "--binary",
        env!("CARGO_BIN_EXE_hubhost"),
    ]);
    assert!(!ok);
    assert!(err.contains("asks for GLIBC_2."), "{err}");
    let host_json = serde_json::to_vec(&host).unwrap();
    let function = &entries[1].1;
    let cases: [(&str, Vec<ZipFile>, &str); 3] = [
        (
            "secrets",
            vec![
                ("host.json", &host_json, 0o644),
                ("Dashboard/function.json", function, 0o644),
                ("local.settings.json", b"{}", 0o644),
                ("hubhost-app", binary, 0o755),
            ],
            "local secrets",
        ),
        (
            "no-run-bit",
            vec![
                ("host.json", &host_json, 0o644),
                ("Dashboard/function.json", function, 0o644),
                ("hubhost-app", binary, 0o644),
            ],
            "not marked executable",
        ),
        (
            "missing",
            vec![
                ("host.json", &host_json, 0o644),
                ("Dashboard/function.json", function, 0o644),
            ],
            "not in the zip",
        ),
    ];
    for (name, files, reason) in cases {
        let path = dir.path().join(format!("{name}.zip"));
        write_zip(&path, &files);
        let (ok, _, err) = package(&["--check", "--out", &path.display().to_string()]);
        assert!(!ok, "{name}");
        assert!(err.contains(reason), "{name}: {err}");
    }
}
