//! `hubhost package`: the zip a Functions app is deployed from — the script root (host.json,
//! one folder per function) and the custom handler's executable beside host.json — built and
//! checked before it leaves the machine.
//!
//! - **The binary** is built for the platform's image, not for this machine: `cargo zigbuild`
//!   links it against an old glibc ([`DEFAULT_TARGET`], glibc 2.28), so it runs on every
//!   Functions v4 Linux image (Debian 11 "bullseye" has 2.31; see docs/deploy.md). It is then
//!   read back (`elf`): x86-64, only the C runtime's libraries, no glibc symbol newer than
//!   [`MAX_GLIBC`]. `--binary` packages one built elsewhere, under the same checks.
//! - **The script root** is validated against the official host.json and function.json
//!   schemas (`schema`); `local.settings.json` (secrets, local only) never goes in; links are
//!   stored as the files they point to, since zip deployment keeps no links.
//! - **The executable** goes in under its file name, and the packaged host.json's
//!   `defaultExecutablePath` names it (a path that works locally, such as
//!   `../target/debug/app`, means nothing in the zip). Its run bit is set.
//! - **The zip is read back** ([`check_zip`], also `hubhost package --check app.zip`) and
//!   every rule above checked again on what was written.
//!
//! The plan of what goes in (`plan_files`) and every check are pure; building and writing are
//! the I/O at the edges.

pub mod elf;
pub mod schema;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// What `hubhost package` optimizes for speed; every other crate is optimized for size
/// (opt-level "s"), the function's own package included. These are the framework's crates on
/// the path of an invocation: the HTTP server and its runtime, the contract's decoding and
/// JSON, the blob writes (HTTP client, TLS, URLs), timestamps, tracing, the allocator. (TLS's C
/// library, aws-lc, stays at "s": its ciphers and hashes are assembly either way.) What is left at "s" is the function's own code (with the generic code it
/// instantiates, most of an executable) and what a handler runs now and then: the AMQP client
/// the reference app's page reads the hub with, Entra ID sign-in, the OpenTelemetry export, the
/// command line's parser, the log filter. The reference app's handler was 13.96 MB at opt-level
/// 3 throughout, 13.49 MB with its own package at 3 as well as these, and 9.62 MB at "s"
/// throughout.
const OPTIMIZED_FOR_SPEED: &[&str] = &[
    "hubhost-functions",
    "hubhost-trigger",
    "hubhost-storage",
    "hubhost-metrics",
    "tokio",
    "tokio-util",
    "mio",
    "bytes",
    "http",
    "http-body",
    "http-body-util",
    "httparse",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "axum",
    "axum-core",
    "matchit",
    "tower",
    "serde",
    "serde_core",
    "serde_json",
    "itoa",
    "ryu",
    "zmij",
    "memchr",
    "base64",
    "hashbrown",
    "smallvec",
    "chrono",
    "futures-util",
    "futures-core",
    "reqwest",
    "rustls",
    "tokio-rustls",
    "url",
    "percent-encoding",
    "tracing",
    "tracing-core",
    "mimalloc",
    "libmimalloc-sys",
];

/// The crates of [`OPTIMIZED_FOR_SPEED`] the workspace's lock file has (Cargo warns about a
/// profile for a package it does not build, and most function apps use few of them).
fn optimized_for_speed(lock: &str) -> Vec<&'static str> {
    OPTIMIZED_FOR_SPEED
        .iter()
        .copied()
        .filter(|package| lock.contains(&format!("name = \"{package}\"\n")))
        .collect()
}

