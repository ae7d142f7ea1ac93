//! The text forms of times and durations the Functions host and its Event Hubs extension
//! write: .NET `DateTime`/`DateTimeOffset` as Newtonsoft.Json formats them, the dates the host
//! puts in trigger metadata, and `TimeSpan` as host.json and function.json spell it.

use std::time::Duration;

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike, Utc};

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

/// Like [`dotnet_datetime`] for a `DateTime` of kind Utc (`…Z`): `UtcNow` in `sys`, and an
/// AMQP timestamp, which the .NET AMQP library reads as a UTC `DateTime`.
pub fn dotnet_utc_now(t: &DateTime<Utc>) -> String {
    let mut text = dotnet_datetime(t);
    text.push('Z');
    text
}

/// A `Duration` as .NET writes a `TimeSpan` (`TimeSpan.ToString()`): `[d.]hh:mm:ss[.fffffff]`.
pub fn dotnet_timespan(d: Duration) -> String {
    let secs = d.as_secs();
    let (days, hours, minutes, seconds) =
        (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let mut text = if days > 0 {
        format!("{days}.{hours:02}:{minutes:02}:{seconds:02}")
    } else {
        format!("{hours:02}:{minutes:02}:{seconds:02}")
    };
    let ticks = d.subsec_nanos() / 100;
    if ticks > 0 {
        text.push_str(&format!(".{ticks:07}"));
    }
    text
}

/// Parses a .NET `TimeSpan` as host.json and function.json write it: `[d.]hh:mm[:ss[.fffffff]]`,
/// or a whole number of days.
pub fn parse_timespan(s: &str) -> Option<Duration> {
    let s = s.trim();
    // A whole number alone is days, as `TimeSpan.Parse("2")` reads it.
    if let Ok(days) = s.parse::<u64>() {
        return days.checked_mul(86_400).map(Duration::from_secs);
    }
    let (days, rest) = match s.split_once('.') {
        Some((d, r)) if !d.contains(':') => (d.parse::<u64>().ok()?, r),
        _ => (0, s),
    };
    let mut parts = rest.split(':');
    let hours: u64 = parts.next()?.parse().ok()?;
    let minutes: u64 = parts.next()?.parse().ok()?;
    // `hh:mm` has no seconds: "00:01" is a minute.
    let seconds: f64 = match parts.next() {
        Some(text) => text.parse().ok()?,
        None => 0.0,
    };
    if parts.next().is_some() || minutes >= 60 || !(0.0..60.0).contains(&seconds) {
        return None;
    }
    // Checked: a span too long for a Duration is not a span (found by fuzzing host.json).
    let whole = days
        .checked_mul(24)?
        .checked_add(hours)?
        .checked_mul(3600)?
        .checked_add(minutes * 60)?;
    Duration::from_secs(whole).checked_add(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn timespans_parse_like_dotnet() {
        assert_eq!(parse_timespan("00:00:05"), Some(Duration::from_secs(5)));
        assert_eq!(dotnet_timespan(Duration::from_secs(5)), "00:00:05");
        assert_eq!(
            dotnet_timespan(Duration::from_millis(90_061_500)),
            "1.01:01:01.5000000"
        );
        // `hh:mm` and a day count alone, as `TimeSpan.Parse` takes them.
        assert_eq!(parse_timespan("00:01"), Some(Duration::from_secs(60)));
        assert_eq!(parse_timespan("1"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_timespan("1.00:00"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_timespan("00"), Some(Duration::ZERO));
        // Too long for a Duration: refused, not an overflow.
        assert_eq!(parse_timespan("009223372036854775807:02:00"), None);
        assert_eq!(parse_timespan("18446744073709551615.00:00:00"), None);
        assert_eq!(
            parse_timespan("01:02:03.5"),
            Some(Duration::from_millis(3_723_500))
        );
        assert_eq!(
            parse_timespan("1.00:00:00"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(parse_timespan("00:61:00"), None);
        assert_eq!(parse_timespan("five"), None);
    }

    #[test]
    fn dotnet_dates_trim_trailing_zeros() {
        let t = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        assert_eq!(dotnet_datetime(&t), "2024-05-01T12:00:00");
        let t = t + chrono::Duration::milliseconds(120);
        assert_eq!(dotnet_datetime(&t), "2024-05-01T12:00:00.12");
        assert_eq!(dotnet_datetime_offset(&t), "2024-05-01T12:00:00.12+00:00");
        assert_eq!(dotnet_utc_now(&t), "2024-05-01T12:00:00.12Z");
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
