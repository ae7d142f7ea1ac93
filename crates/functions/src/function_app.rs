//! The function app on disk: `host.json` and one folder per function with its `function.json`,
//! discovered the way the Functions host does (folders beside host.json in the script root).
//!
//! The custom handler reads it to learn each trigger's binding name, cardinality and data type —
//! it cannot tell a `string` batch from a `binary` one by looking at the request — and the
//! emulated host (`emulate`) reads it to know what to invoke.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The trigger's `cardinality`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cardinality {
    /// One event per invocation.
    One,
    /// A batch per invocation.
    Many,
}

/// The trigger binding's `dataType`: it decides how the host encodes event bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// No `dataType`: with cardinality many the host JSON-parses every body.
    Unset,
    /// `dataType: string`: bodies as strings.
    String,
    /// `dataType: binary`: bodies base64-encoded.
    Binary,
}

/// An `eventHubTrigger` binding, as function.json declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventHubTrigger {
    /// The binding's `name`: the key of the events in the request's `Data`.
    pub binding_name: String,
    /// `eventHubName` (may hold `%Setting%`); empty when function.json leaves it to the
    /// connection string's `EntityPath`, which wins over it when both are given.
    pub event_hub_name: String,
    /// `consumerGroup` (default `$Default`).
    pub consumer_group: String,
    /// `cardinality` (default `one`).
    pub cardinality: Cardinality,
    /// `dataType`.
    pub data_type: DataType,
    /// Name of the app setting with the Event Hubs connection.
    pub connection: Option<String>,
}

/// How long to wait between retries.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryStrategy {
    /// The same delay every time (`fixedDelay`).
    FixedDelay {
        /// `delayInterval`.
        delay: Duration,
    },
    /// Doubling from `minimumInterval` up to `maximumInterval` (`exponentialBackoff`).
    ExponentialBackoff {
        /// `minimumInterval`.
        minimum: Duration,
        /// `maximumInterval`.
        maximum: Duration,
    },
}

/// A function's `retry` section: the host delivers a failed batch again this way.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// The waits between retries.
    pub strategy: RetryStrategy,
    /// -1 means forever.
    pub max_retry_count: i64,
}

/// What triggers a function.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// An `eventHubTrigger`.
    EventHub(EventHubTrigger),
    /// An `httpTrigger`.
    Http {
        /// The binding's `name`.
        binding_name: String,
        /// `route` (e.g. `items/{id}`); none: the function's name.
        route: Option<String>,
        /// `methods`, upper-cased; empty: every method.
        methods: Vec<String>,
        /// `authLevel` as written (`anonymous`, `function`, `admin`); none: `function`.
        auth_level: Option<String>,
    },
    /// Any other trigger type, by name.
    Other {
        /// The binding's `type`.
        kind: String,
        /// The trigger binding's object from function.json (a `timerTrigger`'s `schedule`, …).
        settings: serde_json::Map<String, Value>,
    },
}

/// Which way a binding's data flows, as function.json's `direction` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `in`: read before the function runs.
    In,
    /// `out`: written after it answered.
    Out,
    /// `inout`: both.
    InOut,
}

/// A binding other than the trigger: an output (or input) the host carries out around the
/// invocation. Its settings stay as function.json wrote them, because each binding type has
/// its own (`eventHubName` and `connection` for `eventHub`, `path` for `blob`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct BindingSpec {
    /// The key the handler's answer uses in `Outputs` (`$return` takes `ReturnValue`).
    pub name: String,
    /// As written, e.g. `eventHub`; compare with [`BindingSpec::is`].
    pub kind: String,
    /// `direction`.
    pub direction: Direction,
    /// `dataType`: with `binary` the host passes the answer's value through unchanged; with
    /// anything else it decodes a string that is valid base64 into bytes.
    pub data_type: Option<String>,
    /// The binding's object from function.json, every setting included.
    pub settings: serde_json::Map<String, Value>,
}

impl BindingSpec {
    /// An `eventHub` output named `name` that sends to `event_hub_name` through the
    /// connection in the app setting `connection`.
    pub fn event_hub_output(name: &str, event_hub_name: &str, connection: &str) -> Self {
        let settings = serde_json::json!({
            "type": "eventHub", "direction": "out", "name": name,
            "eventHubName": event_hub_name, "connection": connection,
        });
        BindingSpec::from_json(&settings).expect("a well-formed binding")
    }

