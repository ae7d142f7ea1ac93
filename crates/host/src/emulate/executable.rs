//! host.json's `defaultExecutablePath` → the program the handler process runs, found as the
//! Functions host finds it: a path is taken from the app folder (the script root, absolute
//! once loaded, so the handler's own working directory does not move it); a bare name is a file
//! in the app folder if there is one, else a command on `PATH`.
//!
//! What is not found is an error that says where it was looked for and, for a binary of the
//! Cargo project holding the app, the command that builds it. A path into the project's
//! `target/` that Cargo builds elsewhere (`CARGO_TARGET_DIR`) is run from where Cargo put it
//! ([`super::build::CargoBuild::output`]).

use std::path::{Path, PathBuf};

use super::EmulateError;
use super::build::{CargoBuild, CargoLayout, lexically_normal};

/// Where a declared executable is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Located {
    /// The file to run.
    File(PathBuf),
    /// A path (from the app folder) that names no file.
    MissingPath(PathBuf),
    /// A bare name that is neither in the app folder nor in a folder on `PATH`; where it was
    /// looked for, in order.
    MissingCommand(Vec<PathBuf>),
}

/// Finds `declared` as the host does, for an app in `app_root` and a handler whose `PATH` is
/// `path_var`. Pure but for `is_file`, which answers for the file system.
pub(super) fn locate(
    declared: &str,
    app_root: &Path,
    path_var: &str,
    is_file: impl Fn(&Path) -> bool,
) -> Located {
    if declared.contains('/') {
        let path = lexically_normal(&app_root.join(declared));
        return if is_file(&path) {
            Located::File(path)
        } else {
            Located::MissingPath(path)
        };
    }
    let in_app = app_root.join(declared);
    if is_file(&in_app) {
        return Located::File(in_app);
    }
    let mut looked_in = vec![app_root.to_path_buf()];
    for dir in std::env::split_paths(path_var).filter(|d| !d.as_os_str().is_empty()) {
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let candidate = dir.join(declared);
        if is_file(&candidate) {
            return Located::File(candidate);
        }
        looked_in.push(dir);
    }
    Located::MissingCommand(looked_in)
}

/// The program to run for `declared`, or the error that says what is missing and how to make it.
pub(super) fn program(
    declared: &str,
    app_root: &Path,
    path_var: &str,
) -> Result<PathBuf, EmulateError> {
    match locate(declared, app_root, path_var, Path::is_file) {
        Located::File(path) => Ok(path),
        Located::MissingPath(path) => {
            let build = CargoBuild::find(&path, app_root);
            match build {
                Some(build) if build.output != path && build.output.is_file() => {
                    tracing::info!(
                        declared,
                        running = %build.output.display(),
                        "host.json names the project's target folder; Cargo builds elsewhere, so the handler runs from there"
                    );
                    Ok(build.output)
                }
                build => Err(EmulateError::HandlerMissing {
                    declared: declared.to_string(),
                    path,
                    build: build.map(|b| b.command_line()),
                }),
            }
        }
        Located::MissingCommand(looked_in) => Err(EmulateError::HandlerNotFound {
            declared: declared.to_string(),
            looked_in,
            build: command_build(declared, app_root),
        }),
    }
}

/// How to make a bare command that is a binary of the Cargo project holding the app, in words
/// (see [`build_advice`]).
fn command_build(name: &str, app_root: &Path) -> Option<String> {
    let layout = CargoLayout::of(app_root)?;
    let me = std::env::current_exe().ok()?;
    let here = std::env::current_dir().unwrap_or_default();
    build_advice(name, &layout, &me, &here)
}

/// How to make the workspace's binary `name` for a `hubhost` at `me`, said to a user in `here`:
/// built beside `me` when `me` runs from the workspace's target folder (its folder comes first
/// on the handler's `PATH`), else installed.
fn build_advice(name: &str, layout: &CargoLayout, me: &Path, here: &Path) -> Option<String> {
    let binary = layout.binary(name)?;
    let beside = me.parent()?;
    let profile = beside
        .strip_prefix(&layout.target_directory)
        .ok()
        .and_then(|p| p.to_str());
    let flag = match profile {
        Some("debug") => "",
        Some("release") => " --release",
        _ => {
            let dir = match binary.package_dir.strip_prefix(here) {
                Ok(p) if p.as_os_str().is_empty() => Path::new("."),
                Ok(p) => p,
                Err(_) => &binary.package_dir,
            };
            return Some(format!(
                "install it with `cargo install --locked --path {}`",
                dir.display()
            ));
        }
    };
    Some(format!(
        "build it with `{}cargo build{flag} --package {}` (it lands beside hubhost, in {}, which comes first on the handler's PATH)",
        cd_prefix(here, &layout.workspace_root),
        binary.package,
        beside.display()
    ))
}

