//! The home-security event schema: what one sensor reading looks like, how it is validated, and
//! which readings are alarms. Pure code, no I/O.
//!
//! One event body (UTF-8 JSON, ~250 bytes) is one reading:
//! ```json
//! {"homeId":"home-004217","sensorId":"front-door","type":"door","state":"open",
//!  "armed":true,"value":null,"battery":87,"ts":"2026-11-22T13:30:05.123Z"}
//! ```
//! - `homeId`, `sensorId`: 1–64 printable characters (required).
//! - `type`: `motion` | `door` | `window` | `glass_break` | `smoke` | `co` (required).
//! - `state`: per type — motion `motion`/`clear`; door and window `open`/`closed`;
//!   glass_break `ok`/`break`; smoke `ok`/`alarm`; co `ok`/`alarm` (required).
//! - `value`: number, optional (CO in ppm).
//! - `armed`: whether the home's alarm system was armed, optional (default false).
//! - `ts`: RFC 3339 reading time, optional; the event's enqueued time is used without it.
//! - Other fields (battery, firmware, …) are allowed and ignored.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorKind {
    Motion,
    Door,
    Window,
    GlassBreak,
    Smoke,
    Co,
}

impl SensorKind {
    pub const ALL: [SensorKind; 6] = [
        SensorKind::Motion,
        SensorKind::Door,
        SensorKind::Window,
        SensorKind::GlassBreak,
        SensorKind::Smoke,
        SensorKind::Co,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SensorKind::Motion => "motion",
            SensorKind::Door => "door",
            SensorKind::Window => "window",
            SensorKind::GlassBreak => "glass_break",
            SensorKind::Smoke => "smoke",
            SensorKind::Co => "co",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        SensorKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The states a sensor of this kind reports; the first is the quiet one.
    pub fn states(self) -> [&'static str; 2] {
        match self {
            SensorKind::Motion => ["clear", "motion"],
            SensorKind::Door | SensorKind::Window => ["closed", "open"],
            SensorKind::GlassBreak => ["ok", "break"],
            SensorKind::Smoke | SensorKind::Co => ["ok", "alarm"],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmKind {
    /// A door, window or motion sensor triggered while the system was armed.
    Intrusion,
    GlassBreak,
    Smoke,
    CarbonMonoxide,
}

impl AlarmKind {
    pub const ALL: [AlarmKind; 4] = [
        AlarmKind::Intrusion,
        AlarmKind::GlassBreak,
        AlarmKind::Smoke,
        AlarmKind::CarbonMonoxide,
    ];

    /// Its place in [`AlarmKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Which alarms an operator must see first (0 first): fire and carbon monoxide threaten
    /// lives, a broken window is a break-in under way, and an armed door, window or motion
    /// sensor is the most frequent and the most often a false alarm — alarm-monitoring centres
    /// queue them in this order.
    pub fn urgency(self) -> u8 {
        match self {
            AlarmKind::Smoke | AlarmKind::CarbonMonoxide => 0,
            AlarmKind::GlassBreak => 1,
            AlarmKind::Intrusion => 2,
        }
    }
}

/// CO level at which detectors alarm (UL 2034's lowest alarm threshold).
pub const CO_ALARM_PPM: f64 = 70.0;

/// A validated reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub home_id: String,
    pub sensor_id: String,
    pub kind: SensorKind,
    pub state: &'static str,
    pub value: Option<f64>,
    pub armed: bool,
    pub time: DateTime<Utc>,
    /// When the event hub took the event in (its `x-opt-enqueued-time`), when the batch says.
    pub enqueued: Option<DateTime<Utc>>,
}

impl Reading {
    pub fn alarm(&self) -> Option<AlarmKind> {
        match self.kind {
            SensorKind::Door | SensorKind::Window if self.armed && self.state == "open" => {
                Some(AlarmKind::Intrusion)
            }
            SensorKind::Motion if self.armed && self.state == "motion" => {
                Some(AlarmKind::Intrusion)
            }
            SensorKind::GlassBreak if self.state == "break" => Some(AlarmKind::GlassBreak),
            SensorKind::Smoke if self.state == "alarm" => Some(AlarmKind::Smoke),
            SensorKind::Co
                if self.state == "alarm" || self.value.is_some_and(|v| v >= CO_ALARM_PPM) =>
            {
                Some(AlarmKind::CarbonMonoxide)
            }
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct RawReading<'a> {
    #[serde(rename = "homeId")]
    home_id: Option<String>,
    #[serde(rename = "sensorId")]
    sensor_id: Option<String>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow)]
    state: Option<std::borrow::Cow<'a, str>>,
    value: Option<f64>,
    armed: Option<bool>,
    #[serde(borrow)]
    ts: Option<std::borrow::Cow<'a, str>>,
}

/// Why an event is poison: it will never parse, however often it is retried.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoisonReason {
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    #[error("field '{0}' is missing")]
    Missing(&'static str),
    #[error("field '{field}' is invalid: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
}

fn identifier(field: &'static str, value: Option<String>) -> Result<String, PoisonReason> {
    let value = value.ok_or(PoisonReason::Missing(field))?;
    if value.is_empty() || value.chars().count() > 64 || value.chars().any(char::is_control) {
        return Err(PoisonReason::Invalid {
            field,
            problem: "must be 1-64 printable characters".into(),
        });
    }
    Ok(value)
}

/// Parses and validates one event body. `enqueued` stands in for a missing `ts`.
pub fn parse_reading(
    body: &[u8],
    enqueued: Option<DateTime<Utc>>,
) -> Result<Reading, PoisonReason> {
    let raw: RawReading =
        serde_json::from_slice(body).map_err(|e| PoisonReason::NotJson(e.to_string()))?;
    let home_id = identifier("homeId", raw.home_id)?;
    let sensor_id = identifier("sensorId", raw.sensor_id)?;
    let kind_text = raw.kind.ok_or(PoisonReason::Missing("type"))?;
    let kind = SensorKind::parse(&kind_text).ok_or_else(|| PoisonReason::Invalid {
        field: "type",
        problem: format!(
            "unknown sensor type '{}' (expected motion, door, window, glass_break, smoke or co)",
            kind_text.chars().take(40).collect::<String>()
        ),
    })?;
    let state_text = raw.state.ok_or(PoisonReason::Missing("state"))?;
    let state = kind
        .states()
        .into_iter()
        .find(|s| *s == state_text)
        .ok_or_else(|| PoisonReason::Invalid {
            field: "state",
            problem: format!(
                "a {} sensor reports {} or {}",
                kind.as_str(),
                kind.states()[0],
                kind.states()[1]
            ),
        })?;
    if raw.value.is_some_and(|v| !v.is_finite()) {
        return Err(PoisonReason::Invalid {
            field: "value",
            problem: "must be a finite number".into(),
        });
    }
    let time = match raw.ts {
        Some(ts) => DateTime::parse_from_rfc3339(&ts)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| PoisonReason::Invalid {
                field: "ts",
                problem: format!("not an RFC 3339 time: {e}"),
            })?,
        None => enqueued.ok_or(PoisonReason::Missing("ts"))?,
    };
    Ok(Reading {
        home_id,
        sensor_id,
        kind,
        state,
        value: raw.value,
        armed: raw.armed.unwrap_or(false),
        time,
        enqueued,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alarm_kind_has_its_own_place_in_all() {
        for (i, kind) in AlarmKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), i, "{kind:?}");
        }
    }

    fn reading(json: &str) -> Result<Reading, PoisonReason> {
        parse_reading(json.as_bytes(), None)
    }

    #[test]
    fn valid_readings_parse_and_extra_fields_are_ignored() {
        let r = reading(r#"{"homeId":"h1","sensorId":"d1","type":"door","state":"open","armed":true,"battery":80,"ts":"2026-11-22T13:30:05Z"}"#).unwrap();
        assert_eq!(r.kind, SensorKind::Door);
        assert_eq!(r.alarm(), Some(AlarmKind::Intrusion));
    }

    #[test]
    fn alarms_follow_the_rules() {
        let alarm = |json: &str| reading(json).unwrap().alarm();
        let ts = r#""ts":"2026-11-22T13:30:05Z""#;
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"d","type":"door","state":"open",{ts}}}"#
            )),
            None
        );
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"m","type":"motion","state":"motion","armed":true,{ts}}}"#
            )),
            Some(AlarmKind::Intrusion)
        );
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"g","type":"glass_break","state":"break",{ts}}}"#
            )),
            Some(AlarmKind::GlassBreak)
        );
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"s","type":"smoke","state":"alarm",{ts}}}"#
            )),
            Some(AlarmKind::Smoke)
        );
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"c","type":"co","state":"ok","value":85,{ts}}}"#
            )),
            Some(AlarmKind::CarbonMonoxide)
        );
        assert_eq!(
            alarm(&format!(
                r#"{{"homeId":"h","sensorId":"c","type":"co","state":"ok","value":9,{ts}}}"#
            )),
            None
        );
    }

    #[test]
    fn poison_is_named() {
        assert!(matches!(reading("not json"), Err(PoisonReason::NotJson(_))));
        assert_eq!(
            reading(r#"{"sensorId":"x"}"#),
            Err(PoisonReason::Missing("homeId"))
        );
        assert!(matches!(
            reading(
                r#"{"homeId":"h","sensorId":"x","type":"laser","state":"on","ts":"2026-11-22T13:30:05Z"}"#
            ),
            Err(PoisonReason::Invalid { field: "type", .. })
        ));
        assert!(matches!(
            reading(
                r#"{"homeId":"h","sensorId":"x","type":"door","state":"ajar","ts":"2026-11-22T13:30:05Z"}"#
            ),
            Err(PoisonReason::Invalid { field: "state", .. })
        ));
        assert_eq!(
            reading(r#"{"homeId":"h","sensorId":"x","type":"door","state":"open"}"#),
            Err(PoisonReason::Missing("ts"))
        );
        assert!(matches!(
            reading(
                r#"{"homeId":"","sensorId":"x","type":"door","state":"open","ts":"2026-11-22T13:30:05Z"}"#
            ),
            Err(PoisonReason::Invalid {
                field: "homeId",
                ..
            })
        ));
    }
}
