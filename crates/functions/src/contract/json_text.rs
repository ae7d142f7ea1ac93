//! JSON text inside JSON strings, the contract's peculiar encoding, in one pass each way.
//!
//! The host writes a batch's events and most metadata as JSON text that is itself a JSON string
//! value (`"[\"{\\\"homeId\\\":…}\"]"`): every body is escaped twice. Going through
//! `serde_json::Value` or an intermediate `String` costs a copy and a pass per level, and on
//! the emulated host and in every handler that was most of the per-event cost. So:
//! - [`write_as_text`] serializes a value straight into the request body through [`EscapedText`],
//!   which escapes as it writes — byte for byte what serde_json writes for a string holding
//!   that value's JSON text;
//! - [`unescape`] reads one JSON string (borrowing it when it has no escape), and
//!   [`string_array`] reads an array of strings, each with one allocation: exactly what serde_json
//!   accepts and yields, which the fuzz targets check against serde_json itself.

use std::borrow::Cow;

use serde::Serialize;

/// What serde_json writes for each byte inside a string: 0 for the byte itself, `u` for
/// `\u00XX`, otherwise the letter after the backslash.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Appends `bytes` to `out` escaped for the inside of a JSON string, as serde_json escapes:
/// `"` and `\` with a backslash, the five short control escapes, other control bytes as
/// `\u00xx` (lowercase), everything else (UTF-8 included) as is.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() <= 8 {
        // serde_json writes a string's runs and escapes in separate small pieces.
        for &b in bytes {
            match ESCAPE[b as usize] {
                0 => out.push(b),
                escape => push_escape(out, b, escape),
            }
        }
        return;
    }
    let mut start = 0;
    loop {
        let i = plain_run_end(bytes, start);
        out.extend_from_slice(&bytes[start..i]);
        let Some(&b) = bytes.get(i) else {
            return;
        };
        push_escape(out, b, ESCAPE[b as usize]);
        start = i + 1;
    }
}

/// Appends byte `b` escaped, `escape` being its [`ESCAPE`] entry.
#[inline]
fn push_escape(out: &mut Vec<u8>, b: u8, escape: u8) {
    if escape == b'u' {
        out.extend_from_slice(&unicode_escape(b));
    } else {
        out.extend_from_slice(&[b'\\', escape]);
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `\u00xx` for control byte `b`, as serde_json writes it.
fn unicode_escape(b: u8) -> [u8; 6] {
    [
        b'\\',
        b'u',
        b'0',
        b'0',
        HEX[(b >> 4) as usize],
        HEX[(b & 0xf) as usize],
    ]
}

/// A writer that escapes everything written through it into a JSON string's content.
pub struct EscapedText<'a>(pub &'a mut Vec<u8>);

impl std::io::Write for EscapedText<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        escape_into(self.0, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends `value`'s JSON text as a JSON string: `"` + escaped JSON + `"`.
///
/// ```
/// use hubhost_functions::contract::json_text::write_as_text;
///
/// let mut out = Vec::new();
/// write_as_text(&mut out, &["a\"b", "c"]);
/// let expected = serde_json::to_string(&serde_json::to_string(&["a\"b", "c"])?)?;
/// assert_eq!(String::from_utf8(out)?, expected);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_as_text<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    out.push(b'"');
    serde_json::to_writer(EscapedText(out), value)
        .expect("a value serializes to a Vec, which cannot fail");
    out.push(b'"');
}

/// Appends an array of strings as JSON text in a JSON string — what [`write_as_text`] writes
/// for them — escaping each string's bytes twice in one step (the batch's bodies, the longest
/// text of a request).
///
/// ```
/// use hubhost_functions::contract::json_text::{write_as_text, write_strings_as_text};
///
/// let bodies = ["{\"a\":\"b\\\\c\"}", "line\nnext"];
/// let (mut fast, mut plain) = (Vec::new(), Vec::new());
/// write_strings_as_text(&mut fast, bodies);
/// write_as_text(&mut plain, &bodies);
/// assert_eq!(fast, plain);
/// ```
pub fn write_strings_as_text<S: AsRef<str>>(
    out: &mut Vec<u8>,
    strings: impl IntoIterator<Item = S>,
) {
    out.extend_from_slice(b"\"[");
    for (i, string) in strings.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"\\\"");
        let bytes = string.as_ref().as_bytes();
        let mut start = 0;
        loop {
            let at = plain_run_end(bytes, start);
            out.extend_from_slice(&bytes[start..at]);
            let Some(&b) = bytes.get(at) else {
                break;
            };
            // Escaped once: `\` and a letter (or `u00xx`); escaped again, the backslash
            // doubles, and a quote or backslash letter gains its own.
            out.extend_from_slice(b"\\\\");
            match ESCAPE[b as usize] {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                // The backslash is already written, doubled.
                b'u' => out.extend_from_slice(&unicode_escape(b)[1..]),
                letter => out.push(letter),
            }
            start = at + 1;
        }
        out.extend_from_slice(b"\\\"");
    }
    out.extend_from_slice(b"]\"");
}