    /// A `blob` output named `name` that writes the blob at `path` (`container/name`, with
    /// binding expressions such as `{rand-guid}`) in the storage of the app setting
    /// `connection` (the host's default: `AzureWebJobsStorage`).
    pub fn blob_output(name: &str, path: &str, connection: Option<&str>) -> Self {
        let mut settings = serde_json::json!({
            "type": "blob", "direction": "out", "name": name, "path": path,
        });
        if let Some(c) = connection {
            settings["connection"] = Value::from(c);
        }
        BindingSpec::from_json(&settings).expect("a well-formed binding")
    }

    /// Whether the binding's type is `kind` (types are case-insensitive, as in the host).
    pub fn is(&self, kind: &str) -> bool {
        self.kind.eq_ignore_ascii_case(kind)
    }

    /// A setting's text, e.g. `setting("eventHubName")`.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings.get(key).and_then(Value::as_str)
    }

    /// An `eventHub` output's event hub: `eventHubName`, or `path`, its older name.
    pub fn event_hub_name(&self) -> Option<&str> {
        self.setting("eventHubName").or(self.setting("path"))
    }

    /// Whether `dataType` is `binary` (the host then skips its base64 decoding).
    pub fn is_binary(&self) -> bool {
        self.data_type
            .as_deref()
            .is_some_and(|d| d.eq_ignore_ascii_case("binary"))
    }

    pub(crate) fn from_json(json: &Value) -> Result<Self, DeclarationError> {
        let settings = json
            .as_object()
            .ok_or(DeclarationError::BindingNotAnObject)?
            .clone();
        let text = |key: &str| {
            settings
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let kind = text("type").ok_or(DeclarationError::BindingWithoutType)?;
        let Some(name) = text("name") else {
            return Err(DeclarationError::BindingWithoutName { kind });
        };
        let direction = match text("direction").map(|d| d.to_ascii_lowercase()).as_deref() {
            Some("in") => Direction::In,
            Some("out") => Direction::Out,
            Some("inout") => Direction::InOut,
            other => {
                let direction = other.map(str::to_string);
                return Err(DeclarationError::BadDirection {
                    kind,
                    name,
                    direction,
                });
            }
        };
        Ok(BindingSpec {
            name,
            kind,
            direction,
            data_type: text("dataType"),
            settings,
        })
    }
}

/// One function of the app: its name (the folder), trigger, retry policy and other bindings.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    /// The function's name (its folder's name; case-insensitive).
    pub name: String,
    /// Its trigger.
    pub trigger: Trigger,
    /// Its `retry` section, if any.
    pub retry: Option<RetryPolicy>,
    /// Every binding but the trigger, in function.json's order.
    pub bindings: Vec<BindingSpec>,
}

/// The host's `functionTimeout` when host.json sets none, on every plan but the older
/// Consumption plan (5 min there): 30 minutes (`ScriptJobHostOptionsSetup`).
pub const DEFAULT_FUNCTION_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A function app folder (script root): host.json and the functions beside it.
#[derive(Debug, Clone)]
pub struct FunctionApp {
    /// The folder, absolute, as the host's script root is: a relative folder is taken from the
    /// current directory when the app is loaded, so that paths built on it (host.json's
    /// executable, its working directory) stay right in a process started elsewhere.
    pub root: PathBuf,
    /// host.json as the host reads it: comments skipped, `AzureFunctionsJobHost__` settings
    /// applied over it, its keys under their documented names (see [`crate::app_config`]).
    pub host_json: Value,
    /// The functions it declares (host.json's `functions` list honoured).
    pub functions: Vec<FunctionSpec>,
    /// The functions an app setting disables (`AzureWebJobs.{name}.Disabled`), each with that
    /// setting's name: the host loads them but starts no listener for them.
    pub disabled: std::collections::BTreeMap<String, String>,
    /// The `AzureFunctionsJobHost__` settings applied over host.json.
    pub overrides: Vec<String>,
    /// What the host ignores though the files say it (function.json's `disabled`, the older
    /// extensions' host.json names), one line each, for the emulator to print.
    pub ignored: Vec<String>,
}

