//! Where a handler executable comes from, when it is a Cargo build: host.json's
//! `defaultExecutablePath` pointing into a Cargo target folder (`…/target/debug/NAME`,
//! `…/target/release/NAME`, `…/target/TRIPLE/PROFILE/NAME`) names the build that makes it.
//!
//! Cargo is asked where its target folder is ([`CargoLayout`]: `cargo metadata` for the project
//! that holds the app folder), rather than the path guessed at: a target folder can have any
//! name (`CARGO_TARGET_DIR`, `build.target-dir`), and one shared by several projects is common.
//! When host.json names the project's own `target/` but Cargo builds elsewhere, the build's
//! [`output`](CargoBuild::output) is where the executable really is; `emulate` and `invoke` run
//! that one.
//!
//! `emulate` uses it to say how to build a missing executable, and `emulate --watch` to build
//! it before starting and again when the sources change ([`SourceSnapshot`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// What Cargo says of the project that holds a folder: its workspace, its target folder and the
/// binaries its packages build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoLayout {
    /// The workspace's root folder (where `cargo build` is run).
    pub workspace_root: PathBuf,
    /// Where Cargo puts what it builds (`CARGO_TARGET_DIR` and `build.target-dir` honoured).
    pub target_directory: PathBuf,
    /// Every binary of the workspace's packages.
    pub binaries: Vec<CargoBinary>,
}

/// A binary target of a workspace package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBinary {
    pub package: String,
    pub name: String,
    /// The folder of the package's Cargo.toml.
    pub package_dir: PathBuf,
}

impl CargoLayout {
    /// Cargo's answer (`cargo metadata --no-deps`, run in `dir`) for the project holding `dir`;
    /// `None` when there is no Cargo project there or no `cargo` to ask.
    pub fn of(dir: &Path) -> Option<Self> {
        let project = dir.ancestors().find(|d| d.join("Cargo.toml").is_file())?;
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args([
                "metadata",
                "--no-deps",
                "--format-version",
                "1",
                "--offline",
            ])
            .current_dir(project)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .ok()?;
        if !out.status.success() {
            return None;
        }
        Self::from_metadata(&serde_json::from_slice(&out.stdout).ok()?)
    }

    /// The layout in `cargo metadata`'s JSON.
    pub fn from_metadata(metadata: &Value) -> Option<Self> {
        let path = |key: &str| metadata[key].as_str().map(PathBuf::from);
        let mut binaries = Vec::new();
        for package in metadata["packages"].as_array()? {
            let (Some(name), Some(manifest)) =
                (package["name"].as_str(), package["manifest_path"].as_str())
            else {
                continue;
            };
            for target in package["targets"].as_array().into_iter().flatten() {
                let is_bin = target["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"));
                if let (true, Some(bin)) = (is_bin, target["name"].as_str()) {
                    binaries.push(CargoBinary {
                        package: name.to_string(),
                        name: bin.to_string(),
                        package_dir: Path::new(manifest)
                            .parent()
                            .unwrap_or(Path::new("."))
                            .to_path_buf(),
                    });
                }
            }
        }
        Some(CargoLayout {
            workspace_root: path("workspace_root")?,
            target_directory: path("target_directory")?,
            binaries,
        })
    }

    /// The workspace's binary named `name`.
    pub fn binary(&self, name: &str) -> Option<&CargoBinary> {
        self.binaries.iter().find(|b| b.name == name)
    }

    /// Whether the workspace has more than one package (`--bin` alone then looks only in the
    /// default members, so a command names the package too).
    fn has_several_packages(&self) -> bool {
        let mut packages: Vec<&str> = self.binaries.iter().map(|b| b.package.as_str()).collect();
        packages.sort_unstable();
        packages.dedup();
        packages.len() > 1
    }
}

/// The Cargo build an executable path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBuild {
    /// The workspace root, where `cargo build` runs.
    pub root: PathBuf,
    /// `debug` (the dev profile), `release`, or a custom profile's folder.
    pub profile: String,
    /// The target triple, when the path has one.
    pub target: Option<String>,
    /// The package that has the binary, named in the command when the workspace has several.
    pub package: Option<String>,
    /// The binary's name.
    pub bin: String,
    /// Where Cargo puts the executable: the path named, or the same place in Cargo's own target
    /// folder when the path names the project's `target/` and Cargo builds elsewhere.
    pub output: PathBuf,
}

impl CargoBuild {
    /// The build that makes `executable` in the Cargo project holding the app folder `app`
    /// (Cargo is asked, see [`CargoLayout::of`]).
    pub fn find(executable: &Path, app: &Path) -> Option<Self> {
        Self::in_layout(executable, &CargoLayout::of(app)?)
    }