/// Why a JSON string could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// The text does not start with `"`.
    #[error("expected a JSON string")]
    NotAString,
    /// The closing quote is missing.
    #[error("a JSON string is not terminated")]
    Unterminated,
    /// A raw control character, which JSON strings must escape.
    #[error("a control character is not escaped in a JSON string")]
    ControlCharacter,
    /// An escape JSON does not have, or a `\u` escape that is not a character.
    #[error("a JSON string has an invalid escape")]
    InvalidEscape,
    /// Something follows the string.
    #[error("trailing characters after a JSON string")]
    TrailingCharacters,
    /// Not an object where one is read.
    #[error("expected a JSON object")]
    NotAnObject,
    /// A value that is not JSON.
    #[error("a value is not JSON")]
    NotJson,
}

/// Reads `text`, which must be one JSON string (whitespace around it allowed, as serde_json
/// allows it), into its content: borrowed
/// when it has no escape.
///
/// ```
/// use hubhost_functions::contract::json_text::unescape;
///
/// assert_eq!(unescape(r#""plain""#)?, "plain");
/// assert_eq!(unescape(r#""[\"a\",1]""#)?, r#"["a",1]"#);
/// assert!(unescape(r#""open"#).is_err());
/// # Ok::<(), hubhost_functions::contract::json_text::TextError>(())
/// ```
pub fn unescape(text: &str) -> Result<Cow<'_, str>, TextError> {
    let bytes = text.as_bytes();
    let open = skip_whitespace(bytes, 0);
    if bytes.get(open) != Some(&b'"') {
        return Err(TextError::NotAString);
    }
    let mut out = Vec::new();
    let (end, escaped) = read_string(bytes, open + 1, &mut out, usize::MAX)?;
    if skip_whitespace(bytes, end) != bytes.len() {
        return Err(TextError::TrailingCharacters);
    }
    Ok(if escaped {
        Cow::Owned(into_string(out))
    } else {
        Cow::Borrowed(&text[open + 1..end - 1])
    })
}

