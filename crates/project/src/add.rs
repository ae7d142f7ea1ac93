//! `hubhost add`: one more Event Hubs function in a project `hubhost new` made, as `func new`
//! adds one to an app — its folder in function_app/ on a consumer group of its own (two
//! functions on one group would compete for its events, each seeing part of them), its type in
//! a module of its own, and its registration beside the first function's in `src/main.rs` and
//! `tests/simulation.rs`, so that the project's tests still pass.

use std::path::{Path, PathBuf};

use crate::scaffold::{Cardinality, DataType, Scaffold, ScaffoldError};

/// What to add.
#[derive(Debug, Clone)]
pub struct AddFunction {
    /// Its name: the folder in function_app/ and the Rust type.
    pub function: String,
    /// The event hub its trigger reads [default: the first function's].
    pub event_hub: Option<String>,
    /// Its consumer group [default: its name, lowercased].
    pub consumer_group: Option<String>,
    pub cardinality: Cardinality,
    pub data_type: DataType,
}

#[derive(Debug, thiserror::Error)]
pub enum AddError {
    #[error(
        "{0} has no Cargo.toml with a [package] name: run `hubhost add` in a project `hubhost new` made"
    )]
    NotAProject(PathBuf),
    #[error("{0} has no function_app/ folder: run `hubhost add` in a project `hubhost new` made")]
    NoFunctionApp(PathBuf),
    #[error("function_app/{0} exists: pick another name")]
    Exists(String),
    #[error("src/{0}.rs exists: pick another function name")]
    ModuleExists(String),
    #[error(transparent)]
    Scaffold(#[from] ScaffoldError),
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What `add_function` did: each file it created or changed, and what is left to the user.
#[derive(Debug, Default)]
pub struct Added {
    pub created: Vec<PathBuf>,
    pub changed: Vec<PathBuf>,
    /// Files where the registration could not be placed, for the user to add.
    pub register_by_hand: Vec<PathBuf>,
    pub consumer_group: String,
    pub event_hub: String,
}

/// Adds `add` to the project in `project`.
pub fn add_function(project: &Path, add: &AddFunction) -> Result<Added, AddError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AddError::Io { path, source }
    };
    let manifest = project.join("Cargo.toml");
    let package = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| package_name(&text))
        .ok_or_else(|| AddError::NotAProject(project.to_path_buf()))?;
    let app = project.join("function_app");
    if !app.is_dir() {
        return Err(AddError::NoFunctionApp(project.to_path_buf()));
    }
    if app.join(&add.function).exists() {
        return Err(AddError::Exists(add.function.clone()));
    }
    let module = snake_case(&add.function);
    let module_file = PathBuf::from("src").join(format!("{module}.rs"));
    if project.join(&module_file).exists() || ["lib", "main"].contains(&module.as_str()) {
        return Err(AddError::ModuleExists(module));
    }
    let event_hub = match &add.event_hub {
        Some(hub) => hub.clone(),
        None => first_event_hub(&app).unwrap_or_else(|| "sensors".into()),
    };
    let consumer_group = add
        .consumer_group
        .clone()
        .unwrap_or_else(|| add.function.to_lowercase());
    let mut scaffold = Scaffold::for_dir(project);
    scaffold.package = package.clone();
    scaffold.function = add.function.clone();
    scaffold.event_hub = event_hub.clone();
    scaffold.consumer_group = consumer_group.clone();
    scaffold.cardinality = add.cardinality;
    scaffold.data_type = add.data_type;
    let files = scaffold.files()?;
    let take = |name: &Path| {
        files
            .iter()
            .find(|(path, _)| path == name)
            .map(|(_, content)| content.clone())
            .expect("the scaffold writes it")
    };
    let function_json = PathBuf::from("function_app")
        .join(&add.function)
        .join("function.json");
    let code = take(Path::new("src/lib.rs")).replace(
        "Made by\n//! `hubhost new`.",
        "Added by\n//! `hubhost add`.",
    );
    let mut added = Added {
        consumer_group,
        event_hub,
        ..Added::default()
    };
    for (relative, content) in [(&function_json, take(&function_json)), (&module_file, code)] {
        let path = project.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, content).map_err(io(&path))?;
        added.created.push(relative.clone());
    }
    let lib = PathBuf::from("src/lib.rs");
    let path = project.join(&lib);
    let mut text = std::fs::read_to_string(&path).map_err(io(&path))?;
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!(
        "\npub mod {module};\npub use {module}::{};\n",
        add.function
    ));
    std::fs::write(&path, text).map_err(io(&path))?;
    added.changed.push(lib);
    let registration = format!(
        ".function(\"{}\", {}::{})",
        add.function,
        package.replace('-', "_"),
        add.function
    );
    for (relative, before) in [
        ("src/main.rs", ".run()"),
        ("tests/simulation.rs", ".build(Some(handler.app_folder))"),
    ] {
        let path = project.join(relative);
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match register(&text, before, &registration) {
            Some(changed) => {
                std::fs::write(&path, changed).map_err(io(&path))?;
                added.changed.push(relative.into());
            }
            None => added.register_by_hand.push(relative.into()),
        }
    }
    // As rustfmt would leave them (best effort: a machine without rustfmt gets them as they are).
    let _ = std::process::Command::new("rustfmt")
        .args(["--edition", "2024"])
        .args(
            added
                .created
                .iter()
                .chain(&added.changed)
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .map(|p| project.join(p)),
        )
        .stderr(std::process::Stdio::null())
        .status();
    Ok(added)
}

