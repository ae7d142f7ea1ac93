//! App settings as the host reads them: local.settings.json `Values`, overridden by the process
//! environment (so a test or a shell can point one instance elsewhere), and `%Name%`
//! expansion in function.json and host.json.

use std::collections::BTreeMap;
use std::path::Path;

use super::{EmulateError, LocalSettingsProblem};

/// App settings: local.settings.json `Values`, the process environment winning.
#[derive(Debug, Clone, Default)]
pub struct AppSettings {
    pub(super) values: BTreeMap<String, String>,
}

impl AppSettings {
    /// The app's settings, read as the host reads them
    /// ([`hubhost_functions::app_config::app_settings`]).
    pub fn load(app_root: &Path) -> Result<Self, EmulateError> {
        use hubhost_functions::app_config::SettingsFileError;
        let values =
            hubhost_functions::app_config::app_settings(app_root).map_err(|e| match e {
                SettingsFileError::Read { path, source } => EmulateError::Settings {
                    path,
                    problem: LocalSettingsProblem::Read(source),
                },
                SettingsFileError::BadJson { path, source } => EmulateError::Settings {
                    path,
                    problem: source.into(),
                },
            })?;
        Ok(AppSettings { values })
    }

    /// The `Values` of a local.settings.json text (numbers and booleans as their JSON text,
    /// nulls left out, comments skipped), or what is wrong with it.
    pub fn parse_values(text: &str) -> Result<BTreeMap<String, String>, serde_json::Error> {
        hubhost_functions::app_config::local_settings_values(text)
    }

    /// Every setting, by name.
    pub fn values(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        AppSettings {
            values: pairs
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    /// A setting, its name in any case (.NET's configuration ignores case).
    pub fn get(&self, name: &str) -> Option<String> {
        hubhost_functions::app_config::setting(&self.values, name).map(str::to_string)
    }

    /// Sets `name` to `value` (a test's or a simulation's own connection).
    pub fn set(&mut self, name: &str, value: &str) {
        self.values.insert(name.to_string(), value.to_string());
    }

    /// `%Name%` → the setting's value, as the host resolves binding expressions.
    pub fn expand(&self, text: &str) -> Result<String, ExpandError> {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find('%') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            let end = after.find('%').ok_or_else(|| ExpandError::Unclosed {
                text: text.to_string(),
            })?;
            let name = &after[..end];
            let value = self.get(name).ok_or_else(|| ExpandError::Unset {
                name: name.to_string(),
            })?;
            out.push_str(&value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// Why a `%Setting%` expression cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("unclosed %…% in \"{text}\"")]
    Unclosed { text: String },
    #[error("the app setting {name} (used as %{name}%) is not set")]
    Unset { name: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_expand_like_the_host() {
        let s = AppSettings::from_pairs([("EventHubName", "sensors"), ("X", "y")]);
        assert_eq!(s.expand("%EventHubName%").unwrap(), "sensors");
        assert_eq!(s.expand("a-%X%-%X%").unwrap(), "a-y-y");
        assert_eq!(s.expand("plain").unwrap(), "plain");
        assert_eq!(
            s.expand("%Missing%").unwrap_err(),
            ExpandError::Unset {
                name: "Missing".into()
            }
        );
        assert!(matches!(
            s.expand("%open").unwrap_err(),
            ExpandError::Unclosed { .. }
        ));
    }
}