/// Reads `text` when it is a JSON array of strings (whitespace allowed where JSON allows it)
/// into the strings; `None` when it is anything else, for the caller's general path to say why.
///
/// ```
/// use hubhost_functions::contract::json_text::string_array;
///
/// assert_eq!(string_array(r#" ["a", "b\"c"] "#), Some(vec!["a".to_string(), "b\"c".to_string()]));
/// assert_eq!(string_array("[]"), Some(vec![]));
/// assert_eq!(string_array(r#"["a", 1]"#), None);
/// ```
pub fn string_array(text: &str) -> Option<Vec<String>> {
    let bytes = text.as_bytes();
    let mut i = skip_whitespace(bytes, 0);
    if bytes.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_whitespace(bytes, i + 1);
    let mut strings = Vec::new();
    if bytes.get(i) == Some(&b']') {
        i += 1;
    } else {
        loop {
            if bytes.get(i) != Some(&b'"') {
                return None;
            }
            let mut out = Vec::new();
            let (end, escaped) = read_string(bytes, i + 1, &mut out, 0).ok()?;
            strings.push(if escaped {
                into_string(out)
            } else {
                text[i + 1..end - 1].to_string()
            });
            i = skip_whitespace(bytes, end);
            match bytes.get(i) {
                Some(b',') => i = skip_whitespace(bytes, i + 1),
                Some(b']') => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_whitespace(bytes, i) == bytes.len()).then_some(strings)
}

/// A member's value as [`ObjectReader`] read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Member<'a> {
    /// A string's content, unescaped.
    Text(Cow<'a, str>),
    /// Any other value (or a string left as is), its exact JSON text.
    Raw(&'a str),
}

/// Reads a JSON object's members one by one, for the contract's envelope: keys unescaped,
/// each value either unescaped (a string), skipped to its exact text, or opened as a nested
/// object, in the same single pass over the text. Anything that is not JSON is an error.
pub struct ObjectReader<'a> {
    text: &'a str,
    pos: usize,
    first: bool,
}

impl<'a> ObjectReader<'a> {
    /// Starts at the object that begins at `pos` (after optional whitespace).
    pub fn new(text: &'a str, pos: usize) -> Result<Self, TextError> {
        let at = skip_whitespace(text.as_bytes(), pos);
        if text.as_bytes().get(at) != Some(&b'{') {
            return Err(TextError::NotAnObject);
        }
        Ok(ObjectReader {
            text,
            pos: at + 1,
            first: true,
        })
    }

    /// The next member's key (its value must be read before the next call), or `None` after
    /// the closing brace.
    pub fn next_key(&mut self) -> Result<Option<Cow<'a, str>>, TextError> {
        let bytes = self.text.as_bytes();
        let mut i = skip_whitespace(bytes, self.pos);
        match (bytes.get(i), self.first) {
            (Some(b'}'), _) => {
                self.pos = i + 1;
                return Ok(None);
            }
            (Some(b','), false) => i = skip_whitespace(bytes, i + 1),
            (Some(b'"'), true) => {}
            _ => return Err(TextError::NotAnObject),
        }
        self.first = false;
        if bytes.get(i) != Some(&b'"') {
            return Err(TextError::NotAnObject);
        }
        let (key, end) = self.string_at(i + 1)?;
        let colon = skip_whitespace(bytes, end);
        if bytes.get(colon) != Some(&b':') {
            return Err(TextError::NotAnObject);
        }
        self.pos = colon + 1;
        Ok(Some(key))
    }

    /// The current value: a string's content, or any other value's text.
    pub fn value(&mut self) -> Result<Member<'a>, TextError> {
        let bytes = self.text.as_bytes();
        let at = skip_whitespace(bytes, self.pos);
        if bytes.get(at) == Some(&b'"') {
            let (text, end) = self.string_at(at + 1)?;
            self.pos = end;
            Ok(Member::Text(text))
        } else {
            self.raw().map(Member::Raw)
        }
    }

    /// The current value's exact text, whatever it is.
    pub fn raw(&mut self) -> Result<&'a str, TextError> {
        let bytes = self.text.as_bytes();
        let at = skip_whitespace(bytes, self.pos);
        let end = if bytes.get(at) == Some(&b'"') {
            skip_string(bytes, at + 1)?
        } else {
            let mut values = serde_json::Deserializer::from_str(&self.text[at..]);
            let raw =
                <&serde_json::value::RawValue as serde::Deserialize>::deserialize(&mut values)
                    .map_err(|_| TextError::NotJson)?;
            raw.get().as_ptr() as usize - self.text.as_ptr() as usize + raw.get().len()
        };
        self.pos = end;
        Ok(&self.text[at..end])
    }

    /// The current value when it is an object, to read member by member; then
    /// [`ObjectReader::resume`] with it. `None` (and the value consumed) when it is `null`.
    pub fn object(&mut self) -> Result<Option<ObjectReader<'a>>, TextError> {
        let at = skip_whitespace(self.text.as_bytes(), self.pos);
        if self.text[at..].starts_with("null") {
            self.pos = at + 4;
            return Ok(None);
        }
        ObjectReader::new(self.text, at).map(Some)
    }

    /// Continues after a nested object read to its end.
    pub fn resume(&mut self, nested: &ObjectReader<'a>) {
        self.pos = nested.pos;
    }

    /// Whether only whitespace follows (for the outermost object, after its last member).
    pub fn at_end(&self) -> bool {
        skip_whitespace(self.text.as_bytes(), self.pos) == self.text.len()
    }

    fn string_at(&self, start: usize) -> Result<(Cow<'a, str>, usize), TextError> {
        let mut out = Vec::new();
        // The envelope's long strings are the batch's events and metadata arrays.
        let (end, escaped) = read_string(self.text.as_bytes(), start, &mut out, 64 * 1024)?;
        Ok(if escaped {
            (Cow::Owned(into_string(out)), end)
        } else {
            (Cow::Borrowed(&self.text[start..end - 1]), end)
        })
    }
}