/// `[package]`'s `name` in a Cargo.toml.
fn package_name(manifest: &str) -> Option<String> {
    let package = manifest.split("[package]").nth(1)?;
    package
        .lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .find_map(|l| {
            let value = l.trim().strip_prefix("name")?.trim().strip_prefix('=')?;
            Some(value.trim().trim_matches('"').to_string())
        })
}

/// The event hub of the first function (by folder name) with an `eventHubTrigger`.
fn first_event_hub(app: &Path) -> Option<String> {
    let mut folders: Vec<PathBuf> = std::fs::read_dir(app)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("function.json").is_file())
        .collect();
    folders.sort();
    folders.iter().find_map(|folder| {
        let text = std::fs::read_to_string(folder.join("function.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["bindings"]
            .as_array()?
            .iter()
            .find(|b| b["type"] == "eventHubTrigger")?["eventHubName"]
            .as_str()
            .map(str::to_string)
    })
}

/// `text` with `registration` on a line of its own before the first line that starts with
/// `before` (indented as that line); `None` when there is no such line.
fn register(text: &str, before: &str, registration: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + registration.len() + 16);
    let mut placed = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if !placed && trimmed.starts_with(before) {
            let indent = &line[..line.len() - trimmed.len()];
            out.push_str(&format!("{indent}{registration}\n"));
            placed = true;
        }
        out.push_str(line);
    }
    placed.then_some(out)
}

/// `ProcessOrders` → `process_orders`.
fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 && !out.ends_with('_') {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_registrations() {
        assert_eq!(snake_case("ProcessOrders"), "process_orders");
        assert_eq!(snake_case("Second"), "second");
        assert_eq!(
            package_name("[package]\nname = \"my-function\"\nversion = \"0.1.0\"\n"),
            Some("my-function".into())
        );
        let main = "    FunctionServer::builder()\n        .function(\"A\", A)\n        .run()\n        .await\n";
        let registered = register(main, ".run()", ".function(\"B\", app::B)").unwrap();
        assert_eq!(
            registered,
            "    FunctionServer::builder()\n        .function(\"A\", A)\n        .function(\"B\", app::B)\n        .run()\n        .await\n"
        );
        assert_eq!(register("fn main() {}\n", ".run()", "x"), None);
    }

    #[test]
    fn a_function_is_added_beside_the_first_on_a_group_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("orders-app");
        let mut scaffold = Scaffold::for_dir(&project);
        scaffold.event_hub = "orders".into();
        scaffold.write(&project).unwrap();
        let add = AddFunction {
            function: "Second".into(),
            event_hub: None,
            consumer_group: None,
            cardinality: Cardinality::Many,
            data_type: DataType::String,
        };
        let added = add_function(&project, &add).unwrap();
        assert_eq!(
            (added.event_hub.as_str(), added.consumer_group.as_str()),
            ("orders", "second")
        );
        assert!(added.register_by_hand.is_empty(), "{added:?}");
        let read = |p: &str| std::fs::read_to_string(project.join(p)).unwrap();
        let function: serde_json::Value =
            serde_json::from_str(&read("function_app/Second/function.json")).unwrap();
        assert_eq!(function["bindings"][0]["consumerGroup"], "second");
        assert_eq!(function["bindings"][0]["eventHubName"], "orders");
        assert!(read("src/second.rs").contains("impl EventHubFunction for Second"));
        assert!(read("src/lib.rs").contains("pub use second::Second;"));
        assert!(read("src/main.rs").contains(".function(\"Second\", orders_app::Second)"));
        assert!(read("tests/simulation.rs").contains(".function(\"Second\", orders_app::Second)"));
        // Again: refused, nothing changed.
        let before = read("src/lib.rs");
        assert!(matches!(
            add_function(&project, &add),
            Err(AddError::Exists(_))
        ));
        assert_eq!(read("src/lib.rs"), before);
        assert!(matches!(
            add_function(dir.path(), &add),
            Err(AddError::NotAProject(_))
        ));
    }
}
