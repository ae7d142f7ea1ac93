//! A binding setting holding binding expressions — a blob's `path`, a table's keys — as the
//! WebJobs SDK's `BindingTemplate` resolves them:
//! - `{rand-guid}` and `{sys.randguid}`: a new GUID each time;
//! - `{DateTime}` and `{sys.utcnow}`: the time, `yyyy-MM-ddTHH-mm-ssZ` (the SDK's default form
//!   of a `DateTime`, `BindingDataPathHelper`);
//! - any other `{name}` or `{name.member…}`: the trigger's binding data (`{PartitionKey}`,
//!   `{PartitionContext.PartitionId}`, a JSON body's `{deviceId}`, `{sys.MethodName}`), names
//!   in any case; a string as it is, a number as its digits, a boolean `True`/`False`, an object
//!   or an array as nothing (the SDK writes only primitives); a name the data lacks fails the
//!   invocation, with the SDK's message.
//!
//! `%Setting%` names are expanded before, from the app settings. Output bindings take only the
//! expressions that need no trigger data ([`Template::parse`]); inputs take all
//! ([`Template::parse_with_trigger_data`]). Format specifiers (`{DateTime:yyyy}`) are refused at
//! start: .NET's format strings are not reimplemented here.

use chrono::{DateTime, Utc};
use serde_json::Value;

use hubhost_functions::contract::encode::{BindingData, expression_datetime};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("an unclosed '{{'")]
    Unclosed,
    #[error(
        "{{{expression}}}, which hubhost emulate does not resolve in an output (it resolves {{rand-guid}}, {{sys.randguid}}, {{DateTime}}, {{sys.utcnow}} and %Setting%)"
    )]
    Unresolved { expression: String },
    #[error(
        "{{{expression}}}: format specifiers in binding expressions are not resolved by hubhost emulate"
    )]
    Format { expression: String },
    #[error("{{{expression}}} is not a binding expression")]
    Invalid { expression: String },
    /// At an invocation: the trigger's binding data has no such value.
    #[error("No value for named parameter '{parameter}'.")]
    NoValue { parameter: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Guid,
    /// `{DateTime}` and `{sys.utcnow}`.
    Now,
    /// A value of the trigger's binding data: its name, then members.
    Data(Vec<String>),
}

impl Template {
    /// A template with only the expressions that need no trigger data (an output's).
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let template = Self::parse_with_trigger_data(text)?;
        if let Some(Part::Data(path)) = template.parts.iter().find(|p| matches!(p, Part::Data(_))) {
            return Err(TemplateError::Unresolved {
                expression: path.join("."),
            });
        }
        Ok(template)
    }

    /// A template whose expressions may name the trigger's binding data (an input's).
    pub fn parse_with_trigger_data(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or(TemplateError::Unclosed)?;
            let expression = &rest[open + 1..open + close];
            parts.push(expression_part(expression)?);
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// The text for one use of a template without trigger data ([`Template::parse`]).
    pub fn render(&self, now: DateTime<Utc>, guid: uuid::Uuid) -> String {
        self.render_with(now, guid, &BindingData::default())
            .unwrap_or_default()
    }

    /// The text for one use, with the trigger's binding data.
    pub fn render_with(
        &self,
        now: DateTime<Utc>,
        guid: uuid::Uuid,
        data: &BindingData,
    ) -> Result<String, TemplateError> {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                Part::Guid => text.push_str(&guid.hyphenated().to_string()),
                Part::Now => text.push_str(&expression_datetime(&now)),
                Part::Data(path) => text.push_str(&resolve(path, data)?),
            }
        }
        Ok(text)
    }
}

fn expression_part(expression: &str) -> Result<Part, TemplateError> {
    let owned = || expression.to_string();
    let lower = expression.to_ascii_lowercase();
    match lower.as_str() {
        "rand-guid" | "sys.randguid" => return Ok(Part::Guid),
        "datetime" | "sys.utcnow" => return Ok(Part::Now),
        _ => {}
    }
    if expression.contains(':') {
        return Err(TemplateError::Format {
            expression: owned(),
        });
    }
    let path: Vec<String> = expression.split('.').map(str::to_string).collect();
    // The SDK's `IsValidIdentifier`: letters, digits, `_`, `-` and `.`; the first part no `-`.
    let valid = path.iter().all(|p| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
    }) && !path[0].contains('-');
    if !valid {
        return Err(TemplateError::Invalid {
            expression: owned(),
        });
    }
    Ok(Part::Data(path))
}

/// A binding-data value by name and members, as `BindingDataPathHelper` writes it.
fn resolve(path: &[String], data: &BindingData) -> Result<String, TemplateError> {
    let no_value = || TemplateError::NoValue {
        parameter: path[0].clone(),
    };
    let mut current = data.get(&path[0]).ok_or_else(no_value)?;
    for member in &path[1..] {
        current = current
            .as_object()
            .and_then(|object| {
                object.get(member).or_else(|| {
                    object
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(member))
                        .map(|(_, v)| v)
                })
            })
            .ok_or_else(|| TemplateError::NoValue {
                parameter: path.join("."),
            })?;
    }
    Ok(match current {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Null | Value::Array(_) | Value::Object(_) => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-12-02T21:05:09.123Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn trigger_data_is_resolved_as_the_sdk_writes_it() {
        let mut data = BindingData::default();
        data.set("PartitionKey", json!("home-7"));
        data.set("SequenceNumber", json!(41));
        data.set("PartitionContext", json!({"PartitionId": "3"}));
        data.set("flag", json!(true));
        data.set("nested", json!({"a": [1]}));
        let guid = uuid::Uuid::from_u128(1);
        let render = |text: &str| {
            Template::parse_with_trigger_data(text)
                .unwrap()
                .render_with(at(), guid, &data)
        };
        assert_eq!(
            render("refs/{partitionkey}-{SequenceNumber}.json").unwrap(),
            "refs/home-7-41.json"
        );
        assert_eq!(render("p/{PartitionContext.partitionId}").unwrap(), "p/3");
        assert_eq!(render("x/{flag}{nested}{nested.a}").unwrap(), "x/True");
        assert_eq!(
            render("t/{sys.utcnow}/{DateTime}/{rand-guid}").unwrap(),
            "t/2026-12-02T21-05-09Z/2026-12-02T21-05-09Z/00000000-0000-0000-0000-000000000001"
        );
        let e = render("refs/{deviceId}.json").unwrap_err();
        assert_eq!(e.to_string(), "No value for named parameter 'deviceId'.");
        assert!(matches!(
            render("refs/{PartitionContext.Owner}"),
            Err(TemplateError::NoValue { parameter }) if parameter == "PartitionContext.Owner"
        ));
    }

    #[test]
    fn what_cannot_be_resolved_is_refused_at_parse() {
        assert!(matches!(
            Template::parse("r/{PartitionKey}"),
            Err(TemplateError::Unresolved { expression }) if expression == "PartitionKey"
        ));
        assert!(matches!(
            Template::parse_with_trigger_data("r/{DateTime:yyyy}"),
            Err(TemplateError::Format { .. })
        ));
        assert!(matches!(
            Template::parse_with_trigger_data("r/{a..b}"),
            Err(TemplateError::Invalid { .. })
        ));
        assert!(matches!(
            Template::parse_with_trigger_data("r/{-a}"),
            Err(TemplateError::Invalid { .. })
        ));
        assert_eq!(
            Template::parse_with_trigger_data("r/{open"),
            Err(TemplateError::Unclosed)
        );
    }
}