/// The index after the closing quote of the string whose content starts at `start`, checked
/// as [`unescape`] checks it, without writing its content anywhere.
fn skip_string(bytes: &[u8], start: usize) -> Result<usize, TextError> {
    let mut i = start;
    loop {
        i = plain_run_end(bytes, i);
        match bytes.get(i) {
            None => return Err(TextError::Unterminated),
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => {
                // Simple escapes are checked here; `\u` ones through the full reader.
                match bytes.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => i = read_escape(bytes, i + 1, &mut Vec::new())?,
                    Some(_) => return Err(TextError::InvalidEscape),
                    None => return Err(TextError::Unterminated),
                }
            }
            Some(_) => return Err(TextError::ControlCharacter),
        }
    }
}

fn skip_whitespace(bytes: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = bytes.get(i) {
        i += 1;
    }
    i
}

/// Bytes that end a plain run inside a JSON string: the quote, the backslash, control bytes.
static SPECIAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Reads a string's content from `start` (just after its opening quote). Escaped content goes
/// to `out`, which reserves at most `reserve_at_most` bytes up front (more than the content
/// needs, up to the rest of the text); returns the index just after the closing quote and
/// whether there was an escape (when not, `out` is left empty and the content is
/// `bytes[start..end - 1]`).
fn read_string(
    bytes: &[u8],
    start: usize,
    out: &mut Vec<u8>,
    reserve_at_most: usize,
) -> Result<(usize, bool), TextError> {
    let mut i = plain_run_end(bytes, start);
    match bytes.get(i) {
        Some(b'"') => return Ok((i + 1, false)),
        Some(b'\\') => {}
        Some(_) => return Err(TextError::ControlCharacter),
        None => return Err(TextError::Unterminated),
    }
    // The contract's strings are dense with escapes (every quote of the inner JSON), so from
    // the first one on, plain bytes are copied eight at a time and escapes read inline.
    out.reserve((bytes.len() - start).min(reserve_at_most));
    out.extend_from_slice(&bytes[start..i]);
    loop {
        match bytes.get(i) {
            Some(b'"') => return Ok((i + 1, true)),
            Some(b'\\') => {
                let simple = bytes.get(i + 1).map_or(0, |&b| UNESCAPE[b as usize]);
                if simple != 0 {
                    out.push(simple);
                    i += 2;
                } else {
                    i = read_escape(bytes, i + 1, out)?;
                }
            }
            Some(_) => return Err(TextError::ControlCharacter),
            None => return Err(TextError::Unterminated),
        }
        while let Some(chunk) = bytes.get(i..i + 8) {
            let chunk: &[u8; 8] = chunk.try_into().expect("eight bytes");
            let special = special_bytes(u64::from_le_bytes(*chunk));
            let kept = out.len();
            out.extend_from_slice(chunk);
            if special != 0 {
                let plain = (special.trailing_zeros() / 8) as usize;
                out.truncate(kept + plain);
                i += plain;
                break;
            }
            i += 8;
        }
        if bytes.len() - i < 8 {
            let end = plain_run_end(bytes, i);
            out.extend_from_slice(&bytes[i..end]);
            i = end;
        }
    }
}

/// What a one-letter escape stands for (0: not one).
static UNESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table[b'/' as usize] = b'/';
    table[b'b' as usize] = 0x08;
    table[b'f' as usize] = 0x0c;
    table[b'n' as usize] = b'\n';
    table[b'r' as usize] = b'\r';
    table[b't' as usize] = b'\t';
    table
};

