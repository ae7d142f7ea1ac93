//! Where a handler executable comes from, when it is a Cargo build: host.json's
//! `defaultExecutablePath` pointing into a Cargo target folder (`…/target/debug/NAME`,
//! `…/target/release/NAME`, `…/target/TRIPLE/PROFILE/NAME`) names the build that makes it.
//!
//! `emulate` uses it to say how to build a missing executable, and `emulate --watch` to build
//! it before starting and again when the sources change ([`SourceSnapshot`]).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The Cargo build an executable path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CargoBuild {
    /// The folder holding `target/` (the workspace or package root, as Cargo's default
    /// target folder is); [`in_project`](Self::in_project) sets the real one.
    pub root: PathBuf,
    /// The target folder the executable lies in (`…/target`).
    pub target_dir: PathBuf,
    /// `debug` (the dev profile), `release`, or a custom profile's folder.
    pub profile: String,
    /// The target triple, when the path has one.
    pub target: Option<String>,
    /// The binary's name.
    pub bin: String,
}

impl CargoBuild {
    /// The build `executable` comes from, if it lies in a Cargo target folder.
    ///
    /// ```
    /// use std::path::Path;
    /// use hubhost_host::emulate::build::CargoBuild;
    ///
    /// let build = CargoBuild::of(Path::new("/src/app/target/release/my-function")).unwrap();
    /// assert_eq!(build.root, Path::new("/src/app"));
    /// assert_eq!(build.args(), ["build", "--release", "--bin", "my-function"]);
    /// assert!(CargoBuild::of(Path::new("/usr/bin/my-function")).is_none());
    /// ```
    pub fn of(executable: &Path) -> Option<Self> {
        let bin = executable.file_name()?.to_str()?.to_string();
        let parts: Vec<&str> = executable
            .parent()?
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect();
        // …/target/PROFILE or …/target/TRIPLE/PROFILE, the last `target` in the path; or, in
        // a target folder of another name (CARGO_TARGET_DIR), …/debug or …/release.
        let is_triple = |part: &str| part.matches('-').count() >= 2;
        let at = match parts.iter().rposition(|p| *p == "target") {
            Some(at) => at,
            None => match parts.as_slice() {
                [.., _, triple, "debug" | "release"] if is_triple(triple) => parts.len() - 3,
                [.., _, "debug" | "release"] => parts.len() - 2,
                _ => return None,
            },
        };
        let (target, profile) = match &parts[at + 1..] {
            [profile] => (None, *profile),
            [triple, profile] => (Some(triple.to_string()), *profile),
            _ => return None,
        };
        let target_dir =
            lexically_normal(executable.parent()?.ancestors().nth(parts.len() - at - 1)?);
        Some(CargoBuild {
            root: match target_dir.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            },
            target_dir,
            profile: profile.to_string(),
            target,
            bin,
        })
    }

    /// The same build, of the Cargo project that holds the app folder `app` (the nearest folder
    /// above it with a Cargo.toml), when there is one: a target folder shared between
    /// projects (`CARGO_TARGET_DIR`) does not say which project builds into it.
    pub fn in_project(mut self, app: &Path) -> Self {
        if let Some(project) = app.ancestors().find(|dir| dir.join("Cargo.toml").is_file()) {
            self.root = lexically_normal(project);
        }
        self
    }

    /// Whether the executable goes to the project's own `target/` (no `CARGO_TARGET_DIR`
    /// needed).
    fn default_target_dir(&self) -> bool {
        self.target_dir == self.root.join("target")
    }

    /// A `cargo` command that builds it into its target folder.
    pub fn command(&self) -> std::process::Command {
        let mut cargo =
            std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        cargo.args(self.args()).current_dir(&self.root);
        cargo.env("CARGO_TARGET_DIR", &self.target_dir);
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
        args.extend(["--bin".into(), self.bin.clone()]);
        args
    }

    /// The command, as a person would type it.
    pub fn command_line(&self) -> String {
        let target_dir = if self.default_target_dir() {
            String::new()
        } else {
            format!("CARGO_TARGET_DIR={} ", self.target_dir.display())
        };
        format!(
            "cd {} && {target_dir}cargo {}",
            self.root.display(),
            self.args().join(" ")
        )
    }
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
fn lexically_normal(path: &Path) -> PathBuf {
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

    #[test]
    fn executable_paths_name_their_build() {
        let build = CargoBuild::of(Path::new("../target/debug/orders")).unwrap();
        assert_eq!(build.root, Path::new(".."));
        assert_eq!(build.target_dir, Path::new("../target"));
        assert_eq!(build.command_line(), "cd .. && cargo build --bin orders");
        assert_eq!(build.args(), ["build", "--bin", "orders"]);
        let build = CargoBuild::of(Path::new(
            "/w/target/x86_64-unknown-linux-gnu/release/orders",
        ))
        .unwrap();
        assert_eq!(build.root, Path::new("/w"));
        assert_eq!(build.target_dir, Path::new("/w/target"));
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
        let build = CargoBuild::of(Path::new("/w/target/profiling/orders")).unwrap();
        assert_eq!(
            build.args(),
            ["build", "--profile", "profiling", "--bin", "orders"]
        );
        let build = CargoBuild::of(Path::new(
            "examples/app/function_app/../../../target/debug/app",
        ));
        assert_eq!(build.unwrap().root, Path::new("."));
        let build = CargoBuild::of(Path::new("/w/app/function_app/../target/debug/app"));
        assert_eq!(build.unwrap().root, Path::new("/w/app"));
        let build = CargoBuild::of(Path::new("/w/out/debug/orders")).unwrap();
        assert_eq!(build.target_dir, Path::new("/w/out"));
        let build = CargoBuild::of(Path::new("/w/out/aarch64-unknown-linux-gnu/release/orders"));
        assert_eq!(build.unwrap().target_dir, Path::new("/w/out"));
        assert_eq!(CargoBuild::of(Path::new("/usr/local/bin/orders")), None);
        assert_eq!(CargoBuild::of(Path::new("orders")), None);
        assert_eq!(CargoBuild::of(Path::new("/w/target/orders")), None);
        assert_eq!(CargoBuild::of(Path::new("/w/target/a/b/c/orders")), None);
    }

    #[test]
    fn a_shared_target_folder_builds_the_project_that_holds_the_app() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("orders");
        std::fs::create_dir_all(project.join("function_app")).unwrap();
        std::fs::write(project.join("Cargo.toml"), "[package]").unwrap();
        let shared = dir.path().join("shared/target/debug/orders");
        let build = CargoBuild::of(&shared)
            .unwrap()
            .in_project(&project.join("function_app"));
        assert_eq!(build.root, project);
        assert_eq!(
            build.command_line(),
            format!(
                "cd {} && CARGO_TARGET_DIR={} cargo build --bin orders",
                project.display(),
                dir.path().join("shared/target").display()
            )
        );
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
