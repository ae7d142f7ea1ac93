//! The app's files and settings as the Functions host reads them, for every reader of an app
//! folder (`emulate`, `invoke`, `rehearse`, the test kit and the handler itself):
//!
//! - JSON as Newtonsoft reads it: `//` and `/* */` comments and trailing commas are skipped;
//! - app settings: local.settings.json `Values`, the process environment winning (Core Tools
//!   skips a local setting the environment already defines); names are case-insensitive, as
//!   .NET's configuration is;
//! - host.json overridden by app settings named `AzureFunctionsJobHost__` plus the path
//!   (`__` or `:` between its parts), as the host's configuration layers them;
//! - host.json keys in any case, read under the names the host documents;
//! - a function turned off by `AzureWebJobs.{name}.Disabled` (or `AzureWebJobs_{name}_Disabled`,
//!   where a dot cannot be in a variable name) set to `true` or `1`.
//!
//! Pure but for [`app_settings`], which reads the file and the environment.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// The configuration section host.json is read into: an app setting named after it, then
/// `__` (or `:`) and a path, overrides that host.json value.
pub const JOB_HOST_SECTION: &str = "AzureFunctionsJobHost";

/// JSON as the host's Newtonsoft reader takes it: comments and trailing commas skipped.
pub fn parse_json(text: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str(&without_comments(text))
}

/// `text` with its comments and trailing commas blanked out (each replaced by spaces, line
/// breaks kept), so a parse error still names the line and column of the file.
pub fn without_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    // Where the last comma outside strings was written, while only blanks follow it.
    let mut open_comma: Option<usize> = None;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                open_comma = None;
                out.push(b);
                i += 1;
                while i < bytes.len() {
                    let c = bytes[i];
                    out.push(c);
                    i += 1;
                    if c == b'\\' && i < bytes.len() {
                        out.push(bytes[i]);
                        i += 1;
                    } else if c == b'"' {
                        break;
                    }
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |e| i + 2 + e + 2);
                while i < end {
                    out.push(if bytes[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
                continue;
            }
            b',' => open_comma = Some(out.len()),
            b'}' | b']' => {
                if let Some(at) = open_comma.take() {
                    out[at] = b' ';
                }
            }
            b' ' | b'\t' | b'\r' | b'\n' => {}
            _ => open_comma = None,
        }
        out.push(b);
        i += 1;
    }
    // Only ASCII bytes were replaced, by ASCII: still UTF-8.
    String::from_utf8(out).expect("blanking ASCII keeps UTF-8")
}

/// The `Values` of a local.settings.json text (numbers and booleans as their JSON text, nulls
/// left out), or what is wrong with it.
pub fn local_settings_values(text: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
    let json = parse_json(text)?;
    let mut values = BTreeMap::new();
    if let Some(map) = json.get("Values").and_then(Value::as_object) {
        for (k, v) in map {
            let v = match v {
                Value::String(s) => s.clone(),
                Value::Null => continue,
                other => other.to_string(),
            };
            values.insert(k.clone(), v);
        }
    }
    Ok(values)
}

/// Why an app's settings cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SettingsFileError {
    /// local.settings.json exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// local.settings.json is not JSON.
    #[error("{path} is not valid JSON: {source}")]
    BadJson {
        /// The file.
        path: std::path::PathBuf,
        /// The parser's error.
        source: serde_json::Error,
    },
}

/// The app settings of the app in `root`: its local.settings.json `Values`, the process
/// environment winning.
pub fn app_settings(root: &Path) -> Result<BTreeMap<String, String>, SettingsFileError> {
    let path = root.join("local.settings.json");
    let mut values = BTreeMap::new();
    if path.is_file() {
        let text = std::fs::read_to_string(&path).map_err(|source| SettingsFileError::Read {
            path: path.clone(),
            source,
        })?;
        values = local_settings_values(&text)
            .map_err(|source| SettingsFileError::BadJson { path, source })?;
    }
    for (k, v) in std::env::vars() {
        values.insert(k, v);
    }
    Ok(values)
}