/// What is wrong with a function's declaration (its function.json, or the functions a handler
/// registers), each with the words a user needs to mend it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeclarationError {
    /// function.json has no `bindings` array.
    #[error("function.json has no \"bindings\" array")]
    NoBindings,
    /// No binding's type ends in `Trigger`.
    #[error("function.json has no trigger binding")]
    NoTrigger,
    /// The trigger binding has no `name`.
    #[error("the trigger binding has no \"name\"")]
    TriggerWithoutName,
    /// An `eventHubTrigger`'s `cardinality` is neither `one` nor `many`.
    #[error("unknown cardinality \"{0}\"")]
    UnknownCardinality(String),
    /// An `eventHubTrigger`'s `dataType` is neither `string` nor `binary`.
    #[error("dataType \"{0}\" is not supported for eventHubTrigger (use string or binary)")]
    UnsupportedDataType(String),
    /// A binding is not a JSON object.
    #[error("a binding is not a JSON object")]
    BindingNotAnObject,
    /// A binding has no `type`.
    #[error("a binding has no \"type\"")]
    BindingWithoutType,
    /// A binding has no `name`.
    #[error("the {kind} binding has no \"name\"")]
    BindingWithoutName {
        /// The binding's type.
        kind: String,
    },
    /// A binding's `direction` is missing or not `in`, `out` or `inout`.
    #[error("the {kind} binding '{name}' has direction {direction:?} (in, out or inout)")]
    BadDirection {
        /// The binding's type.
        kind: String,
        /// The binding's name.
        name: String,
        /// The direction given, if any.
        direction: Option<String>,
    },
    /// The `retry` section lacks a setting its strategy needs.
    #[error("retry policy needs \"{0}\"")]
    RetrySettingMissing(&'static str),
    /// A `retry` interval is not a time span.
    #[error("retry \"{key}\" is not a time span like 00:00:05: {value}")]
    BadTimeSpan {
        /// The setting.
        key: &'static str,
        /// Its text.
        value: String,
    },
    /// host.json's `functionTimeout` is not a time span.
    #[error("host.json functionTimeout is not a time span like 00:05:00 (or -1): {0}")]
    BadFunctionTimeout(String),
    /// The `retry` section has no integer `maxRetryCount`.
    #[error("retry policy needs an integer \"maxRetryCount\"")]
    NoMaxRetryCount,
    /// The `retry` strategy is neither `fixedDelay` nor `exponentialBackoff`.
    #[error("unknown retry strategy {0:?}")]
    UnknownRetryStrategy(Option<String>),
    /// A function the handler registered by its function.json only, with no app folder to
    /// read it from.
    #[error(
        "function {function} is declared only by its function.json, and there is no app folder (run the handler in the script root, or register it with event_hub_function)"
    )]
    NoAppFolder {
        /// The function.
        function: String,
    },
    /// A blob output that would store base64 text instead of the bytes.
    #[error(
        "the blob output '{binding}' declares dataType binary: the host would then store the base64 text FunctionOutput::write_blob sends; leave dataType out"
    )]
    BinaryBlobOutput {
        /// The output binding's name.
        binding: String,
    },
}

/// Why an app folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FunctionAppError {
    /// The folder has no host.json.
    #[error("{0} has no host.json: point --app at the function app folder (the script root)")]
    NoHostJson(PathBuf),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not JSON.
    #[error("{path} is not valid JSON: {source}")]
    BadJson {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// local.settings.json cannot be read.
    #[error(transparent)]
    Settings(#[from] crate::app_config::SettingsFileError),
    /// A file is JSON but not a valid declaration.
    #[error("{path}: {problem}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: DeclarationError,
    },
}

impl FunctionApp {
    /// Loads host.json and every `*/function.json` beside it, with the app settings of
    /// local.settings.json and the environment ([`crate::app_config::app_settings`]). Honours
    /// host.json's `functions` list, which restricts the functions the host loads.
    pub fn load(root: &Path) -> Result<Self, FunctionAppError> {
        let settings = crate::app_config::app_settings(root)?;
        Self::load_with_settings(root, &settings)
    }