    /// The build that makes `executable` (an absolute path) in `layout`: it lies in Cargo's
    /// target folder, or in the workspace's `target/` (what host.json files name), as
    /// `PROFILE/NAME` or `TRIPLE/PROFILE/NAME`, and the workspace has a binary of that name.
    ///
    /// ```
    /// use std::path::{Path, PathBuf};
    /// use hubhost_host::emulate::build::{CargoBinary, CargoBuild, CargoLayout};
    ///
    /// let layout = CargoLayout {
    ///     workspace_root: "/src/app".into(),
    ///     target_directory: "/cache/cargo-target".into(),
    ///     binaries: vec![CargoBinary { package: "app".into(), name: "app".into(), package_dir: "/src/app".into() }],
    /// };
    /// let build = CargoBuild::in_layout(Path::new("/src/app/function_app/../target/release/app"), &layout).unwrap();
    /// assert_eq!(build.args(), ["build", "--release", "--bin", "app"]);
    /// assert_eq!(build.output, Path::new("/cache/cargo-target/release/app"));
    /// assert!(CargoBuild::in_layout(Path::new("/usr/bin/app"), &layout).is_none());
    /// ```
    pub fn in_layout(executable: &Path, layout: &CargoLayout) -> Option<Self> {
        let executable = lexically_normal(executable);
        let in_target = [
            lexically_normal(&layout.target_directory),
            lexically_normal(&layout.workspace_root.join("target")),
        ]
        .into_iter()
        .find_map(|folder| executable.strip_prefix(&folder).ok().map(Path::to_path_buf))?;
        let parts: Vec<&str> = in_target
            .components()
            .map(|c| c.as_os_str().to_str())
            .collect::<Option<_>>()?;
        let (target, profile, bin) = match parts.as_slice() {
            [profile, bin] => (None, *profile, *bin),
            [triple, profile, bin] => (Some(triple.to_string()), *profile, *bin),
            _ => return None,
        };
        let binary = layout.binary(bin)?;
        Some(CargoBuild {
            root: layout.workspace_root.clone(),
            profile: profile.to_string(),
            target,
            package: layout
                .has_several_packages()
                .then(|| binary.package.clone()),
            bin: bin.to_string(),
            output: layout.target_directory.join(in_target),
        })
    }

    /// A `cargo` command that builds it.
    pub fn command(&self) -> std::process::Command {
        let mut cargo =
            std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo.args(self.args()).current_dir(&self.root);
        cargo
    }

    /// `cargo` arguments that build it (run in [`root`](Self::root)).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["build".to_string()];
        match self.profile.as_str() {
            "debug" => {}
            "release" => args.push("--release".into()),
            custom => args.extend(["--profile".into(), custom.to_string()]),
        }
        if let Some(target) = &self.target {
            args.extend(["--target".into(), target.clone()]);
        }
        if let Some(package) = &self.package {
            args.extend(["--package".into(), package.clone()]);
        }
        args.extend(["--bin".into(), self.bin.clone()]);
        args
    }

    /// The command, as a person in the current directory would type it.
    pub fn command_line(&self) -> String {
        let here = std::env::current_dir().unwrap_or_default();
        command_line_from(&here, &self.root, &self.args())
    }
}

/// `cargo ARGS`, preceded by `cd ROOT &&` unless `here` is `root` (ROOT relative to `here` when
/// it lies below it).
fn command_line_from(here: &Path, root: &Path, args: &[String]) -> String {
    let cargo = format!("cargo {}", args.join(" "));
    if lexically_normal(here) == lexically_normal(root) {
        return cargo;
    }
    let shown = root.strip_prefix(here).unwrap_or(root);
    format!("cd {} && {cargo}", shown.display())
}

/// The newest modification time among a build's sources: every `*.rs`, `Cargo.toml` and
/// `Cargo.lock` under its root, outside `target/` and hidden folders. Polled rather than
/// watched: a few hundred files, twice a second, cost nothing, and need no platform API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceSnapshot {
    newest: Option<SystemTime>,
    files: usize,
}

impl SourceSnapshot {
    /// The sources under `root` now.
    pub fn take(root: &Path) -> Self {
        let mut snapshot = SourceSnapshot {
            newest: None,
            files: 0,
        };
        snapshot.visit(root, 0);
        snapshot
    }

    fn visit(&mut self, dir: &Path, depth: usize) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let skipped = name.starts_with('.') || name == "target" || name == "hubhost-data";
                if !skipped && depth < 8 {
                    self.visit(&entry.path(), depth + 1);
                }
            } else if is_source(&name) {
                self.files += 1;
                if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
                    self.newest = self.newest.max(Some(modified));
                }
            }
        }
    }

    /// Whether the sources changed since `earlier` (a file edited, added or removed).
    pub fn changed_since(&self, earlier: &SourceSnapshot) -> bool {
        self != earlier
    }
}