/// A setting by name, as .NET's configuration finds it: the exact name first, then any case.
pub fn setting<'a>(settings: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    settings
        .get(name)
        .or_else(|| {
            settings
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .map(String::as_str)
}

/// Whether a setting's value turns a switch on (`IsSettingEnabled`: `1` or `true`, any case).
pub fn is_enabled(value: &str) -> bool {
    value == "1" || value.eq_ignore_ascii_case("true")
}

/// The app setting that disables function `name`, if one does.
pub fn disabling_setting(name: &str, settings: &BTreeMap<String, String>) -> Option<String> {
    [
        format!("AzureWebJobs.{name}.Disabled"),
        format!("AzureWebJobs_{name}_Disabled"),
    ]
    .into_iter()
    .find(|key| setting(settings, key).is_some_and(is_enabled))
}

/// Applies every `AzureFunctionsJobHost__…` setting to host.json: the value, as text, at the
/// path the setting names (`__` or `:` between parts, any case), objects made where missing.
/// Returns the settings applied, in order.
pub fn apply_overrides(host: &mut Value, settings: &BTreeMap<String, String>) -> Vec<String> {
    let mut applied = Vec::new();
    for (name, value) in settings {
        let Some(prefix) = name.get(..JOB_HOST_SECTION.len()) else {
            continue;
        };
        let rest = &name[JOB_HOST_SECTION.len()..];
        if !prefix.eq_ignore_ascii_case(JOB_HOST_SECTION)
            || !(rest.starts_with("__") || rest.starts_with(':'))
        {
            continue;
        }
        let path: Vec<&str> = rest
            .split("__")
            .flat_map(|p| p.split(':'))
            .filter(|p| !p.is_empty())
            .collect();
        if path.is_empty() {
            continue;
        }
        set_at(host, &path, Value::String(value.clone()));
        applied.push(name.clone());
    }
    applied
}

fn set_at(node: &mut Value, path: &[&str], value: Value) {
    let (first, rest) = path.split_first().expect("a non-empty path");
    if let (Value::Array(items), Ok(index)) = (&mut *node, first.parse::<usize>())
        && index < items.len()
    {
        if rest.is_empty() {
            items[index] = value;
        } else {
            set_at(&mut items[index], rest, value);
        }
        return;
    }
    if !node.is_object() {
        *node = Value::Object(Default::default());
    }
    let map = node.as_object_mut().expect("an object");
    let key = map
        .keys()
        .find(|k| k.eq_ignore_ascii_case(first))
        .cloned()
        .unwrap_or_else(|| first.to_string());
    if rest.is_empty() {
        map.insert(key, value);
    } else {
        set_at(map.entry(key).or_insert(Value::Null), rest, value);
    }
}

/// The host.json names hubhost reads, as the host documents them: a key written in another
/// case is read under this name (.NET's configuration ignores case).
const HOST_JSON_KEYS: &[&str] = &[
    "version",
    "functionTimeout",
    "functions",
    "customHandler",
    "httpWorker",
    "description",
    "defaultExecutablePath",
    "defaultWorkerPath",
    "workingDirectory",
    "arguments",
    "workerArguments",
    "enableForwardingHttpRequest",
    "enableProxyingHttpRequest",
    "initializationTimeout",
    "port",
    "extensions",
    "eventHubs",
    "maxEventBatchSize",
    "minEventBatchSize",
    "maxWaitTime",
    "batchCheckpointFrequency",
    "enableCheckpointing",
    "prefetchCount",
    "prefetchSizeInBytes",
    "targetUnprocessedEventThreshold",
    "partitionOwnershipExpirationInterval",
    "loadBalancingUpdateInterval",
    "initialOffsetOptions",
    "type",
    "enqueuedTimeUtc",
    "transportType",
    "clientRetryOptions",
    "trackLastEnqueuedEventProperties",
    "eventProcessorOptions",
    "maxBatchSize",
    "receiveTimeout",
    "partitionManagerOptions",
    "leaseDuration",
    "renewInterval",
    "extensionBundle",
    "http",
    "routePrefix",
    "queues",
    "messageEncoding",
    "id",
    "retry",
    "strategy",
    "maxRetryCount",
    "delayInterval",
    "minimumInterval",
    "maximumInterval",
];

/// Renames every key of `host` that matches a documented name in another case to that name.
/// Where two keys of one object differ only in case, the later one wins, as the last value of
/// a configuration key does.
pub fn canonical_keys(host: &mut Value) {
    match host {
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut value) in entries {
                canonical_keys(&mut value);
                let key = HOST_JSON_KEYS
                    .iter()
                    .find(|k| k.eq_ignore_ascii_case(&key))
                    .map_or(key, |k| k.to_string());
                map.insert(key, value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(canonical_keys),
        _ => {}
    }
}

/// host.json's `extensions.eventHubs` names of the extension's versions 3 and 4, which the
/// current extension (version 5 and later, what extension bundle 4 brings) does not read, each
/// with the name it reads instead.
const LEGACY_EVENT_HUBS_KEYS: &[(&str, &str)] = &[
    ("eventProcessorOptions/maxBatchSize", "maxEventBatchSize"),
    ("eventProcessorOptions/prefetchCount", "prefetchCount"),
    ("eventProcessorOptions/receiveTimeout", "maxWaitTime"),
    (
        "partitionManagerOptions/leaseDuration",
        "partitionOwnershipExpirationInterval",
    ),
    (
        "partitionManagerOptions/renewInterval",
        "loadBalancingUpdateInterval",
    ),
];

/// One line for each older extension's name in host.json (read after [`canonical_keys`]).
pub fn legacy_host_json_keys(host: &Value) -> Vec<String> {
    LEGACY_EVENT_HUBS_KEYS
        .iter()
        .filter(|(old, _)| {
            host.pointer(&format!("/extensions/eventHubs/{old}"))
                .is_some()
        })
        .map(|(old, new)| {
            format!(
                "host.json extensions.eventHubs.{}: a name of the Event Hubs extension's versions 3 and 4, ignored by the current one; use extensions.eventHubs.{new}",
                old.replace('/', ".")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn comments_and_trailing_commas_are_skipped_as_newtonsoft_skips_them() {
        let text = "{\n  // the version\n  \"version\": \"2.0\", /* a block\n comment */\n  \"url\": \"http://x//y\",\n  \"list\": [1, 2, ],\n  \"s\": \"a /* b */ c\\\" // d\",\n}\n";
        let value = parse_json(text).unwrap();
        assert_eq!(
            value,
            json!({"version": "2.0", "url": "http://x//y", "list": [1, 2], "s": "a /* b */ c\" // d"})
        );
        // Errors still point at the right line.
        let error = parse_json("{\n// c\n\"a\": }").unwrap_err();
        assert_eq!(error.line(), 3, "{error}");
    }

    #[test]
    fn job_host_settings_override_host_json_at_their_path_in_any_case() {
        let mut host =
            json!({"version": "2.0", "extensions": {"eventHubs": {"maxEventBatchSize": 5}}});
        let applied = apply_overrides(
            &mut host,
            &settings(&[
                (
                    "AzureFunctionsJobHost__extensions__EventHubs__maxEventBatchSize",
                    "2",
                ),
                ("azurefunctionsjobhost__functionTimeout", "00:00:05"),
                (
                    "AzureFunctionsJobHost:extensions:eventHubs:prefetchCount",
                    "7",
                ),
                ("Other", "x"),
            ]),
        );
        assert_eq!(applied.len(), 3, "{applied:?}");
        assert_eq!(host["extensions"]["eventHubs"]["maxEventBatchSize"], "2");
        assert_eq!(host["extensions"]["eventHubs"]["prefetchCount"], "7");
        assert_eq!(host["functionTimeout"], "00:00:05");
    }

    #[test]
    fn keys_in_another_case_are_read_under_the_documented_name() {
        let mut host =
            json!({"Extensions": {"EVENTHUBS": {"MaxEventBatchSize": "10", "myKey": 1}}});
        canonical_keys(&mut host);
        assert_eq!(
            host,
            json!({"extensions": {"eventHubs": {"maxEventBatchSize": "10", "myKey": 1}}})
        );
    }

    #[test]
    fn a_function_is_disabled_by_either_spelling_of_its_setting() {
        let dotted = settings(&[("AzureWebJobs.Alpha.Disabled", "true")]);
        assert_eq!(
            disabling_setting("Alpha", &dotted).as_deref(),
            Some("AzureWebJobs.Alpha.Disabled")
        );
        assert_eq!(disabling_setting("Beta", &dotted), None);
        let underscored = settings(&[("AzureWebJobs_alpha_Disabled", "1")]);
        assert!(disabling_setting("Alpha", &underscored).is_some());
        let off = settings(&[("AzureWebJobs.Alpha.Disabled", "false")]);
        assert_eq!(disabling_setting("Alpha", &off), None);
    }
}