/// The high bit of each byte of `word` (little-endian) that is a quote, a backslash or below
/// 0x20 — exact up to the first such byte (borrows only disturb the bits above it), which is
/// the only one used.
fn special_bytes(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x;
    (zero_in(word ^ (ONES * b'"' as u64))
        | zero_in(word ^ (ONES * b'\\' as u64))
        | (word.wrapping_sub(ONES * 0x20) & !word))
        & HIGH
}

/// The index of the first quote, backslash or control byte at or after `i` (or the end):
/// eight bytes at a time while they are plain, as serde_json scans.
fn plain_run_end(bytes: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = bytes.get(i..i + 8) {
        let special = special_bytes(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        if special != 0 {
            return i + (special.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < bytes.len() && !SPECIAL[bytes[i] as usize] {
        i += 1;
    }
    i
}

/// One escape after its backslash, appended to `out`; returns the index after it.
fn read_escape(bytes: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, TextError> {
    let simple = match bytes.get(i) {
        None => return Err(TextError::Unterminated),
        Some(b'"') => b'"',
        Some(b'\\') => b'\\',
        Some(b'/') => b'/',
        Some(b'b') => 0x08,
        Some(b'f') => 0x0c,
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b't') => b'\t',
        Some(b'u') => {
            let unit = hex4(bytes, i + 1)?;
            let (c, next) = match unit {
                0xD800..=0xDBFF => {
                    // A leading surrogate must be followed by an escaped trailing one.
                    if bytes.get(i + 5) != Some(&b'\\') || bytes.get(i + 6) != Some(&b'u') {
                        return Err(TextError::InvalidEscape);
                    }
                    let low = hex4(bytes, i + 7)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return Err(TextError::InvalidEscape);
                    }
                    let code = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                    (
                        char::from_u32(code).ok_or(TextError::InvalidEscape)?,
                        i + 11,
                    )
                }
                0xDC00..=0xDFFF => return Err(TextError::InvalidEscape),
                _ => (char::from_u32(unit).ok_or(TextError::InvalidEscape)?, i + 5),
            };
            out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            return Ok(next);
        }
        Some(_) => return Err(TextError::InvalidEscape),
    };
    out.push(simple);
    Ok(i + 1)
}

fn hex4(bytes: &[u8], at: usize) -> Result<u32, TextError> {
    let digits = bytes.get(at..at + 4).ok_or(TextError::Unterminated)?;
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(TextError::InvalidEscape),
        };
        Ok(acc << 4 | v as u32)
    })
}

/// The unescaped bytes as a string. They are valid UTF-8: runs copied from a `&str` end at
/// ASCII bytes, and escapes append whole characters.
fn into_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("unescaped JSON string content is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_is_serde_jsons_byte_for_byte() {
        let mut all: Vec<u8> = (0u8..0x80).collect();
        all.extend("é😀\u{7f}".as_bytes());
        let text = String::from_utf8(all).unwrap();
        let mut out = Vec::new();
        escape_into(&mut out, text.as_bytes());
        let theirs = serde_json::to_string(&text).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), theirs[1..theirs.len() - 1]);
    }

    #[test]
    fn unescaping_reads_what_serde_json_reads() {
        for text in [
            r#""""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""\u00e9\uD83D\uDE00 \u0000""#,
            "\"é😀\"",
        ] {
            let theirs: String = serde_json::from_str(text).unwrap();
            assert_eq!(unescape(text).unwrap(), theirs, "{text}");
        }
        for bad in [
            "\"a",
            "\"\\x\"",
            "\"\\uD83D\"",
            "\"\\uDE00\"",
            "\"\\uD83Dx\"",
            "\"\\u12\"",
            "\"a\nb\"",
            "\"a\" x",
            "a",
        ] {
            assert!(serde_json::from_str::<String>(bad).is_err(), "{bad:?}");
            assert!(unescape(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn string_arrays_are_read_or_left_to_the_general_path() {
        let text = "\n[ \"a\\\"\" ,\"\\u00e9\"\t]\r";
        assert_eq!(
            string_array(text),
            Some(serde_json::from_str::<Vec<String>>(text).unwrap())
        );
        for other in ["[\"a\",]", "[1]", "[\"a\"] x", "{}", "[\"a\" \"b\"]", "["] {
            assert_eq!(string_array(other), None, "{other}");
        }
    }
}
