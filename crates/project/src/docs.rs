//! `hubhost docs`: the API docs of every hubhost crate a project uses, its dev-dependencies
//! (the test kit, the rehearsals) included, built with the versions its Cargo.lock holds.
//!
//! Why not `cargo doc -p hubhost-testkit`: Cargo documents a package's normal dependencies, and
//! asked for a dev-dependency it panics (rust-lang/cargo#11105, open since 2022). So the
//! project's hubhost dependencies, whatever their kind, become the normal dependencies of a
//! scratch package in the project's target folder (`target/hubhost-docs/`, with a copy of the
//! project's Cargo.lock), and Cargo documents every hubhost crate of that package's graph into
//! the project's own `target/doc/`, where `cargo doc` puts the rest.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The package every hubhost crate's name starts with.
const PREFIX: &str = "hubhost-";

/// Why the docs could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    #[error(
        "{0} has no Cargo.toml: run `hubhost docs` in a Cargo project (or name it with --project)"
    )]
    NotAProject(PathBuf),
    #[error("cargo metadata for {manifest}: {problem}")]
    Metadata { manifest: PathBuf, problem: String },
    #[error("{0} depends on no hubhost crate")]
    NoHubhostDependency(PathBuf),
    #[error("cannot write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cargo doc failed ({status}); its output is above")]
    CargoDoc { status: String },
}

/// What was documented, and where its front page is.
#[derive(Debug)]
pub struct Documented {
    /// The crates, by package name.
    pub crates: Vec<String>,
    /// `target/doc/hubhost_functions/index.html` (or the first crate's).
    pub index: PathBuf,
}

/// Documents every hubhost crate `project` depends on (directly or not, as a dependency or a
/// dev-dependency) with `cargo` (the `CARGO` the caller runs under, else `cargo` on `PATH`);
/// `open` opens the front page in a browser, as `cargo doc --open` does.
pub fn document(project: &Path, open: bool) -> Result<Documented, DocsError> {
    let manifest = project.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(DocsError::NotAProject(project.to_path_buf()));
    }
    let metadata = cargo_metadata(&manifest, true)?;
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| packages.first())
        .ok_or_else(|| DocsError::Metadata {
            manifest: manifest.clone(),
            problem: "no package (a virtual workspace: name a member with --project)".into(),
        })?;
    let dependencies: Vec<String> = package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["name"].as_str().is_some_and(|n| n.starts_with(PREFIX)))
        .filter_map(dependency_line)
        .collect();
    if dependencies.is_empty() {
        return Err(DocsError::NoHubhostDependency(manifest));
    }
    let target = PathBuf::from(metadata["target_directory"].as_str().unwrap_or("target"));
    let scratch = target.join("hubhost-docs");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DocsError::Io { path, source }
    };
    std::fs::create_dir_all(&scratch).map_err(io(&scratch))?;
    let scratch_manifest = scratch.join("Cargo.toml");
    let text = format!(
        "# Made by `hubhost docs`: the hubhost crates {} uses, as normal dependencies, so that\n# Cargo documents them all (it cannot document a dev-dependency).\n[package]\nname = \"hubhost-docs\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n[lib]\npath = \"lib.rs\"\n\n[dependencies]\n{}\n\n[workspace]\n",
        project.display(),
        dependencies.join("\n")
    );
    std::fs::write(&scratch_manifest, text).map_err(io(&scratch_manifest))?;
    let lib = scratch.join("lib.rs");
    std::fs::write(&lib, "//! The hubhost crates a project uses.\n").map_err(io(&lib))?;
    // The project's versions, not the newest: its lock, the scratch package added to it.
    let lock = project.join("Cargo.lock");
    if lock.is_file() {
        let copy = scratch.join("Cargo.lock");
        std::fs::copy(&lock, &copy).map_err(io(&copy))?;
    }
    let graph = cargo_metadata(&scratch_manifest, false)?;
    let mut crates: Vec<String> = graph["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| n.starts_with(PREFIX) && *n != "hubhost-docs")
        .map(str::to_string)
        .collect();
    crates.sort();
    crates.dedup();
    // The crate a function is written against first, so that `--open` shows it.
    if let Some(at) = crates.iter().position(|c| c == "hubhost-functions") {
        let functions = crates.remove(at);
        crates.insert(0, functions);
    }
    let mut doc = cargo();
    doc.arg("doc")
        .arg("--no-deps")
        .arg("--manifest-path")
        .arg(&scratch_manifest)
        .env("CARGO_TARGET_DIR", &target);
    for name in &crates {
        doc.args(["-p", name]);
    }
    if open {
        doc.arg("--open");
    }
    let status = doc.status().map_err(io(Path::new("cargo")))?;
    if !status.success() {
        return Err(DocsError::CargoDoc {
            status: status.to_string(),
        });
    }
    let index = target
        .join("doc")
        .join(crates[0].replace('-', "_"))
        .join("index.html");
    Ok(Documented { crates, index })
}

/// A dependency of `cargo metadata` as a line of a `[dependencies]` table: where it comes from
/// (its path, or its version requirement from the registry) and the features it turns on.
fn dependency_line(dependency: &Value) -> Option<String> {
    let name = dependency["name"].as_str()?;
    let mut fields = Vec::new();
    match dependency["path"].as_str() {
        Some(path) => fields.push(format!("path = {}", toml_string(path))),
        None => fields.push(format!(
            "version = {}",
            toml_string(dependency["req"].as_str().unwrap_or("*"))
        )),
    }
    let features: Vec<String> = dependency["features"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(toml_string)
        .collect();
    if !features.is_empty() {
        fields.push(format!("features = [{}]", features.join(", ")));
    }
    if dependency["uses_default_features"] == Value::Bool(false) {
        fields.push("default-features = false".into());
    }
    Some(format!("{name} = {{ {} }}", fields.join(", ")))
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    // JSON's string escapes are TOML's for a basic string.
    Value::String(text.to_string()).to_string()
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// `cargo metadata` of `manifest`, read as JSON (`no_deps`: the package alone, not its graph).
fn cargo_metadata(manifest: &Path, no_deps: bool) -> Result<Value, DocsError> {
    let mut command = cargo();
    command
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(manifest);
    if no_deps {
        command.arg("--no-deps");
    }
    let failed = |problem: String| DocsError::Metadata {
        manifest: manifest.to_path_buf(),
        problem,
    };
    let out = command.output().map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_dependency_keeps_its_source_and_features_whatever_its_kind() {
        let path = json!({"name": "hubhost-functions", "path": "/src/hubhost/crates/functions",
            "req": "*", "kind": null, "features": ["once"], "uses_default_features": true});
        assert_eq!(
            dependency_line(&path).unwrap(),
            r#"hubhost-functions = { path = "/src/hubhost/crates/functions", features = ["once"] }"#
        );
        let registry = json!({"name": "hubhost-testkit", "req": "^0.1", "kind": "dev",
            "features": [], "uses_default_features": false});
        assert_eq!(
            dependency_line(&registry).unwrap(),
            r#"hubhost-testkit = { version = "^0.1", default-features = false }"#
        );
    }
}
