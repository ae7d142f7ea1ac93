//! The .NET forms the Functions host gives values before it writes them with Newtonsoft.Json.
//!
//! - [`OrderedJson`]: a parsed JSON value that keeps its objects' member order, as
//!   Newtonsoft's `JToken` does (serde_json's `Value` sorts them). The host re-serializes a
//!   batch's bodies from such values when the trigger has no `dataType`.
//! - [`dotnet_string`]: a JSON scalar as the host's `(string)JToken` cast makes it, which is
//!   how body fields become binding data (`"42"`, `"True"`, a date in .NET's invariant text).
//!
//! Pure functions, shared by the encoder's two cardinalities.

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Number, Value};

use hubhost_trigger::time::parse_host_time;

/// A JSON value with its objects' members in the order they were written.
#[derive(Debug, Clone, PartialEq)]
pub enum OrderedJson {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as serde_json reads it.
    Number(Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<OrderedJson>),
    /// Members in document order; a repeated name replaces the earlier value in its place.
    Object(Vec<(String, OrderedJson)>),
}

impl Serialize for OrderedJson {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            OrderedJson::Null => serializer.serialize_unit(),
            OrderedJson::Bool(b) => serializer.serialize_bool(*b),
            OrderedJson::Number(n) => n.serialize(serializer),
            OrderedJson::String(s) => serializer.serialize_str(s),
            OrderedJson::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            OrderedJson::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (name, value) in members {
                    map.serialize_entry(name, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for OrderedJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(OrderedVisitor)
    }
}

struct OrderedVisitor;

impl<'de> Visitor<'de> for OrderedVisitor {
    type Value = OrderedJson;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<OrderedJson, E> {
        Ok(OrderedJson::Number(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<OrderedJson, E> {
        Ok(Number::from_f64(n).map_or(OrderedJson::Null, OrderedJson::Number))
    }
    fn visit_str<E>(self, s: &str) -> Result<OrderedJson, E> {
        Ok(OrderedJson::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<OrderedJson, E> {
        Ok(OrderedJson::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<OrderedJson, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(OrderedJson::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedJson, A::Error> {
        let mut members: Vec<(String, OrderedJson)> = Vec::new();
        while let Some((name, value)) = map.next_entry::<String, OrderedJson>()? {
            match members.iter_mut().find(|(n, _)| *n == name) {
                Some(member) => member.1 = value,
                None => members.push((name, value)),
            }
        }
        Ok(OrderedJson::Object(members))
    }
}

/// A JSON scalar as .NET text, as the host's `(string)JToken` gives it: a string as it is
/// (unless Newtonsoft read it as a date: then `MM/dd/yyyy HH:mm:ss`, at UTC), a whole number
/// as its digits, a fraction as .NET's shortest round-trip text (`1.5`, `1E+21`), `True` or
/// `False`. `None` for null, arrays and objects.
///
/// ```
/// use hubhost_functions::contract::newtonsoft::dotnet_string;
/// use serde_json::json;
///
/// assert_eq!(dotnet_string(&json!(42)).as_deref(), Some("42"));
/// assert_eq!(dotnet_string(&json!(true)).as_deref(), Some("True"));
/// assert_eq!(dotnet_string(&json!(2.0)).as_deref(), Some("2"));
/// assert_eq!(dotnet_string(&json!("2024-05-01T12:00:00.5Z")).as_deref(), Some("05/01/2024 12:00:00"));
/// assert_eq!(dotnet_string(&json!(null)), None);
/// ```
pub fn dotnet_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(match newtonsoft_date(s) {
            Some(date) => date,
            None => s.clone(),
        }),
        Value::Bool(true) => Some("True".into()),
        Value::Bool(false) => Some("False".into()),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            (None, None, Some(f)) => dotnet_double(f),
            _ => n.to_string(),
        }),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// .NET's shortest round-trip text of a `double` (.NET Core 3.0 and later): plain digits for
/// decimal exponents from -4 to 14, else `d.dddE+XX`.
fn dotnet_double(f: f64) -> String {
    if f == f.trunc() && f.abs() < 1e15 {
        return format!("{f:.0}");
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("Rust's {:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("an integer exponent");
    if (-4..15).contains(&exponent) {
        f.to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}E{sign}{:02}", exponent.abs())
    }
}

/// A string Newtonsoft's reader takes for a date (`DateParseHandling.DateTime`: ISO 8601 with
/// a time), as .NET's invariant `ToString()` then writes it. Newtonsoft converts a time with
/// an offset to local time, which is UTC on Azure's servers.
fn newtonsoft_date(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let iso_shaped = b.len() >= 19
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':';
    if !iso_shaped {
        return None;
    }
    let t = parse_host_time(s)?;
    Some(t.format("%m/%d/%Y %H:%M:%S").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_keep_the_order_they_were_written_in() {
        let text = r#"{"z":1,"a":{"y":[true,null],"b":"x"},"m":1.5,"z":2}"#;
        let parsed: OrderedJson = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::to_string(&parsed).unwrap(),
            r#"{"z":2,"a":{"y":[true,null],"b":"x"},"m":1.5}"#
        );
    }

    #[test]
    fn doubles_read_as_dotnet_writes_them() {
        for (f, text) in [
            (1.5, "1.5"),
            (-0.25, "-0.25"),
            (1e21, "1E+21"),
            (1.0e15, "1E+15"),
            (123456789012345.0, "123456789012345"),
            (0.0001, "0.0001"),
            (0.00001, "1E-05"),
            (1.25e-7, "1.25E-07"),
        ] {
            assert_eq!(dotnet_double(f), text, "{f}");
        }
    }

    #[test]
    fn only_iso_dates_with_a_time_are_read_as_dates() {
        let date = |s: &str| dotnet_string(&Value::String(s.into()));
        assert_eq!(
            date("2024-05-01T12:00:00").as_deref(),
            Some("05/01/2024 12:00:00")
        );
        assert_eq!(
            date("2024-05-01T14:00:00+02:00").as_deref(),
            Some("05/01/2024 12:00:00")
        );
        assert_eq!(date("2024-05-01").as_deref(), Some("2024-05-01"));
        assert_eq!(date("h-1").as_deref(), Some("h-1"));
    }
}
