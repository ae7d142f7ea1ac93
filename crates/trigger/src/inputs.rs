//! The values of a function's input bindings — a blob read before the call, say — as the
//! Functions host puts them in the request's `Data` beside the trigger's value.
//!
//! The host writes each value as it writes every input (`GetHttpScriptInvocationContextValue`
//! in the Functions host): an input of `dataType: string` (the default) is the string the
//! binding read, serialized once more, so its JSON text in a JSON string (`"\"text\""`); one of
//! `dataType: binary` is the bytes in base64; an input with no value (a blob that does not
//! exist) is the text `null`. [`InputValues`] keeps them as they came, and reads them back.

use base64::Engine;
use serde_json::Value;

/// The input bindings' values of one invocation, by binding name, as the host sent them.
///
/// ```
/// use hubhost_trigger::inputs::InputValues;
///
/// let mut inputs = InputValues::default();
/// inputs.set_text("reference", Some(r#"{"limit": 30}"#));
/// inputs.set_bytes("image", None);
/// assert_eq!(inputs.text("reference")?.as_deref(), Some(r#"{"limit": 30}"#));
/// let limit: serde_json::Value = inputs.json("reference")?.unwrap();
/// assert_eq!(limit["limit"], 30);
/// assert_eq!(inputs.bytes("image")?, None);
/// # Ok::<(), hubhost_trigger::inputs::InputError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct InputValues {
    values: Vec<(String, Value)>,
}

/// Why an input's value cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The request carries no input of that name.
    #[error("no input binding named '{name}' in the request (it has: {})", found.join(", "))]
    NoSuchInput {
        /// The name asked for.
        name: String,
        /// The names the request has.
        found: Vec<String>,
    },
    /// A `dataType: string` input whose value is not the JSON text of a string.
    #[error("input '{name}' is not a string input's value (is its dataType binary?)")]
    NotText {
        /// The input's binding name.
        name: String,
    },
    /// A `dataType: binary` input whose value is not base64.
    #[error("input '{name}' is not base64 (is its dataType string?)")]
    NotBase64 {
        /// The input's binding name.
        name: String,
    },
    /// The input's text is not the JSON asked for.
    #[error("input '{name}' is not the JSON expected: {source}")]
    NotJson {
        /// The input's binding name.
        name: String,
        /// What serde_json said.
        source: serde_json::Error,
    },
}

/// The host's text for an input without a value (`JsonConvert.SerializeObject(null)`).
const NO_VALUE: &str = "null";

impl InputValues {
    /// The values as the request carried them, by binding name.
    pub fn from_wire(values: Vec<(String, Value)>) -> Self {
        InputValues { values }
    }

    /// The inputs of a request's `Data` object: every member but the trigger's own
    /// (`trigger`, matched ignoring case as the host's names are).
    pub fn from_data(data: Option<&serde_json::Map<String, Value>>, trigger: &str) -> Self {
        let values = data
            .into_iter()
            .flatten()
            .filter(|(name, _)| !name.eq_ignore_ascii_case(trigger))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        InputValues { values }
    }

    /// The values as the host writes them into the request's `Data`.
    pub fn wire(&self) -> &[(String, Value)] {
        &self.values
    }

    /// Whether the invocation has no input bindings.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The inputs' binding names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.iter().map(|(name, _)| name.as_str())
    }

    /// Sets a `dataType: string` input as the host sends it: `None` for no value (a missing
    /// blob).
    pub fn set_text(&mut self, name: &str, text: Option<&str>) -> &mut Self {
        let wire = match text {
            Some(text) => Value::String(Value::String(text.to_string()).to_string()),
            None => Value::String(NO_VALUE.into()),
        };
        self.set(name, wire)
    }

    /// Sets a `dataType: binary` input as the host sends it: `None` for no value.
    pub fn set_bytes(&mut self, name: &str, bytes: Option<&[u8]>) -> &mut Self {
        let wire = match bytes {
            Some(bytes) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            None => Value::String(NO_VALUE.into()),
        };
        self.set(name, wire)
    }

    fn set(&mut self, name: &str, wire: Value) -> &mut Self {
        match self.values.iter_mut().find(|(n, _)| n == name) {
            Some(entry) => entry.1 = wire,
            None => self.values.push((name.to_string(), wire)),
        }
        self
    }

    /// The value as sent, by exact name, then ignoring case (the host's names are the
    /// function.json's).
    fn wire_value(&self, name: &str) -> Result<&Value, InputError> {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .or_else(|| {
                self.values
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
            })
            .map(|(_, v)| v)
            .ok_or_else(|| InputError::NoSuchInput {
                name: name.to_string(),
                found: self.values.iter().map(|(n, _)| n.clone()).collect(),
            })
    }

    /// A `dataType: string` input's text (the default dataType); `None` when it has no value.
    pub fn text(&self, name: &str) -> Result<Option<String>, InputError> {
        let not_text = || InputError::NotText {
            name: name.to_string(),
        };
        match self.wire_value(name)? {
            Value::String(wire) if wire == NO_VALUE => Ok(None),
            Value::String(wire) => match serde_json::from_str::<Value>(wire) {
                Ok(Value::String(text)) => Ok(Some(text)),
                _ => Err(not_text()),
            },
            // Hand-written requests may put the text itself.
            _ => Err(not_text()),
        }
    }

    /// A `dataType: binary` input's bytes; `None` when it has no value.
    pub fn bytes(&self, name: &str) -> Result<Option<Vec<u8>>, InputError> {
        let not_base64 = || InputError::NotBase64 {
            name: name.to_string(),
        };
        match self.wire_value(name)? {
            Value::String(wire) if wire == NO_VALUE => Ok(None),
            Value::String(wire) => base64::engine::general_purpose::STANDARD
                .decode(wire)
                .map(Some)
                .map_err(|_| not_base64()),
            _ => Err(not_base64()),
        }
    }

    /// A `dataType: string` input's text parsed as JSON into `T`; `None` when it has no value.
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, InputError> {
        self.text(name)?
            .map(|text| {
                serde_json::from_str(&text).map_err(|source| InputError::NotJson {
                    name: name.to_string(),
                    source,
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_and_read_as_the_host_writes_them() {
        let mut inputs = InputValues::default();
        inputs
            .set_text("s", Some("a \"quoted\" line"))
            .set_bytes("b", Some(&[0, 255]))
            .set_text("missing", None);
        assert_eq!(
            inputs.wire(),
            [
                ("s".to_string(), Value::from(r#""a \"quoted\" line""#)),
                ("b".to_string(), Value::from("AP8=")),
                ("missing".to_string(), Value::from("null")),
            ]
        );
        assert_eq!(inputs.text("S").unwrap().unwrap(), "a \"quoted\" line");
        assert_eq!(inputs.bytes("b").unwrap().unwrap(), [0, 255]);
        assert_eq!(inputs.text("missing").unwrap(), None);
        assert!(matches!(inputs.text("b"), Err(InputError::NotText { .. })));
        assert!(matches!(
            inputs.bytes("s"),
            Err(InputError::NotBase64 { .. })
        ));
        let e = inputs.text("other").unwrap_err();
        assert!(e.to_string().contains("it has: s, b, missing"), "{e}");
        // The text "null" itself is a value: written as JSON text, it is "\"null\"".
        inputs.set_text("s", Some("null"));
        assert_eq!(inputs.text("s").unwrap().as_deref(), Some("null"));
    }
}