/// `cd ROOT && ` unless the user is there.
fn cd_prefix(here: &Path, root: &Path) -> String {
    if lexically_normal(here) == lexically_normal(root) {
        String::new()
    } else {
        let shown = root.strip_prefix(here).unwrap_or(root);
        format!("cd {} && ", shown.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists<'a>(files: &'a [&'a str]) -> impl Fn(&Path) -> bool + 'a {
        move |p| files.iter().any(|f| Path::new(f) == p)
    }

    #[test]
    fn a_path_is_taken_from_the_app_folder_once() {
        // `hubhost new`'s host.json, with `--app function_app` from the project folder: the app
        // root is absolute once loaded, so the path is the project's target/, not
        // function_app/function_app/../target.
        let app = Path::new("/home/u/my-function/function_app");
        let files = ["/home/u/my-function/target/debug/my-function"];
        assert_eq!(
            locate(
                "../target/debug/my-function",
                app,
                "/usr/bin",
                exists(&files)
            ),
            Located::File(PathBuf::from(
                "/home/u/my-function/target/debug/my-function"
            ))
        );
        assert_eq!(
            locate(
                "../target/release/my-function",
                app,
                "/usr/bin",
                exists(&files)
            ),
            Located::MissingPath(PathBuf::from(
                "/home/u/my-function/target/release/my-function"
            ))
        );
        // An absolute path stays what it is.
        assert_eq!(
            locate("/opt/handler", app, "", exists(&["/opt/handler"])),
            Located::File(PathBuf::from("/opt/handler"))
        );
    }

    #[test]
    fn a_bare_name_is_the_app_folders_file_else_a_command_on_path() {
        let app = Path::new("/app");
        assert_eq!(
            locate(
                "handler",
                app,
                "/a:/b",
                exists(&["/app/handler", "/b/handler"])
            ),
            Located::File(PathBuf::from("/app/handler"))
        );
        assert_eq!(
            locate("handler", app, "/a:/b", exists(&["/b/handler"])),
            Located::File(PathBuf::from("/b/handler"))
        );
        assert_eq!(
            locate("handler", app, "/a::/b", exists(&[])),
            Located::MissingCommand(vec!["/app".into(), "/a".into(), "/b".into()])
        );
    }

    #[test]
    fn a_missing_binary_of_the_workspace_is_built_beside_hubhost_or_installed() {
        let layout = CargoLayout {
            workspace_root: "/src/hubhost".into(),
            target_directory: "/src/hubhost/target".into(),
            binaries: vec![super::super::build::CargoBinary {
                package: "hubhost-app".into(),
                name: "hubhost-app".into(),
                package_dir: "/src/hubhost/crates/app".into(),
            }],
        };
        let here = Path::new("/src/hubhost");
        let release = Path::new("/src/hubhost/target/release/hubhost");
        assert_eq!(
            build_advice("hubhost-app", &layout, release, here).unwrap(),
            "build it with `cargo build --release --package hubhost-app` (it lands beside hubhost, in /src/hubhost/target/release, which comes first on the handler's PATH)"
        );
        let debug = Path::new("/src/hubhost/target/debug/hubhost");
        assert!(
            build_advice("hubhost-app", &layout, debug, Path::new("/elsewhere"))
                .unwrap()
                .starts_with(
                    "build it with `cd /src/hubhost && cargo build --package hubhost-app`"
                )
        );
        let installed = Path::new("/home/u/.cargo/bin/hubhost");
        assert_eq!(
            build_advice("hubhost-app", &layout, installed, here).unwrap(),
            "install it with `cargo install --locked --path crates/app`"
        );
        assert_eq!(build_advice("other", &layout, release, here), None);
    }

    #[test]
    fn a_missing_command_says_where_it_looked_without_a_stray_space() {
        let app = tempfile::tempdir().unwrap();
        let error = program("no-such-handler-here", app.path(), "/nonexistent-dir").unwrap_err();
        let message = error.to_string();
        assert!(message.contains("`no-such-handler-here`"), "{message}");
        assert!(
            message.contains(&app.path().display().to_string()),
            "{message}"
        );
        assert!(message.contains("/nonexistent-dir"), "{message}");
        assert!(!message.contains("no-such-handler-here )"), "{message}");
    }
}
