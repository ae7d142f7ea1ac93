//! What a rehearsal's outputs did with each input — the oracle (pure): effects matched to inputs
//! by key, then missing ones (an input that should have had an effect and had none) and
//! duplicated ones (more than one effect of one input through one output), each with the faults
//! fired before it was seen.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::plan::Scheduled;

/// What the function promises about its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Semantics {
    /// Each input's effect through each output once: a duplicate fails the rehearsal.
    ExactlyOnce,
    /// At least once: duplicates are reported, only a missing effect fails it.
    AtLeastOnce,
}

/// One input event of a rehearsal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Input {
    pub key: String,
    pub partition: String,
    /// Its body, as [`preview`] shows it.
    pub sent: String,
    /// Whether an effect is expected of it (an input the function filters out has none).
    pub expects_effect: bool,
}

/// One thing an output did: an event it sent or a blob it wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Effect {
    /// The output binding's name.
    pub output: String,
    /// The input it is of, as the key rule reads it; `None` when it names none.
    pub key: Option<String>,
    /// Milliseconds from the rehearsal's start until it was seen (an event's enqueued time, a
    /// blob's last write), when known.
    pub at_ms: Option<u64>,
    /// Where it is: `alarms/0#17` for an event, `container/name` for a blob.
    pub location: String,
    /// What it holds, as [`preview`] shows it.
    pub preview: String,
}

/// A fault as it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FiredFault {
    #[serde(flatten)]
    pub scheduled: Scheduled,
    /// Milliseconds from the rehearsal's start; `None` if the run ended before its point.
    pub at_ms: Option<u64>,
    /// Which instance it was done to, where it matters.
    pub instance: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    pub key: String,
    pub partition: String,
    /// The input's body, as [`preview`] shows it.
    pub sent: String,
    /// Every fault fired during the run (when an effect that never came was due is unknown).
    pub faults_before: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Duplicated {
    pub key: String,
    pub output: String,
    pub count: usize,
    pub locations: Vec<String>,
    /// When each copy was seen, in milliseconds from the start, where known.
    pub seen_at_ms: Vec<Option<u64>>,
    /// Indices into the report's `faults` of those fired before the last copy was seen.
    pub faults_before: Vec<usize>,
}

/// The oracle's findings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Findings {
    pub missing: Vec<Missing>,
    pub duplicated: Vec<Duplicated>,
    /// Effects that name no input (the key rule found none, or an unknown one).
    pub unmatched: Vec<Unmatched>,
}

/// An effect that names no input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    pub output: String,
    pub location: String,
    /// What the key rule read from it: nothing, or a key no input has.
    pub key: Option<String>,
    pub preview: String,
}

impl Findings {
    /// Whether the run kept the promise.
    pub fn passed(&self, semantics: Semantics) -> bool {
        self.missing.is_empty()
            && (semantics == Semantics::AtLeastOnce || self.duplicated.is_empty())
    }
}

/// Matches `effects` to `inputs` by key and reports what is missing and what is duplicated.
pub fn audit(inputs: &[Input], effects: &[Effect], faults: &[FiredFault]) -> Findings {
    let fired: Vec<(usize, u64)> = faults
        .iter()
        .enumerate()
        .filter_map(|(i, f)| f.at_ms.map(|at| (i, at)))
        .collect();
    let before = |at: Option<u64>| -> Vec<usize> {
        fired
            .iter()
            .filter(|(_, t)| at.is_none_or(|at| *t <= at))
            .map(|(i, _)| *i)
            .collect()
    };
    let known: BTreeMap<&str, &Input> = inputs.iter().map(|i| (i.key.as_str(), i)).collect();
    let mut by_key: BTreeMap<(&str, &str), Vec<&Effect>> = BTreeMap::new();
    let mut unmatched = Vec::new();
    for effect in effects {
        match effect.key.as_deref().filter(|k| known.contains_key(k)) {
            Some(key) => by_key
                .entry((key, effect.output.as_str()))
                .or_default()
                .push(effect),
            None => unmatched.push(Unmatched {
                output: effect.output.clone(),
                location: effect.location.clone(),
                key: effect.key.clone(),
                preview: effect.preview.clone(),
            }),
        }
    }
    let missing = inputs
        .iter()
        .filter(|i| i.expects_effect)
        .filter(|i| !by_key.keys().any(|(key, _)| *key == i.key))
        .map(|i| Missing {
            key: i.key.clone(),
            partition: i.partition.clone(),
            sent: i.sent.clone(),
            faults_before: before(None),
        })
        .collect();
    let duplicated = by_key
        .iter()
        .filter(|(_, copies)| copies.len() > 1)
        .map(|((key, output), copies)| {
            let last_seen = copies.iter().map(|c| c.at_ms).max().flatten();
            Duplicated {
                key: key.to_string(),
                output: output.to_string(),
                count: copies.len(),
                locations: copies.iter().map(|c| c.location.clone()).collect(),
                seen_at_ms: copies.iter().map(|c| c.at_ms).collect(),
                faults_before: before(last_seen),
            }
        })
        .collect();
    Findings {
        missing,
        duplicated,
        unmatched,
    }
}