/// The release profile `hubhost package` builds with, as `--config` settings: what is deployed
/// is built for size, since the host copies and starts it on every cold start — no debug
/// information (most of an unstripped binary), the whole program optimized at link time in one
/// unit, which drops what no function reaches, and opt-level "s" but for the framework's crates
/// on an invocation's path ([`OPTIMIZED_FOR_SPEED`]), at 3.
/// Symbol names stay, so a panic's backtrace still names functions. It makes the package build
/// a few minutes longer than a plain release build.
///
/// A setting the user gives Cargo through the environment (`CARGO_PROFILE_RELEASE_LTO=thin`
/// for a quicker package while trying a deployment; `set_by_user` is asked with the key, such
/// as `"LTO"`) is theirs: passing ours with `--config` would override it, since the command
/// line comes first in Cargo's order. Their `OPT_LEVEL` also stands for every package's.
fn size_profile(lock: &str, set_by_user: impl Fn(&str) -> bool) -> Vec<String> {
    let mut settings: Vec<String> = [
        ("DEBUG", "debug=false"),
        ("STRIP", "strip=\"debuginfo\""),
        ("LTO", "lto=\"fat\""),
        ("CODEGEN_UNITS", "codegen-units=1"),
        ("OPT_LEVEL", "opt-level=\"s\""),
    ]
    .into_iter()
    .filter(|(key, _)| !set_by_user(key))
    .map(|(_, setting)| format!("profile.release.{setting}"))
    .collect();
    if !set_by_user("OPT_LEVEL") {
        settings.extend(
            optimized_for_speed(lock)
                .into_iter()
                .map(|package| format!("profile.release.package.{package}.opt-level=3")),
        );
    }
    settings
}

/// The Rust target `hubhost package` builds for: x86-64 Linux against glibc 2.28 (the Zig
/// linker's glibc stubs), older than every Functions v4 Linux image.
pub const DEFAULT_TARGET: &str = "x86_64-unknown-linux-gnu.2.28";
/// The newest glibc symbol version a packaged executable may ask for.
pub const MAX_GLIBC: elf::GlibcVersion = (2, 28);
/// Libraries of the C runtime itself, present on every glibc-based image.
const C_RUNTIME: [&str; 7] = [
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
];

#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("{path}: {problem}")]
    Invalid { path: String, problem: String },
    #[error("the app has no function folder (a folder beside host.json with a function.json)")]
    NoFunctions,
    #[error("building the executable failed: {0}")]
    Build(String),
    #[error("the executable {name}: {problem}")]
    Binary { name: String, problem: String },
    #[error("{path}: {error}")]
    Io { path: String, error: String },
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> PackageError + '_ {
    move |e| PackageError::Io {
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

fn invalid(path: &str, problem: impl Into<String>) -> PackageError {
    PackageError::Invalid {
        path: path.to_string(),
        problem: problem.into(),
    }
}

/// What `hubhost package` does.
#[derive(Debug, Clone)]
pub struct PackageOptions {
    /// The script root (host.json and the function folders).
    pub app: PathBuf,
    pub out: PathBuf,
    /// An executable built already; otherwise `cargo zigbuild` builds the package's binary.
    pub binary: Option<PathBuf>,
    /// The Cargo.toml to build [default: the one `cargo` finds from here].
    pub manifest_path: Option<PathBuf>,
    pub target: String,
}

/// What went into a zip, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageReport {
    pub zip: String,
    /// Entry name → bytes.
    pub files: BTreeMap<String, u64>,
    pub executable: String,
    pub functions: Vec<String>,
    pub libraries: Vec<String>,
    /// The newest glibc the executable asks for, as `2.28`.
    pub newest_glibc: Option<String>,
}

/// The script root's host.json: checked against the schema and for a custom handler; returns
/// it with the executable's file name.
pub fn read_host_json(text: &str, path: &str) -> Result<(Value, String), PackageError> {
    let host: Value = serde_json::from_str(text).map_err(|e| invalid(path, e.to_string()))?;
    let problems = schema::host_json_problems(&host);
    if !problems.is_empty() {
        return Err(invalid(path, problems.join("; ")));
    }
    let executable = host["customHandler"]["description"]["defaultExecutablePath"]
        .as_str()
        .ok_or_else(|| {
            invalid(
                path,
                "no customHandler.description.defaultExecutablePath: this is not a custom handler app",
            )
        })?;
    let name = Path::new(executable)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            invalid(
                path,
                format!("defaultExecutablePath {executable:?} names no file"),
            )
        })?
        .to_string();
    Ok((host, name))
}

