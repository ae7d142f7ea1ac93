//! The Azure Functions host ⇄ custom handler contract for Event Hubs triggers.
//!
//! The host POSTs `{"Data": {...}, "Metadata": {...}}` to `/{FunctionName}` and expects
//! `{"Outputs":…,"Logs":[…],"ReturnValue":…}` back (docs/host-contract.md).
//! Its encoding is peculiar: a batch arrives as a JSON *string* holding a JSON array, numbers and
//! strings in Metadata arrive as JSON text inside strings, binary as base64.
//! - [`decode`] turns any shape the host sends (current, early v5 and legacy v3/v4 extensions,
//!   cardinality one/many, dataType string/binary/unset) into a typed [`crate::batch::TriggerBatch`];
//! - [`encode`] builds, byte for byte, the request the host would send for a batch — used by the
//!   demo, the tests, the benchmark and the emulated host;
//! - [`response`] is the answer.

pub mod decode;
pub mod encode;
pub mod response;

use chrono::{DateTime, Datelike, NaiveDateTime, SecondsFormat, Timelike, Utc};

/// Why a request cannot be decoded. Each message names the offending part of the request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContractError {
    /// The body is not JSON (the parser's message).
    #[error("the request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// The body has no `Data` object.
    #[error("the request has no \"Data\" object")]
    MissingData,
    /// `Data` lacks the trigger's binding name.
    #[error(
        "\"Data\" has no binding named '{expected}' (function {function} declares it in function.json); found: {found:?}"
    )]
    MissingBinding {
        /// The function the request is for.
        function: String,
        /// The trigger's binding name from function.json.
        expected: String,
        /// The keys `Data` has.
        found: Vec<String>,
    },
    /// The events are not in the shape cardinality and dataType promise.
    #[error("Data.{binding} is not what the trigger's function.json promises: {problem}")]
    BadData {
        /// The trigger's binding name.
        binding: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A `binary` event is not base64.
    #[error("Data.{binding}[{index}] is not valid base64 (the trigger has dataType binary)")]
    InvalidBase64 {
        /// The trigger's binding name.
        binding: String,
        /// The event's index in the batch.
        index: usize,
    },
    /// A metadata array is not one entry per event.
    #[error(
        "the batch's metadata arrays disagree: Data.{binding} has {events} events but Metadata.{key} has {len}"
    )]
    LengthMismatch {
        /// The trigger's binding name.
        binding: String,
        /// The metadata key, e.g. `SystemPropertiesArray`.
        key: String,
        /// Events in `Data`.
        events: usize,
        /// Entries in the metadata array.
        len: usize,
    },
    /// A metadata value cannot be read.
    #[error("Metadata.{key} is malformed: {problem}")]
    BadMetadata {
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// No partition context: the batch cannot be placed.
    #[error(
        "Metadata has no TriggerPartitionContext or PartitionContext with a PartitionId: cannot tell which partition the batch came from"
    )]
    MissingPartitionContext,
}

impl ContractError {
    /// A stable, machine-readable code for the JSON error body.
    pub fn code(&self) -> &'static str {
        match self {
            ContractError::MalformedJson(_) => "malformed_json",
            ContractError::MissingData => "missing_data",
            ContractError::MissingBinding { .. } => "missing_binding",
            ContractError::BadData { .. } => "bad_data",
            ContractError::InvalidBase64 { .. } => "invalid_base64",
            ContractError::LengthMismatch { .. } => "metadata_length_mismatch",
            ContractError::BadMetadata { .. } => "bad_metadata",
            ContractError::MissingPartitionContext => "missing_partition_context",
        }
    }
}

/// Formats like Newtonsoft.Json formats a .NET `DateTime` of kind Unspecified
/// (`yyyy-MM-ddTHH:mm:ss.FFFFFFF`: up to 7 fraction digits, trailing zeros dropped, no zone).
///
/// Written digit by digit: the emulated host formats three of these per event, and chrono's
/// general formatter (which parses its format string every call) was a tenth of its time.
pub fn dotnet_datetime(t: &DateTime<Utc>) -> String {
    if !(0..=9999).contains(&t.year()) {
        let base = t.format("%Y-%m-%dT%H:%M:%S").to_string();
        return with_ticks(base, t);
    }
    let mut buf = *b"0000-00-00T00:00:00";
    write_iso_seconds(&mut buf, t);
    with_ticks(String::from_utf8_lossy(&buf).into_owned(), t)
}