    /// [`FunctionApp::load`] with these app settings: they override host.json
    /// (`AzureFunctionsJobHost__…`) and disable functions (`AzureWebJobs.{name}.Disabled`).
    pub fn load_with_settings(
        root: &Path,
        settings: &std::collections::BTreeMap<String, String>,
    ) -> Result<Self, FunctionAppError> {
        let host_path = root.join("host.json");
        if !host_path.is_file() {
            return Err(FunctionAppError::NoHostJson(root.to_path_buf()));
        }
        let mut host_json = read_json(&host_path)?;
        let overrides = crate::app_config::apply_overrides(&mut host_json, settings);
        crate::app_config::canonical_keys(&mut host_json);
        let only: Option<Vec<String>> =
            host_json
                .get("functions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                });
        let mut functions = Vec::new();
        let mut ignored = crate::app_config::legacy_host_json_keys(&host_json);
        let entries = std::fs::read_dir(root).map_err(|source| FunctionAppError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("function.json").is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            let name = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            if only
                .as_ref()
                .is_some_and(|o| !o.iter().any(|f| f.eq_ignore_ascii_case(&name)))
            {
                continue;
            }
            let path = dir.join("function.json");
            let json = read_json(&path)?;
            if json
                .get("disabled")
                .is_some_and(|d| d != &Value::Bool(false))
            {
                ignored.push(format!(
                    "{name}/function.json: \"disabled\" is ignored by the Functions host since version 2; set the app setting AzureWebJobs.{name}.Disabled to true instead"
                ));
            }
            functions.push(FunctionSpec::from_json(&name, &json).map_err(|problem| {
                FunctionAppError::Invalid {
                    path: path.clone(),
                    problem,
                }
            })?);
        }
        let disabled = functions
            .iter()
            .filter_map(|f| {
                crate::app_config::disabling_setting(&f.name, settings).map(|s| (f.name.clone(), s))
            })
            .collect();
        Ok(FunctionApp {
            root: std::path::absolute(root).map_err(|source| FunctionAppError::Io {
                path: root.to_path_buf(),
                source,
            })?,
            host_json,
            functions,
            disabled,
            overrides,
            ignored,
        })
    }

    /// The app setting that disables function `name`, if one does.
    pub fn disabled_by(&self, name: &str) -> Option<&str> {
        self.disabled
            .iter()
            .find(|(f, _)| f.eq_ignore_ascii_case(name))
            .map(|(_, s)| s.as_str())
    }

    /// How long an invocation may run before the host fails it: host.json's
    /// `functionTimeout`, [`DEFAULT_FUNCTION_TIMEOUT`] when it is not set, `None` for `-1` (no
    /// limit, which only Premium and Dedicated plans allow).
    pub fn function_timeout(&self) -> Result<Option<Duration>, DeclarationError> {
        match self.host_json.get("functionTimeout") {
            None | Some(Value::Null) => Ok(Some(DEFAULT_FUNCTION_TIMEOUT)),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(Some(DEFAULT_FUNCTION_TIMEOUT)),
            Some(Value::String(s)) if s.trim() == "-1" => Ok(None),
            Some(Value::String(s)) => hubhost_trigger::time::parse_timespan(s)
                .map(Some)
                .ok_or_else(|| DeclarationError::BadFunctionTimeout(s.clone())),
            Some(Value::Number(n)) if n.as_i64() == Some(-1) => Ok(None),
            Some(other) => Err(DeclarationError::BadFunctionTimeout(other.to_string())),
        }
    }

    /// Function names are case-insensitive in Azure Functions.
    pub fn function(&self, name: &str) -> Option<&FunctionSpec> {
        self.functions
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
    }
}

fn read_json(path: &Path) -> Result<Value, FunctionAppError> {
    let text = std::fs::read_to_string(path).map_err(|source| FunctionAppError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    crate::app_config::parse_json(&text).map_err(|source| FunctionAppError::BadJson {
        path: path.to_path_buf(),
        source,
    })
}

impl FunctionSpec {
    /// A function's declaration from its function.json; the error names the problem.
    pub fn from_json(name: &str, json: &Value) -> Result<Self, DeclarationError> {
        let bindings = json
            .get("bindings")
            .and_then(Value::as_array)
            .ok_or(DeclarationError::NoBindings)?;
        let trigger_binding = bindings
            .iter()
            .find(|b| {
                b.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.to_ascii_lowercase().ends_with("trigger"))
            })
            .ok_or(DeclarationError::NoTrigger)?;
        let text = |key: &str| {
            trigger_binding
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let kind = text("type").unwrap_or_default();
        let binding_name = text("name").ok_or(DeclarationError::TriggerWithoutName)?;
        let trigger = match kind.to_ascii_lowercase().as_str() {
            "eventhubtrigger" => {
                let cardinality = match text("cardinality").as_deref() {
                    None | Some("one") => Cardinality::One,
                    Some("many") => Cardinality::Many,
                    Some(other) => {
                        return Err(DeclarationError::UnknownCardinality(other.to_string()));
                    }
                };
                let data_type = match text("dataType").as_deref() {
                    None => DataType::Unset,
                    Some("string") => DataType::String,
                    Some("binary") => DataType::Binary,
                    Some(other) => {
                        return Err(DeclarationError::UnsupportedDataType(other.to_string()));
                    }
                };
                Trigger::EventHub(EventHubTrigger {
                    binding_name,
                    // None given: the connection string's EntityPath names it (the emulated
                    // host says so when that is missing too).
                    event_hub_name: text("eventHubName")
                        .or_else(|| text("path"))
                        .unwrap_or_default(),
                    consumer_group: text("consumerGroup").unwrap_or_else(|| "$Default".into()),
                    cardinality,
                    data_type,
                    connection: text("connection"),
                })
            }
            "httptrigger" => Trigger::Http {
                binding_name,
                route: text("route"),
                methods: trigger_binding
                    .get("methods")
                    .and_then(Value::as_array)
                    .map(|methods| {
                        methods
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_ascii_uppercase)
                            .collect()
                    })
                    .unwrap_or_default(),
                auth_level: text("authLevel"),
            },
            _ => Trigger::Other {
                kind,
                settings: trigger_binding.as_object().cloned().unwrap_or_default(),
            },
        };
        let retry = json.get("retry").map(parse_retry).transpose()?;
        let bindings = bindings
            .iter()
            .filter(|b| !std::ptr::eq(*b, trigger_binding))
            .map(BindingSpec::from_json)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FunctionSpec {
            name: name.to_string(),
            trigger,
            retry,
            bindings,
        })
    }

