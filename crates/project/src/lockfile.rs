//! The `Cargo.lock` a new project starts with: the versions this build of hubhost was tested
//! with, so that `hubhost new` → `cargo test` builds what our CI built, whatever crates.io has
//! published since.
//!
//! The workspace's own lock is compiled in ([`WORKSPACE_LOCK`]); [`limit_to`] keeps the
//! packages a project depending on some of them can reach (following each package's
//! `dependencies` in the lock), verbatim, in the lock's order. The lock lists a workspace
//! member's dev-dependencies among its dependencies and every feature's, so what is kept is a
//! little more than the new project builds: Cargo adds the project's own package and drops what
//! it does not use on the first build, and changes no version it keeps.
//!
//! Pure text in, text out: the lock's format is Cargo's (`version = 4`), read without a TOML
//! parser because Cargo writes it in one fixed shape.

use std::collections::{BTreeSet, HashMap};

/// This workspace's `Cargo.lock`, as built and tested (hubhost-project is not published: it is
/// built from a checkout, where the lock is).
pub const WORKSPACE_LOCK: &str = include_str!("../../../Cargo.lock");

/// Why a lock could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    #[error("Cargo.lock has a package without a {0}")]
    MissingField(&'static str),
    #[error("Cargo.lock's {package} depends on {dependency}, which it does not list")]
    UnknownDependency { package: String, dependency: String },
}

/// One `[[package]]` entry: its text as Cargo wrote it, and what it names.
#[derive(Debug)]
struct Package<'a> {
    text: &'a str,
    name: &'a str,
    version: &'a str,
    source: Option<&'a str>,
    dependencies: Vec<&'a str>,
}

/// `lock` with only the packages reachable from the packages named `roots` (every version of
/// each); a root the lock does not have is left to Cargo to resolve.
///
/// ```
/// let lock = "version = 4\n\n[[package]]\nname = \"a\"\nversion = \"1.0.0\"\ndependencies = [\n \"b\",\n]\n\n[[package]]\nname = \"b\"\nversion = \"2.0.0\"\n\n[[package]]\nname = \"c\"\nversion = \"3.0.0\"\n";
/// let limited = hubhost_project::lockfile::limit_to(lock, &["a"]).unwrap();
/// assert!(limited.contains("name = \"b\"") && !limited.contains("name = \"c\""));
/// ```
pub fn limit_to(lock: &str, roots: &[&str]) -> Result<String, LockError> {
    let (header, packages) = parse(lock)?;
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, package) in packages.iter().enumerate() {
        by_name.entry(package.name).or_default().push(i);
    }
    let mut kept = BTreeSet::new();
    let mut pending: Vec<usize> = roots
        .iter()
        .filter_map(|root| by_name.get(root))
        .flatten()
        .copied()
        .collect();
    while let Some(i) = pending.pop() {
        if !kept.insert(i) {
            continue;
        }
        for dependency in &packages[i].dependencies {
            pending.push(resolve(&packages, &by_name, packages[i].name, dependency)?);
        }
    }
    let mut out = header.trim_end().to_string();
    out.push('\n');
    for i in kept {
        out.push_str("\n[[package]]\n");
        out.push_str(packages[i].text.trim_end());
        out.push('\n');
    }
    Ok(out)
}

/// The package a `dependencies` entry names: `name`, `name version` or
/// `name version (source)` — Cargo writes the shortest that is unambiguous.
fn resolve(
    packages: &[Package],
    by_name: &HashMap<&str, Vec<usize>>,
    from: &str,
    entry: &str,
) -> Result<usize, LockError> {
    let mut parts = entry.splitn(3, ' ');
    let name = parts.next().unwrap_or_default();
    let version = parts.next();
    let source = parts
        .next()
        .map(|s| s.trim_start_matches('(').trim_end_matches(')'));
    by_name
        .get(name)
        .into_iter()
        .flatten()
        .copied()
        .find(|&i| {
            version.is_none_or(|v| packages[i].version == v)
                && source.is_none_or(|s| packages[i].source == Some(s))
        })
        .ok_or_else(|| LockError::UnknownDependency {
            package: from.to_string(),
            dependency: entry.to_string(),
        })
}