/// Writes `yyyy-mm-ddThh:mm:ss` (the year clamped to four digits) over the first 19 bytes of
/// `buf`, without chrono's general formatter: the hot paths that format times per event share it.
pub fn write_iso_seconds(buf: &mut [u8], t: &DateTime<Utc>) {
    let mut put = |at: usize, width: usize, mut v: u32| {
        for i in (at..at + width).rev() {
            buf[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, t.year().clamp(0, 9999) as u32);
    put(5, 2, t.month());
    put(8, 2, t.day());
    put(11, 2, t.hour());
    put(14, 2, t.minute());
    put(17, 2, t.second());
}

fn with_ticks(mut base: String, t: &DateTime<Utc>) -> String {
    let ticks = t.nanosecond() % 1_000_000_000 / 100;
    if ticks != 0 {
        let frac = format!("{ticks:07}");
        base.push('.');
        base.push_str(frac.trim_end_matches('0'));
    }
    base
}

/// Like [`dotnet_datetime`] for a `DateTimeOffset` at UTC (`…+00:00`).
pub fn dotnet_datetime_offset(t: &DateTime<Utc>) -> String {
    format!("{}+00:00", dotnet_datetime(t))
}

/// Parses the date forms the host and the extensions emit: RFC 3339, ISO without a zone
/// (taken as UTC, as the extension's `EnqueuedTimeUtc` is), and .NET's invariant
/// `M/d/yyyy h:mm:ss tt`.
pub fn parse_host_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    if let Some(t) = parse_iso_fast(s) {
        return Some(t);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%m/%d/%Y %I:%M:%S %p",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
            return Some(t.and_utc());
        }
    }
    None
}

/// The common case without chrono's general parser: `yyyy-MM-ddTHH:mm:ss[.f…]` followed by
/// nothing, `Z` or `+00:00` (every batch carries one such date per event).
fn parse_iso_fast(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    let date = chrono::NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)?;
    let mut nanos = 0u32;
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let mut scale = 100_000_000u32;
        while let Some(&c) = b.get(i).filter(|c| c.is_ascii_digit()) {
            nanos += u32::from(c - b'0') * scale;
            scale /= 10;
            i += 1;
        }
    }
    match &s[i..] {
        "" | "Z" | "+00:00" => {}
        _ => return None,
    }
    let time =
        chrono::NaiveTime::from_hms_nano_opt(num(11..13)?, num(14..16)?, num(17..19)?, nanos)?;
    Some(date.and_time(time).and_utc())
}

/// `UtcNow` in `sys`: seven fraction digits and a `Z`, as .NET's round-trip format writes it.
pub fn dotnet_utc_now(t: &DateTime<Utc>) -> String {
    let s = t.to_rfc3339_opts(SecondsFormat::Nanos, true);
    // chrono writes 9 digits; .NET writes 7.
    match s.rfind('.') {
        Some(dot) => format!("{}Z", &s[..dot + 8]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn dotnet_dates_trim_trailing_zeros() {
        let t = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        assert_eq!(dotnet_datetime(&t), "2024-05-01T12:00:00");
        let t = t + chrono::Duration::milliseconds(120);
        assert_eq!(dotnet_datetime(&t), "2024-05-01T12:00:00.12");
        assert_eq!(dotnet_datetime_offset(&t), "2024-05-01T12:00:00.12+00:00");
        assert_eq!(dotnet_utc_now(&t), "2024-05-01T12:00:00.1200000Z");
    }

    #[test]
    fn host_times_parse_in_every_form() {
        let want = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap()
            + chrono::Duration::milliseconds(123);
        for s in [
            "2024-05-01T12:00:00.123",
            "2024-05-01T12:00:00.123Z",
            "2024-05-01T12:00:00.123+00:00",
            "2024-05-01T14:00:00.123+02:00",
        ] {
            assert_eq!(parse_host_time(s), Some(want), "{s}");
        }
        assert_eq!(
            parse_host_time("5/1/2024 12:00:00 PM"),
            Some(Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap())
        );
        assert_eq!(parse_host_time("yesterday"), None);
    }
}
