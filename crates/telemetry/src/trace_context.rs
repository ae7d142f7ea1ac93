//! W3C trace context as Event Hubs carries it: the `traceparent` value
//! (`00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`) that the Azure SDKs stamp on every
//! event they send, as the application properties `Diagnostic-Id` and `traceparent`, when
//! tracing is on.
//!
//! Pure: parsing, formatting, and choosing a batch's links (one per distinct producer, bounded)
//! and parent (the one trace every event belongs to, if there is one).

use std::fmt;

use serde_json::{Map, Value};

/// The application properties that carry an event's producer context, in the order read: the
/// Azure SDKs write `Diagnostic-Id` (all of them) and `traceparent` (newer ones), with the same
/// value.
pub const EVENT_PROPERTIES: [&str; 2] = ["Diagnostic-Id", "traceparent"];

/// At most this many links on one span: OpenTelemetry's default span link limit. A bigger
/// batch keeps the first of each distinct producer and counts the rest as dropped.
pub const MAX_LINKS: usize = 128;

/// One W3C `traceparent`: which trace, which span in it, and whether it was sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace (16 bytes, never all zero).
    pub trace_id: [u8; 16],
    /// The span that is the parent (8 bytes, never all zero).
    pub span_id: [u8; 8],
    /// The trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value. Version `00` must be exactly 55 characters; a later version
    /// may carry more after the four fields (as the W3C recommendation asks readers to allow).
    /// Anything else, an all-zero id or version `ff` gives `None`.
    ///
    /// ```
    /// use hubhost_telemetry::TraceParent;
    ///
    /// let parent = TraceParent::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
    /// assert!(parent.sampled());
    /// assert_eq!(parent.to_string(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    /// assert_eq!(TraceParent::parse("00-00000000000000000000000000000000-b7ad6b7169203331-01"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let mut fields = text.splitn(5, '-');
        let version = fields.next()?;
        let trace = fields.next()?;
        let span = fields.next()?;
        let flags = fields.next()?;
        let rest = fields.next();
        let version = hex_bytes::<1>(version)?[0];
        if version == 0xff || (version == 0 && (rest.is_some() || text.len() != 55)) {
            return None;
        }
        let trace_id = hex_bytes::<16>(trace)?;
        let span_id = hex_bytes::<8>(span)?;
        let flags = hex_bytes::<1>(flags)?[0];
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// The producer context an event carries in its application properties, if any is valid.
    /// Takes any map of properties (a `serde_json::Map`, a `BTreeMap<String, Value>`, …):
    /// `Diagnostic-Id` first, then `traceparent`, names in any case.
    pub fn of_event<'a, P>(properties: P) -> Option<Self>
    where
        P: IntoIterator<Item = (&'a String, &'a Value)>,
        P::IntoIter: Clone,
    {
        Self::of_properties(
            properties
                .into_iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )
    }

    /// The same lookup over properties in any encoding (AMQP's, say): each name with its value
    /// when that is a string, `None` when it is not.
    pub fn of_properties<'a>(
        properties: impl IntoIterator<Item = (&'a str, Option<&'a str>)> + Clone,
    ) -> Option<Self> {
        EVENT_PROPERTIES.iter().find_map(|name| {
            properties
                .clone()
                .into_iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .and_then(|(_, value)| value)
                .and_then(Self::parse)
        })
    }

    /// Whether the producer sampled its span.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id as 16 lowercase hex digits.
    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            self.span_id_hex(),
            self.flags
        )
    }
}

/// What a batch's events say about where they came from: the span to link to for each
/// distinct producer span, and the one trace all of them belong to, if they all carry a context
/// from the same trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Producers {
    /// Distinct producer contexts in the order first seen, at most [`MAX_LINKS`].
    pub links: Vec<TraceParent>,
    /// Distinct contexts left out past [`MAX_LINKS`].
    pub dropped: usize,
    /// Events without a valid context.
    pub without_context: usize,
    /// The context of the first event, when every event carries a context of the same trace:
    /// the invocation then continues that trace (a batch of one event always does).
    pub common_parent: Option<TraceParent>,
}