/// host.json as it goes into the zip: the executable named by its file name, beside it.
pub fn packaged_host_json(mut host: Value, executable: &str) -> Value {
    host["customHandler"]["description"]["defaultExecutablePath"] = Value::from(executable);
    host
}

/// Which files of the script root go in, by their path inside it: every file of every
/// function folder (a folder with a function.json), nothing else but host.json — which is
/// written separately — so local.settings.json, a stale executable or other clutter at the root
/// stay out. `files` lists the script root's files as relative paths. Pure.
pub fn plan_files(files: &[String]) -> Result<(Vec<String>, Vec<String>), PackageError> {
    let functions: Vec<String> = files
        .iter()
        .filter_map(|f| f.strip_suffix("/function.json"))
        .filter(|dir| !dir.contains('/'))
        .map(str::to_string)
        .collect();
    if functions.is_empty() {
        return Err(PackageError::NoFunctions);
    }
    let included = files
        .iter()
        .filter(|f| {
            f.split_once('/')
                .is_some_and(|(dir, _)| functions.iter().any(|d| d == dir))
        })
        .filter(|f| !is_local_settings(f))
        .cloned()
        .collect();
    Ok((functions, included))
}

fn is_local_settings(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.starts_with("local.settings.json"))
}

/// Checks an executable's needs against what the platform's image offers.
pub fn check_executable(name: &str, bytes: &[u8]) -> Result<elf::Needs, PackageError> {
    let bad = |problem: String| PackageError::Binary {
        name: name.to_string(),
        problem,
    };
    let needs = elf::needs(bytes).map_err(|e| bad(e.to_string()))?;
    if !needs.x86_64 {
        return Err(bad(
            "is not an x86-64 executable (the Functions Linux plans run x86-64)".into(),
        ));
    }
    let foreign: Vec<&String> = needs
        .libraries
        .iter()
        .filter(|l| !C_RUNTIME.contains(&l.as_str()))
        .collect();
    if !foreign.is_empty() {
        return Err(bad(format!(
            "needs shared libraries the Functions image may not have: {foreign:?}; link them \
             statically"
        )));
    }
    if let Some(newest) = needs.newest_glibc()
        && newest > MAX_GLIBC
    {
        return Err(bad(format!(
            "asks for GLIBC_{}.{}, newer than {}.{} (it was linked against this machine's \
             glibc; build it with `hubhost package`, which targets {DEFAULT_TARGET})",
            newest.0, newest.1, MAX_GLIBC.0, MAX_GLIBC.1
        )));
    }
    Ok(needs)
}