/// The text before the first package, and every package.
fn parse(lock: &str) -> Result<(&str, Vec<Package<'_>>), LockError> {
    let mut blocks = lock.split("\n[[package]]\n");
    let header = blocks.next().unwrap_or_default();
    let packages = blocks.map(package).collect::<Result<_, _>>()?;
    Ok((header, packages))
}

fn package(text: &str) -> Result<Package<'_>, LockError> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(" = "))
            .map(|value| value.trim_matches('"'))
    };
    let dependencies = match text.split_once("\ndependencies = [\n") {
        Some((_, list)) => list
            .lines()
            .take_while(|line| *line != "]")
            .map(|line| line.trim().trim_end_matches(',').trim_matches('"'))
            .collect(),
        None => Vec::new(),
    };
    Ok(Package {
        text,
        name: field("name").ok_or(LockError::MissingField("name"))?,
        version: field("version").ok_or(LockError::MissingField("version"))?,
        source: field("source"),
        dependencies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"# This file is automatically @generated by Cargo.
# It is not intended for manual editing.
version = 4

[[package]]
name = "app"
version = "0.1.0"
dependencies = [
 "lib 2.0.0",
 "tool",
]

[[package]]
name = "lib"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "11"

[[package]]
name = "lib"
version = "2.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "22"
dependencies = [
 "leaf",
]

[[package]]
name = "leaf"
version = "0.3.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "33"

[[package]]
name = "other"
version = "0.1.0"
dependencies = [
 "lib 1.0.0",
]

[[package]]
name = "tool"
version = "0.1.0"
"#;

    fn names(lock: &str) -> Vec<String> {
        let (_, packages) = parse(lock).unwrap();
        packages
            .iter()
            .map(|p| format!("{} {}", p.name, p.version))
            .collect()
    }

    #[test]
    fn only_what_the_roots_reach_is_kept_verbatim_and_in_order() {
        let limited = limit_to(LOCK, &["app"]).unwrap();
        assert_eq!(
            names(&limited),
            ["app 0.1.0", "lib 2.0.0", "leaf 0.3.1", "tool 0.1.0"]
        );
        assert!(limited.starts_with("# This file is automatically @generated by Cargo."));
        assert!(limited.contains("version = 4\n\n[[package]]\nname = \"app\""));
        assert!(limited.contains("checksum = \"22\"\ndependencies = [\n \"leaf\",\n]\n"));
        // Read again, it is the same lock.
        assert_eq!(limit_to(&limited, &["app"]).unwrap(), limited);
    }

    #[test]
    fn a_root_keeps_every_version_of_its_name_and_an_unknown_root_nothing() {
        assert_eq!(
            names(&limit_to(LOCK, &["lib", "absent"]).unwrap()),
            ["lib 1.0.0", "lib 2.0.0", "leaf 0.3.1"]
        );
        assert!(names(&limit_to(LOCK, &["absent"]).unwrap()).is_empty());
    }

    #[test]
    fn a_dependency_the_lock_does_not_list_is_an_error() {
        let broken = LOCK.replace(" \"tool\",\n", " \"missing\",\n");
        assert_eq!(
            limit_to(&broken, &["app"]),
            Err(LockError::UnknownDependency {
                package: "app".into(),
                dependency: "missing".into()
            })
        );
    }

    #[test]
    fn the_workspace_lock_reaches_the_framework_and_the_test_kit_but_not_the_tools() {
        let limited = limit_to(WORKSPACE_LOCK, &["hubhost-functions", "hubhost-testkit"]).unwrap();
        let kept = names(&limited);
        for needed in [
            "hubhost-functions",
            "hubhost-testkit",
            "hubhost-hub",
            "tokio ",
        ] {
            assert!(
                kept.iter().any(|k| k.starts_with(needed)),
                "{needed} is missing"
            );
        }
        // The command line, the reference app and the benchmarks are not a project's.
        for tool in [
            "hubhost ",
            "hubhost-app ",
            "hubhost-bench ",
            "hubhost-project ",
        ] {
            assert!(!kept.iter().any(|k| k.starts_with(tool)), "{tool} is kept");
        }
        assert!(kept.len() < names(WORKSPACE_LOCK).len());
    }
}