/// A body as a person reads it in a report: its text (or `<N bytes>` when it is not UTF-8), cut
/// at 100 characters.
///
/// ```
/// use hubhost_rehearse::audit::preview;
///
/// assert_eq!(preview(br#"{"id":1}"#), r#"{"id":1}"#);
/// assert_eq!(preview(&[0xff, 0xfe]), "<2 bytes>");
/// assert_eq!(preview("é".repeat(150).as_bytes()).chars().count(), 101);
/// ```
pub fn preview(body: &[u8]) -> String {
    const SHOWN: usize = 100;
    match std::str::from_utf8(body) {
        Ok(text) if text.chars().count() > SHOWN => {
            format!("{}…", text.chars().take(SHOWN).collect::<String>())
        }
        Ok(text) => text.to_string(),
        Err(_) => format!("<{} bytes>", body.len()),
    }
}

/// The default key rule: a JSON object's `id` member (string or number), else the whole text.
pub fn default_key(body: &[u8]) -> Option<String> {
    key_field(body, "id").or_else(|| String::from_utf8(body.to_vec()).ok())
}

/// A JSON object's member `field` as text (a string as it is, a number as written).
pub fn key_field(body: &[u8], field: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    match value.get(field)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Fault;

    fn input(key: &str) -> Input {
        Input {
            key: key.into(),
            partition: "0".into(),
            sent: format!("{{\"id\":\"{key}\"}}"),
            expects_effect: true,
        }
    }

    fn effect(output: &str, key: &str, at_ms: u64) -> Effect {
        Effect {
            output: output.into(),
            key: Some(key.into()),
            at_ms: Some(at_ms),
            location: format!("{output}/{key}@{at_ms}"),
            preview: format!("{{\"id\":\"{key}\"}}"),
        }
    }

    fn fault(at_ms: Option<u64>) -> FiredFault {
        FiredFault {
            scheduled: Scheduled {
                at_event: 1,
                fault: Fault::KillHandler,
            },
            at_ms,
            instance: None,
        }
    }

    #[test]
    fn once_each_passes_exactly_once() {
        let inputs = [input("a"), input("b")];
        let effects = [effect("out", "a", 5), effect("out", "b", 6)];
        let findings = audit(&inputs, &effects, &[]);
        assert!(findings.passed(Semantics::ExactlyOnce), "{findings:?}");
    }

    #[test]
    fn a_duplicate_names_the_faults_before_its_second_copy() {
        let inputs = [input("a"), input("b")];
        let effects = [
            effect("out", "a", 5),
            effect("out", "b", 6),
            effect("out", "a", 50),
        ];
        let faults = [fault(Some(10)), fault(Some(100)), fault(None)];
        let findings = audit(&inputs, &effects, &faults);
        assert_eq!(findings.duplicated.len(), 1);
        assert_eq!(findings.duplicated[0].key, "a");
        assert_eq!(findings.duplicated[0].count, 2);
        assert_eq!(findings.duplicated[0].faults_before, [0]);
        assert!(!findings.passed(Semantics::ExactlyOnce));
        assert!(findings.passed(Semantics::AtLeastOnce));
    }

    #[test]
    fn a_missing_effect_fails_either_promise_unless_none_was_expected() {
        let mut filtered = input("c");
        filtered.expects_effect = false;
        let inputs = [input("a"), input("b"), filtered];
        let findings = audit(&inputs, &[effect("out", "a", 1)], &[fault(Some(0))]);
        assert_eq!(findings.missing.len(), 1);
        assert_eq!(findings.missing[0].key, "b");
        assert_eq!(findings.missing[0].sent, r#"{"id":"b"}"#);
        assert_eq!(findings.missing[0].faults_before, [0]);
        assert!(!findings.passed(Semantics::AtLeastOnce));
    }

    #[test]
    fn effects_through_two_outputs_are_not_duplicates_and_strangers_are_unmatched() {
        let inputs = [input("a")];
        let mut stranger = effect("out", "zz", 3);
        stranger.key = Some("zz".into());
        let effects = [effect("out", "a", 1), effect("log", "a", 2), stranger];
        let findings = audit(&inputs, &effects, &[]);
        assert!(findings.duplicated.is_empty());
        let [stranger] = &findings.unmatched[..] else {
            panic!("{:?}", findings.unmatched)
        };
        assert_eq!(
            (stranger.location.as_str(), stranger.key.as_deref()),
            ("out/zz@3", Some("zz"))
        );
    }

    #[test]
    fn the_default_key_is_an_id_member_else_the_text() {
        assert_eq!(
            default_key(br#"{"id":"r-1","v":2}"#).as_deref(),
            Some("r-1")
        );
        assert_eq!(default_key(br#"{"id":17}"#).as_deref(), Some("17"));
        assert_eq!(default_key(b"plain").as_deref(), Some("plain"));
        assert_eq!(
            key_field(br#"{"homeId":"h1"}"#, "homeId").as_deref(),
            Some("h1")
        );
        assert_eq!(key_field(b"[1]", "id"), None);
    }
}