/// `path` with `.` and `dir/..` pairs taken out, without asking the file system
/// (`app/../../target` → `../target`), so the command shown reads as the user would type it.
pub(crate) fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out: Vec<Component> = Vec::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    if out.is_empty() {
        PathBuf::from(".")
    } else {
        out.iter().collect()
    }
}

/// `emulate --watch`: builds the handler, then waits for its sources to change.
pub struct Rebuilder {
    build: CargoBuild,
    seen: SourceSnapshot,
}

impl Rebuilder {
    pub fn new(build: CargoBuild) -> Self {
        let seen = SourceSnapshot::take(&build.root);
        Rebuilder { build, seen }
    }

    /// The build, as a person would type it.
    pub fn describe(&self) -> String {
        self.build.command_line()
    }

    /// Builds the handler now. Cargo's own output (its errors included) goes to stderr; the
    /// result says whether the executable is new.
    pub async fn build(&mut self) -> Result<(), String> {
        let mut cargo = tokio::process::Command::from(self.build.command());
        cargo
            .stdout(std::io::stderr())
            .stdin(std::process::Stdio::null());
        let status = cargo
            .status()
            .await
            .map_err(|e| format!("cannot run cargo: {e}"))?;
        // What the build itself wrote (Cargo.lock) is not an edit.
        self.seen = SourceSnapshot::take(&self.build.root);
        if status.success() {
            Ok(())
        } else {
            Err(format!("`{}` failed ({status})", self.describe()))
        }
    }

    /// Resolves once the sources changed and then stayed unchanged for a moment (an editor
    /// saving several files, a formatter after a save).
    pub async fn changed(&mut self) {
        let root = self.build.root.clone();
        let take = || {
            let root = root.clone();
            async move {
                tokio::task::spawn_blocking(move || SourceSnapshot::take(&root))
                    .await
                    .expect("a snapshot does not panic")
            }
        };
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            let now = take().await;
            if !now.changed_since(&self.seen) {
                continue;
            }
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            if take().await == now {
                self.seen = now;
                return;
            }
        }
    }
}