impl Producers {
    /// Reads each event's properties, in order.
    ///
    /// ```
    /// use hubhost_telemetry::trace_context::Producers;
    /// use serde_json::{Map, json};
    ///
    /// let event = |id: &str| json!({"Diagnostic-Id": id}).as_object().cloned().unwrap();
    /// let a = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    /// let b = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
    /// let producers = Producers::of_events([&event(a), &event(b), &event(a)]);
    /// assert_eq!(producers.links.len(), 2);
    /// assert_eq!(producers.common_parent.unwrap().to_string(), a);
    ///
    /// let none = Producers::of_events([&Map::new()]);
    /// assert_eq!((none.links.len(), none.without_context, none.common_parent), (0, 1, None));
    /// ```
    pub fn of_events<'a>(events: impl IntoIterator<Item = &'a Map<String, Value>>) -> Self {
        Self::of_contexts(events.into_iter().map(TraceParent::of_event))
    }

    /// The same from each event's context, already read (`None`: the event carries none).
    pub fn of_contexts(contexts: impl IntoIterator<Item = Option<TraceParent>>) -> Self {
        let mut producers = Producers::default();
        let mut seen = std::collections::HashSet::new();
        let mut one_trace: Option<Option<TraceParent>> = None;
        for context in contexts {
            let Some(context) = context else {
                producers.without_context += 1;
                one_trace = Some(None);
                continue;
            };
            one_trace = match one_trace {
                None => Some(Some(context)),
                Some(Some(first)) if first.trace_id == context.trace_id => Some(Some(first)),
                _ => Some(None),
            };
            if !seen.insert((context.trace_id, context.span_id)) {
                continue;
            }
            if producers.links.len() < MAX_LINKS {
                producers.links.push(context);
            } else {
                producers.dropped += 1;
            }
        }
        producers.common_parent = one_trace.flatten();
        producers
    }
}

fn hex_bytes<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some(out)
}

/// Lowercase only: the recommendation forbids uppercase hex in `traceparent`.
fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const A: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn traceparent_round_trips_and_refuses_what_the_recommendation_refuses() {
        assert_eq!(TraceParent::parse(A).unwrap().to_string(), A);
        let unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        assert!(!TraceParent::parse(unsampled).unwrap().sampled());
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333é-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version may append fields.
        let future = "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what-next";
        assert!(TraceParent::parse(future).is_some());
    }

    #[test]
    fn an_event_is_read_by_either_property_in_any_case_and_a_bad_value_is_skipped() {
        let props = |v: Value| v.as_object().cloned().unwrap();
        assert!(TraceParent::of_event(&props(json!({"diagnostic-id": A}))).is_some());
        assert!(TraceParent::of_event(&props(json!({"traceparent": A}))).is_some());
        let other = "00-11111111111111111111111111111111-2222222222222222-01";
        let both = props(json!({"Diagnostic-Id": "garbage", "traceparent": other}));
        assert_eq!(TraceParent::of_event(&both).unwrap().to_string(), other);
        assert_eq!(
            TraceParent::of_event(&props(json!({"Diagnostic-Id": 7}))),
            None
        );
    }

    #[test]
    fn links_are_distinct_bounded_and_a_parent_only_when_one_trace_owns_the_batch() {
        let event = |trace: u32, span: u32| {
            json!({ "Diagnostic-Id": format!("00-{trace:032x}-{span:016x}-01") })
                .as_object()
                .cloned()
                .unwrap()
        };
        let many: Vec<_> = (1..=200).map(|span| event(1, span)).collect();
        let producers = Producers::of_events(&many);
        assert_eq!(producers.links.len(), MAX_LINKS);
        assert_eq!(producers.dropped, 200 - MAX_LINKS);
        assert_eq!(producers.common_parent.unwrap().span_id[7], 1);

        let mixed = [event(1, 1), event(2, 1)];
        assert_eq!(Producers::of_events(&mixed).common_parent, None);
        let partly = [event(1, 1), Map::new()];
        let producers = Producers::of_events(&partly);
        assert_eq!(
            (producers.common_parent, producers.without_context),
            (None, 1)
        );
        assert_eq!(Producers::of_events([]), Producers::default());
    }
}
