//! A binding setting with the expressions that need no trigger data, as output bindings write
//! them in names and keys: `{rand-guid}` and `{sys.randguid}` (a new GUID each time),
//! `{DateTime}` (`yyyy-MM-ddTHH-mm-ssZ`) and `{sys.utcnow}` (RFC 3339). `%Setting%` names are
//! expanded before, from the app settings. Expressions that need the trigger's data
//! (`{PartitionKey}`, a body's fields) are refused, naming the expression.

use chrono::{DateTime, Utc};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("an unclosed '{{'")]
    Unclosed,
    #[error(
        "{{{expression}}}, which hubhost emulate does not resolve (it resolves {{rand-guid}}, {{sys.randguid}}, {{DateTime}}, {{sys.utcnow}} and %Setting%)"
    )]
    Unresolved { expression: String },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Guid,
    DateTime,
    UtcNow,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let close = rest[open..].find('}').ok_or(TemplateError::Unclosed)?;
            let expression = &rest[open + 1..open + close];
            parts.push(match expression.to_ascii_lowercase().as_str() {
                "rand-guid" | "sys.randguid" => Part::Guid,
                "datetime" => Part::DateTime,
                "sys.utcnow" => Part::UtcNow,
                _ => {
                    return Err(TemplateError::Unresolved {
                        expression: expression.to_string(),
                    });
                }
            });
            rest = &rest[open + close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// The text for one use.
    pub fn render(&self, now: DateTime<Utc>, guid: uuid::Uuid) -> String {
        let mut text = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => text.push_str(t),
                Part::Guid => text.push_str(&guid.hyphenated().to_string()),
                Part::DateTime => text.push_str(&now.format("%Y-%m-%dT%H-%M-%SZ").to_string()),
                Part::UtcNow => {
                    text.push_str(&now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                }
            }
        }
        text
    }
}