fn is_source(name: &str) -> bool {
    name.ends_with(".rs") || name == "Cargo.toml" || name == "Cargo.lock"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(root: &str, target: &str, binaries: &[(&str, &str)]) -> CargoLayout {
        CargoLayout {
            workspace_root: root.into(),
            target_directory: target.into(),
            binaries: binaries
                .iter()
                .map(|(package, name)| CargoBinary {
                    package: package.to_string(),
                    name: name.to_string(),
                    package_dir: Path::new(root).join(package),
                })
                .collect(),
        }
    }

    #[test]
    fn executable_paths_in_the_target_folder_name_their_build() {
        let w = layout("/w", "/w/target", &[("orders", "orders")]);
        let build = CargoBuild::in_layout(Path::new("/w/app/../target/debug/orders"), &w).unwrap();
        assert_eq!(build.root, Path::new("/w"));
        assert_eq!(build.args(), ["build", "--bin", "orders"]);
        assert_eq!(build.output, Path::new("/w/target/debug/orders"));
        let build = CargoBuild::in_layout(
            Path::new("/w/target/x86_64-unknown-linux-gnu/release/orders"),
            &w,
        )
        .unwrap();
        assert_eq!(
            build.args(),
            [
                "build",
                "--release",
                "--target",
                "x86_64-unknown-linux-gnu",
                "--bin",
                "orders"
            ]
        );
        let build = CargoBuild::in_layout(Path::new("/w/target/profiling/orders"), &w).unwrap();
        assert_eq!(
            build.args(),
            ["build", "--profile", "profiling", "--bin", "orders"]
        );
        for elsewhere in [
            "/usr/local/bin/orders",
            "/w/target/orders",
            "/w/target/a/b/c/orders",
            "/w/target/debug/not-a-binary-of-ours",
        ] {
            assert_eq!(
                CargoBuild::in_layout(Path::new(elsewhere), &w),
                None,
                "{elsewhere}"
            );
        }
    }

    #[test]
    fn a_target_folder_of_any_name_is_the_one_cargo_names() {
        // A shared CARGO_TARGET_DIR whose name has dashes, below a folder named `target`: no
        // triple is guessed from either.
        let shared = layout(
            "/src/orders",
            "/home/u/target/shared-target",
            &[("orders", "orders")],
        );
        let build = CargoBuild::in_layout(
            Path::new("/home/u/target/shared-target/debug/orders"),
            &shared,
        )
        .unwrap();
        assert_eq!(build.args(), ["build", "--bin", "orders"]);
        assert_eq!(build.target, None);
        assert_eq!(build.root, Path::new("/src/orders"));
        // host.json names the project's own target/ (as `hubhost new` writes it): Cargo builds
        // into the shared folder, and that is where the executable is.
        let build = CargoBuild::in_layout(
            Path::new("/src/orders/function_app/../target/debug/orders"),
            &shared,
        )
        .unwrap();
        assert_eq!(
            build.output,
            Path::new("/home/u/target/shared-target/debug/orders")
        );
    }

    #[test]
    fn a_workspace_of_several_packages_names_the_package() {
        let w = layout(
            "/w",
            "/w/target",
            &[("hubhost", "hubhost"), ("app", "app-handler")],
        );
        let build = CargoBuild::in_layout(Path::new("/w/target/release/app-handler"), &w).unwrap();
        assert_eq!(
            build.args(),
            [
                "build",
                "--release",
                "--package",
                "app",
                "--bin",
                "app-handler"
            ]
        );
    }

    #[test]
    fn the_command_is_shown_from_where_the_user_is() {
        let args = ["build".to_string(), "--bin".into(), "orders".into()];
        assert_eq!(
            command_line_from(Path::new("/src/orders"), Path::new("/src/orders"), &args),
            "cargo build --bin orders"
        );
        assert_eq!(
            command_line_from(Path::new("/src"), Path::new("/src/orders"), &args),
            "cd orders && cargo build --bin orders"
        );
        assert_eq!(
            command_line_from(Path::new("/elsewhere"), Path::new("/src/orders"), &args),
            "cd /src/orders && cargo build --bin orders"
        );
    }

    #[test]
    fn cargo_metadata_is_read_for_the_workspace_its_target_folder_and_binaries() {
        let metadata = serde_json::json!({
            "workspace_root": "/w",
            "target_directory": "/cache/target",
            "packages": [
                {"name": "orders", "manifest_path": "/w/orders/Cargo.toml", "targets": [
                    {"name": "orders", "kind": ["bin"]},
                    {"name": "orders", "kind": ["lib"]},
                    {"name": "local_app", "kind": ["test"]}
                ]},
                {"name": "tool", "manifest_path": "/w/tool/Cargo.toml", "targets": [
                    {"name": "tool-cli", "kind": ["bin"]}
                ]}
            ]
        });
        let layout = CargoLayout::from_metadata(&metadata).unwrap();
        assert_eq!(layout.workspace_root, Path::new("/w"));
        assert_eq!(layout.target_directory, Path::new("/cache/target"));
        let names: Vec<&str> = layout.binaries.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["orders", "tool-cli"]);
        assert_eq!(
            layout.binary("tool-cli").unwrap().package_dir,
            Path::new("/w/tool")
        );
        assert_eq!(CargoLayout::from_metadata(&serde_json::json!({})), None);
    }

    /// Cargo itself, on a project of the test's own: its answer honours CARGO_TARGET_DIR.
    #[test]
    fn cargo_is_asked_where_it_builds() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("orders");
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::create_dir_all(project.join("function_app")).unwrap();
        std::fs::write(
            project.join("Cargo.toml"),
            "[package]\nname = \"orders\"\nversion = \"0.1.0\"\nedition = \"2021\"\n[workspace]\n",
        )
        .unwrap();
        std::fs::write(project.join("src/main.rs"), "fn main() {}").unwrap();
        let layout = CargoLayout::of(&project.join("function_app")).expect("cargo answers");
        assert_eq!(
            layout.workspace_root.canonicalize().unwrap(),
            project.canonicalize().unwrap()
        );
        assert_eq!(layout.binary("orders").unwrap().package, "orders");
        // Wherever this test's own Cargo builds (CARGO_TARGET_DIR or not), the answer is a
        // target folder of the project's or the one named.
        match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
            Some(shared) if shared.is_absolute() => assert_eq!(layout.target_directory, shared),
            Some(_) => {}
            None => assert!(layout.target_directory.ends_with("orders/target")),
        }
    }

    #[test]
    fn a_source_edit_is_seen_and_the_build_output_is_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::create_dir_all(dir.path().join("target/debug")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "fn main() {}").unwrap();
        let before = SourceSnapshot::take(dir.path());
        std::fs::write(dir.path().join("target/debug/app"), "binary").unwrap();
        std::fs::write(dir.path().join("README.md"), "docs").unwrap();
        assert!(!SourceSnapshot::take(dir.path()).changed_since(&before));
        std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
        assert!(SourceSnapshot::take(dir.path()).changed_since(&before));
    }
}