/// Every file under `root`, as relative paths with `/`, following links (a dangling one is an
/// error naming it).
fn list_files(root: &Path) -> Result<Vec<String>, PackageError> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), PackageError> {
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            let meta = std::fs::metadata(&path).map_err(io(&path))?;
            if meta.is_dir() {
                walk(root, &path, out)?;
            } else if meta.is_file() {
                let relative = path.strip_prefix(root).expect("under the root");
                let parts: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(root, root, &mut out)?;
    out.sort();
    Ok(out)
}

/// The package of `cargo metadata`'s answer that has the binary target `name`.
fn package_with_bin(metadata: &Value, name: &str) -> Option<String> {
    metadata["packages"].as_array()?.iter().find_map(|package| {
        let has_bin = package["targets"].as_array()?.iter().any(|t| {
            t["name"] == name
                && t["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
        });
        has_bin.then(|| package["name"].as_str().map(str::to_string))?
    })
}

/// Builds the package's binary `name` for `target` with `cargo zigbuild`; returns its path.
pub fn build(
    name: &str,
    target: &str,
    manifest_path: Option<&Path>,
) -> Result<PathBuf, PackageError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut metadata = Command::new(&cargo);
    metadata.args(["metadata", "--format-version", "1", "--no-deps"]);
    if let Some(m) = manifest_path {
        metadata.arg("--manifest-path").arg(m);
    }
    let out = metadata
        .output()
        .map_err(|e| PackageError::Build(format!("cargo metadata: {e}")))?;
    if !out.status.success() {
        return Err(PackageError::Build(format!(
            "cargo metadata: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let metadata: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| PackageError::Build(format!("cargo metadata: {e}")))?;
    let target_dir = PathBuf::from(metadata["target_directory"].as_str().unwrap_or("target"));
    // In a workspace, `--bin` alone looks only in the default package: name the package too.
    let package = package_with_bin(&metadata, name).ok_or_else(|| {
        PackageError::Build(format!(
            "no package of {} has a binary named {name:?} (host.json's defaultExecutablePath names it)",
            manifest_path.map_or("this workspace".into(), |m| m.display().to_string())
        ))
    })?;
    let mut zigbuild = Command::new(&cargo);
    zigbuild.args(["zigbuild", "--release", "--target", target]);
    zigbuild.args(["--package", &package, "--bin", name]);
    let lock = metadata["workspace_root"]
        .as_str()
        .and_then(|root| std::fs::read_to_string(Path::new(root).join("Cargo.lock")).ok())
        .unwrap_or_default();
    let set_by_user =
        |key: &str| std::env::var_os(format!("CARGO_PROFILE_RELEASE_{key}")).is_some();
    for setting in size_profile(&lock, set_by_user) {
        zigbuild.args(["--config", &setting]);
    }
    if let Some(m) = manifest_path {
        zigbuild.arg("--manifest-path").arg(m);
    }
    let status = zigbuild.status().map_err(|e| {
        PackageError::Build(format!(
            "cargo zigbuild: {e} (install it: see docs/deploy.md)"
        ))
    })?;
    if !status.success() {
        return Err(PackageError::Build(format!(
            "cargo zigbuild --release --target {target} --bin {name} exited with {status} \
             (it needs cargo-zigbuild and Zig: `cargo install cargo-zigbuild` and \
             `pip install ziglang`; see docs/deploy.md)"
        )));
    }
    // A glibc-versioned target (`…-gnu.2.28`) builds into the plain triple's folder.
    let triple = target
        .split_once("-gnu.")
        .map_or(target.to_string(), |(t, _)| format!("{t}-gnu"));
    Ok(target_dir.join(triple).join("release").join(name))
}

/// Builds (unless given a binary), checks and writes the zip, then reads it back.
pub fn package(options: &PackageOptions) -> Result<PackageReport, PackageError> {
    let host_path = options.app.join("host.json");
    let host_text = std::fs::read_to_string(&host_path).map_err(io(&host_path))?;
    let (host, executable) = read_host_json(&host_text, &host_path.display().to_string())?;
    let files = list_files(&options.app)?;
    let (_, included) = plan_files(&files)?;
    for f in included.iter().filter(|f| f.ends_with("/function.json")) {
        let path = options.app.join(f);
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        schema::check_function_json(&text, &path.display().to_string())?;
    }
    let binary = match &options.binary {
        Some(b) => b.clone(),
        None => build(
            &executable,
            &options.target,
            options.manifest_path.as_deref(),
        )?,
    };
    let bytes = std::fs::read(&binary).map_err(io(&binary))?;
    check_executable(&executable, &bytes)?;

    let file = std::fs::File::create(&options.out).map_err(io(&options.out))?;
    let mut zip = zip::ZipWriter::new(file);
    let zip_error = |e: zip::result::ZipError| PackageError::Io {
        path: options.out.display().to_string(),
        error: e.to_string(),
    };
    let regular = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .unix_permissions(0o644);
    let host =
        serde_json::to_vec_pretty(&packaged_host_json(host, &executable)).expect("JSON serializes");
    zip.start_file("host.json", regular).map_err(zip_error)?;
    zip.write_all(&host).map_err(io(&options.out))?;
    for f in &included {
        let path = options.app.join(f);
        let content = std::fs::read(&path).map_err(io(&path))?;
        zip.start_file(f.as_str(), regular).map_err(zip_error)?;
        zip.write_all(&content).map_err(io(&options.out))?;
    }
    zip.start_file(executable.as_str(), regular.unix_permissions(0o755))
        .map_err(zip_error)?;
    zip.write_all(&bytes).map_err(io(&options.out))?;
    zip.finish().map_err(zip_error)?;
    check_zip(&options.out)
}

/// Reads a deployment zip back and checks it whole: host.json valid and naming an executable
/// that is in the zip, runnable (its run bit) and fit for the platform's image; every
/// function.json valid; no local.settings.json, no link, no path leaving the root.
pub fn check_zip(path: &Path) -> Result<PackageReport, PackageError> {
    let file = std::fs::File::open(path).map_err(io(path))?;
    let zip_path = path.display().to_string();
    let mut archive = zip::ZipArchive::new(file).map_err(|e| invalid(&zip_path, e.to_string()))?;
    let mut entries: BTreeMap<String, (Vec<u8>, Option<u32>)> = BTreeMap::new();
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| invalid(&zip_path, e.to_string()))?;
        let name = entry
            .name()
            .map_err(|e| invalid(&zip_path, e.to_string()))?
            .to_string();
        if entry.is_dir() {
            continue;
        }
        if entry.enclosed_name().is_none() {
            return Err(invalid(
                &zip_path,
                format!("{name:?} leaves the app's folder"),
            ));
        }
        let mode = entry.unix_mode();
        if mode.is_some_and(|m| m & 0o170000 == 0o120000) {
            return Err(invalid(
                &zip_path,
                format!("{name} is a link; zip deployment keeps no links"),
            ));
        }
        if is_local_settings(&name) {
            return Err(invalid(
                &zip_path,
                format!("{name} holds local secrets and must not be deployed"),
            ));
        }
        let mut content = Vec::new();
        entry
            .read_to_end(&mut content)
            .map_err(|e| invalid(&zip_path, format!("{name}: {e}")))?;
        entries.insert(name, (content, mode));
    }
    let (host_bytes, _) = entries
        .get("host.json")
        .ok_or_else(|| invalid(&zip_path, "no host.json at the root"))?;
    let (host, executable) = read_host_json(
        &String::from_utf8_lossy(host_bytes),
        &format!("{zip_path}: host.json"),
    )?;
    let named = host["customHandler"]["description"]["defaultExecutablePath"]
        .as_str()
        .unwrap_or_default();
    let (binary, mode) = entries.get(named).ok_or_else(|| {
        invalid(
            &zip_path,
            format!("host.json names the executable {named:?}, which is not in the zip"),
        )
    })?;
    if !mode.is_some_and(|m| m & 0o111 != 0) {
        return Err(invalid(
            &zip_path,
            format!("{named} is not marked executable (the host could not start it)"),
        ));
    }
    let needs = check_executable(&executable, binary)?;
    let mut functions = Vec::new();
    for (name, (content, _)) in &entries {
        if let Some(function) = name.strip_suffix("/function.json") {
            schema::check_function_json(
                &String::from_utf8_lossy(content),
                &format!("{zip_path}: {name}"),
            )?;
            functions.push(function.to_string());
        }
    }
    if functions.is_empty() {
        return Err(PackageError::NoFunctions);
    }
    Ok(PackageReport {
        zip: zip_path,
        files: entries
            .iter()
            .map(|(n, (c, _))| (n.clone(), c.len() as u64))
            .collect(),
        executable,
        functions,
        newest_glibc: needs.newest_glibc().map(|(a, b)| format!("{a}.{b}")),
        libraries: needs.libraries.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_is_built_for_size_unless_the_user_set_the_profile() {
        let lock = "[[package]]\nname = \"serde_json\"\nversion = \"1.0.0\"\n\
                    [[package]]\nname = \"clap_builder\"\nversion = \"4.5.0\"\n";
        let ours = size_profile(lock, |_| false);
        assert_eq!(
            ours,
            [
                "profile.release.debug=false",
                "profile.release.strip=\"debuginfo\"",
                "profile.release.lto=\"fat\"",
                "profile.release.codegen-units=1",
                "profile.release.opt-level=\"s\"",
                "profile.release.package.serde_json.opt-level=3",
            ]
        );
        // `CARGO_PROFILE_RELEASE_LTO=thin CARGO_PROFILE_RELEASE_OPT_LEVEL=1`: both stay theirs.
        let theirs = size_profile(lock, |key| key == "LTO" || key == "OPT_LEVEL");
        assert_eq!(
            theirs,
            [
                "profile.release.debug=false",
                "profile.release.strip=\"debuginfo\"",
                "profile.release.codegen-units=1",
            ]
        );
    }

    #[test]
    fn the_binary_is_built_from_the_package_that_has_it() {
        let metadata = serde_json::json!({"packages": [
            {"name": "hubhost", "targets": [{"name": "hubhost", "kind": ["bin"]}]},
            {"name": "hubhost-app", "targets": [
                {"name": "hubhost_app", "kind": ["lib"]},
                {"name": "hubhost-app", "kind": ["bin"]}
            ]}
        ]});
        assert_eq!(
            package_with_bin(&metadata, "hubhost-app").as_deref(),
            Some("hubhost-app")
        );
        assert_eq!(
            package_with_bin(&metadata, "hubhost").as_deref(),
            Some("hubhost")
        );
        assert_eq!(
            package_with_bin(&metadata, "hubhost_app"),
            None,
            "a library is no binary"
        );
        assert_eq!(package_with_bin(&metadata, "other"), None);
    }

    #[test]
    fn only_crates_the_workspace_builds_are_optimized_for_speed() {
        let lock = "[[package]]\nname = \"serde_amqp\"\nversion = \"0.18.0\"\n\n[[package]]\nname = \"url\"\nversion = \"2.5.0\"\n\n[[package]]\nname = \"urlencoding\"\nversion = \"2.1.0\"\n";
        assert_eq!(optimized_for_speed(lock), ["url"]);
        assert!(optimized_for_speed("").is_empty());
    }

    fn paths(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_plan_takes_function_folders_and_leaves_local_files_out() {
        let (functions, included) = plan_files(&paths(&[
            "host.json",
            "local.settings.json",
            "local.settings.json.example",
            "hubhost",
            "notes.txt",
            "Dashboard/function.json",
            "SensorAggregator/function.json",
            "SensorAggregator/sample.dat",
            "SensorAggregator/local.settings.json",
            "scratch/readme.md",
        ]))
        .unwrap();
        assert_eq!(functions, ["Dashboard", "SensorAggregator"]);
        assert_eq!(
            included,
            [
                "Dashboard/function.json",
                "SensorAggregator/function.json",
                "SensorAggregator/sample.dat"
            ]
        );
        assert!(matches!(
            plan_files(&paths(&["host.json", "a/b/function.json"])),
            Err(PackageError::NoFunctions)
        ));
    }

    #[test]
    fn host_json_must_name_a_custom_handler_and_is_packaged_naming_it_beside_itself() {
        let (host, name) = read_host_json(
            r#"{"version":"2.0","customHandler":{"description":{"defaultExecutablePath":"../../target/debug/count-readings"}}}"#,
            "host.json",
        )
        .unwrap();
        assert_eq!(name, "count-readings");
        assert_eq!(
            packaged_host_json(host, &name)["customHandler"]["description"]["defaultExecutablePath"],
            "count-readings"
        );
        let e = read_host_json(r#"{"version":"2.0"}"#, "host.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("defaultExecutablePath"), "{e}");
        let e = read_host_json(r#"{"version":"3.0"}"#, "host.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("host.json:"), "{e}");
    }

    #[test]
    fn an_executable_linked_against_this_machine_is_refused_when_it_asks_for_a_newer_glibc() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needs = elf::needs(&me).unwrap();
        match check_executable("me", &me) {
            Ok(_) => assert!(needs.newest_glibc() <= Some(MAX_GLIBC)),
            Err(e) => {
                let e = e.to_string();
                assert!(
                    e.contains("GLIBC_") || e.contains("shared libraries"),
                    "{e}"
                );
            }
        }
        let e = check_executable("script", b"#!/bin/sh\n").unwrap_err();
        assert!(e.to_string().contains("not an ELF"), "{e}");
    }
}