    /// The output bindings (direction `out` or `inout`), in function.json's order.
    pub fn outputs(&self) -> impl Iterator<Item = &BindingSpec> {
        self.bindings
            .iter()
            .filter(|b| b.direction != Direction::In)
    }

    /// Of the output names an answer set, those function.json does not declare: the host looks
    /// up only declared names, so it drops these and counts the invocation a success.
    pub fn undeclared_outputs<'a>(&self, set: impl IntoIterator<Item = &'a String>) -> Vec<String> {
        set.into_iter()
            .filter(|name| !self.outputs().any(|b| &b.name == *name))
            .cloned()
            .collect()
    }

    /// The trigger, if it is an `eventHubTrigger`.
    pub fn event_hub_trigger(&self) -> Option<&EventHubTrigger> {
        match &self.trigger {
            Trigger::EventHub(t) => Some(t),
            _ => None,
        }
    }
}

fn parse_retry(json: &Value) -> Result<RetryPolicy, DeclarationError> {
    let text = |key: &str| json.get(key).and_then(Value::as_str);
    let span = |key: &'static str| -> Result<Duration, DeclarationError> {
        let v = text(key).ok_or(DeclarationError::RetrySettingMissing(key))?;
        hubhost_trigger::time::parse_timespan(v).ok_or_else(|| DeclarationError::BadTimeSpan {
            key,
            value: v.to_string(),
        })
    };
    let max_retry_count = json
        .get("maxRetryCount")
        .and_then(Value::as_i64)
        .ok_or(DeclarationError::NoMaxRetryCount)?;
    let strategy = match text("strategy") {
        Some(s) if s.eq_ignore_ascii_case("fixedDelay") => RetryStrategy::FixedDelay {
            delay: span("delayInterval")?,
        },
        Some(s) if s.eq_ignore_ascii_case("exponentialBackoff") => {
            RetryStrategy::ExponentialBackoff {
                minimum: span("minimumInterval")?,
                maximum: span("maximumInterval")?,
            }
        }
        other => {
            return Err(DeclarationError::UnknownRetryStrategy(
                other.map(str::to_string),
            ));
        }
    };
    Ok(RetryPolicy {
        strategy,
        max_retry_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A relative app folder is taken from the current directory once, when loaded: a path
    /// joined to the root later (host.json's executable) means the same from any directory.
    /// (Tests run in the crate's folder; the reference app is two folders up.)
    #[test]
    fn a_relative_app_folder_is_loaded_as_an_absolute_root() {
        let relative = Path::new("../../function_app");
        let app = FunctionApp::load(relative).unwrap();
        assert!(app.root.is_absolute(), "{}", app.root.display());
        assert_eq!(app.root, std::env::current_dir().unwrap().join(relative));
        assert!(app.root.join("host.json").is_file());
        assert!(!app.functions.is_empty());
    }

    #[test]
    fn event_hub_trigger_defaults_follow_the_host() {
        let spec = FunctionSpec::from_json(
            "F",
            &json!({"bindings":[{"type":"eventHubTrigger","name":"ev","direction":"in","eventHubName":"h"}]}),
        )
        .unwrap();
        let t = spec.event_hub_trigger().unwrap();
        assert_eq!(t.cardinality, Cardinality::One);
        assert_eq!(t.data_type, DataType::Unset);
        assert_eq!(t.consumer_group, "$Default");
    }

    #[test]
    fn retry_policies_parse() {
        let spec = FunctionSpec::from_json(
            "F",
            &json!({"bindings":[{"type":"eventHubTrigger","name":"ev","direction":"in","eventHubName":"h","cardinality":"many","dataType":"string"}],
                    "retry":{"strategy":"exponentialBackoff","maxRetryCount":5,"minimumInterval":"00:00:01","maximumInterval":"00:00:30"}}),
        )
        .unwrap();
        assert_eq!(spec.retry.unwrap().max_retry_count, 5);
        assert!(
            FunctionSpec::from_json(
                "F",
                &json!({"bindings":[{"type":"eventHubTrigger","name":"ev","eventHubName":"h","dataType":"stream"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn bindings_beside_the_trigger_are_kept_with_their_settings() {
        let spec = FunctionSpec::from_json(
            "F",
            &json!({"bindings":[
                {"type":"eventHubTrigger","name":"ev","direction":"in","eventHubName":"h"},
                {"type":"eventHub","name":"alarms","direction":"out","eventHubName":"alarms","connection":"C"},
                {"type":"blob","name":"report","direction":"out","path":"reports/{rand-guid}.json","dataType":"binary"},
                {"type":"blob","name":"config","direction":"in","path":"config/app.json"}]}),
        )
        .unwrap();
        let outputs: Vec<&str> = spec.outputs().map(|b| b.name.as_str()).collect();
        assert_eq!(outputs, ["alarms", "report"]);
        assert_eq!(spec.bindings.len(), 3);
        assert!(spec.bindings[0].is("EVENTHUB"));
        assert_eq!(spec.bindings[0].setting("connection"), Some("C"));
        assert!(spec.bindings[1].is_binary() && !spec.bindings[0].is_binary());
        assert_eq!(
            spec.bindings[0],
            BindingSpec::event_hub_output("alarms", "alarms", "C")
        );
        let no_direction = FunctionSpec::from_json(
            "F",
            &json!({"bindings":[{"type":"eventHubTrigger","name":"ev","eventHubName":"h"},{"type":"blob","name":"b","path":"c/n"}]}),
        );
        let error = no_direction.unwrap_err();
        assert_eq!(
            error,
            DeclarationError::BadDirection {
                kind: "blob".into(),
                name: "b".into(),
                direction: None
            }
        );
        assert!(error.to_string().contains("blob binding 'b'"), "{error}");
    }
}
