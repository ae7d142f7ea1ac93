//! AMQP encodings read and written at the byte level (AMQP 1.0 §1.6), for the two places where the
//! hub handles encoded bytes without decoding them: `received` (annotations spliced into a stored
//! message) and `wire` (outgoing performatives padded, pre-encoded transfers unwrapped). Every
//! reader returns `None` on bytes that do not hold what it reads, never panics.
//!
//! It also holds [`decode_message`], the one way the hub decodes a client's message: behind
//! [`sizes_fit`], the check that makes decoding safe.

/// How deep descriptors may nest before a value counts as malformed (real ones nest once).
const MAX_DESCRIPTOR_DEPTH: usize = 8;

/// The encoded length of the AMQP value at the start of `bytes` (a format code's high nibble
/// says how its width is found), or `None` when it does not fit.
pub fn value_len(bytes: &[u8]) -> Option<usize> {
    nested_value_len(bytes, 0)
}

fn nested_value_len(bytes: &[u8], depth: usize) -> Option<usize> {
    let code = *bytes.first()?;
    let len = if code == 0x00 {
        if depth >= MAX_DESCRIPTOR_DEPTH {
            return None;
        }
        let descriptor = nested_value_len(&bytes[1..], depth + 1)?;
        1 + descriptor + nested_value_len(&bytes[1 + descriptor..], depth + 1)?
    } else {
        match code >> 4 {
            0x4 => 1,
            0x5 => 2,
            0x6 => 3,
            0x7 => 5,
            0x8 => 9,
            0x9 => 17,
            0xa | 0xc | 0xe => 2 + *bytes.get(1)? as usize,
            0xb | 0xd | 0xf => 5 + u32::from_be_bytes(bytes.get(1..5)?.try_into().ok()?) as usize,
            _ => return None,
        }
    };
    (len <= bytes.len()).then_some(len)
}

/// Whether every value in `bytes`, one after another and inside lists, maps and described
/// values, declares a size that fits in what follows it. The typed decoder (serde_amqp)
/// allocates the declared size of a string, symbol or binary before it checks that the bytes
/// are there, so 13 bytes declaring a 4 GB symbol make it ask for 4 GB (found by the
/// `received_message` fuzz target); bytes that pass this walk cannot.
pub fn sizes_fit(bytes: &[u8]) -> bool {
    sizes_fit_at(bytes, 0)
}

fn sizes_fit_at(mut bytes: &[u8], depth: usize) -> bool {
    if depth > MAX_DESCRIPTOR_DEPTH * 4 {
        return false;
    }
    while !bytes.is_empty() {
        let Some(len) = value_len(bytes) else {
            return false;
        };
        let value = &bytes[..len];
        let inner_ok = match value[0] {
            0x00 => {
                let Some(descriptor) = value_len(&value[1..]) else {
                    return false;
                };
                sizes_fit_at(&value[1..1 + descriptor], depth + 1)
                    && sizes_fit_at(&value[1 + descriptor..], depth + 1)
            }
            // The decoder reads as many items as the count says, past the compound's size if
            // need be: the count must match the items the size holds.
            0xc0 | 0xc1 | 0xd0 | 0xd1 => match compound(value) {
                Some(c) => {
                    count_values(c.items) == Some(c.count) && sizes_fit_at(c.items, depth + 1)
                }
                None => false,
            },
            0xe0 => array_fits(&value[2..], false, depth + 1),
            0xf0 => array_fits(&value[5..], true, depth + 1),
            _ => true,
        };
        if !inner_ok {
            return false;
        }
        bytes = &bytes[len..];
    }
    true
}

/// How many values follow one another in `bytes`, if they fill it exactly.
fn count_values(mut bytes: &[u8]) -> Option<usize> {
    let mut n = 0;
    while !bytes.is_empty() {
        bytes = &bytes[value_len(bytes)?..];
        n += 1;
    }
    Some(n)
}

/// An array's content after its size: the count, one constructor, then the elements, each
/// encoded without its format code; every element's own size must fit.
fn array_fits(content: &[u8], wide: bool, depth: usize) -> bool {
    let (count, mut at) = if wide {
        match content.get(..4) {
            Some(b) => (u32::from_be_bytes(b.try_into().expect("4")) as usize, 4),
            None => return false,
        }
    } else {
        match content.first() {
            Some(n) => (*n as usize, 1),
            None => return false,
        }
    };
    // The constructor: a format code, or a descriptor and then one.
    if content.get(at) == Some(&0x00) {
        match value_len(&content[at + 1..]) {
            Some(descriptor) => at += 1 + descriptor,
            None => return false,
        }
    }
    let Some(&code) = content.get(at) else {
        return count == 0;
    };
    at += 1;
    for _ in 0..count {
        let rest = &content[at.min(content.len())..];
        let size = |width: usize| -> Option<usize> {
            let field = rest.get(..width)?;
            Some(if width == 1 {
                field[0] as usize
            } else {
                u32::from_be_bytes(field.try_into().ok()?) as usize
            })
        };
        let (len, inner) = match code >> 4 {
            0x4 => (0, None),
            0x5 => (1, None),
            0x6 => (2, None),
            0x7 => (4, None),
            0x8 => (8, None),
            0x9 => (16, None),
            0xa | 0xc | 0xe => match size(1) {
                Some(n) => (1 + n, Some(1)),
                None => return false,
            },
            0xb | 0xd | 0xf => match size(4) {
                Some(n) => (4 + n, Some(4)),
                None => return false,
            },
            _ => return false,
        };
        let Some(element) = rest.get(..len) else {
            return false;
        };
        let nested_ok = match (code >> 4, inner) {
            // A list or map element: its count, then items that must fit in turn.
            (0xc, Some(w)) | (0xd, Some(w)) => {
                element.len() >= 2 * w && {
                    let count = if w == 1 {
                        element[1] as usize
                    } else {
                        u32::from_be_bytes(element[4..8].try_into().expect("4")) as usize
                    };
                    let items = &element[2 * w..];
                    count_values(items) == Some(count) && sizes_fit_at(items, depth + 1)
                }
            }
            (0xe, Some(w)) | (0xf, Some(w)) => array_fits(&element[w..], w == 4, depth + 1),
            _ => true,
        };
        if !nested_ok || depth > MAX_DESCRIPTOR_DEPTH * 4 {
            return false;
        }
        at += len;
    }
    true
}

/// The numeric descriptor of the described value at the start of `bytes` — a small ulong
/// (`0x53`) or a ulong (`0x80`); symbolic descriptors give `None` — and where its value starts.
pub fn descriptor(bytes: &[u8]) -> Option<(u64, usize)> {
    if *bytes.first()? != 0x00 {
        return None;
    }
    match *bytes.get(1)? {
        0x53 => Some((*bytes.get(2)? as u64, 3)),
        0x80 => Some((u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?), 10)),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompoundKind {
    List,
    Map,
}

/// A list or map: how many items it holds (a map counts keys and values), their encoded
/// bytes, and what follows the compound in the input.
#[derive(Debug)]
pub struct Compound<'a> {
    pub kind: CompoundKind,
    pub count: usize,
    pub items: &'a [u8],
    pub rest: &'a [u8],
}

/// The list or map at the start of `bytes`.
pub fn compound(bytes: &[u8]) -> Option<Compound<'_>> {
    let (kind, count, items_at, end) = match *bytes.first()? {
        0x45 => (CompoundKind::List, 0, 1, 1),
        code @ (0xc0 | 0xc1) => (
            kind(code),
            *bytes.get(2)? as usize,
            3,
            2 + *bytes.get(1)? as usize,
        ),
        code @ (0xd0 | 0xd1) => (
            kind(code),
            u32::from_be_bytes(bytes.get(5..9)?.try_into().ok()?) as usize,
            9,
            5 + u32::from_be_bytes(bytes.get(1..5)?.try_into().ok()?) as usize,
        ),
        _ => return None,
    };
    Some(Compound {
        kind,
        count,
        items: bytes.get(items_at..end)?,
        rest: bytes.get(end..)?,
    })
}

fn kind(code: u8) -> CompoundKind {
    if code & 1 == 0 {
        CompoundKind::List
    } else {
        CompoundKind::Map
    }
}

/// Writes the constructor, size and count of a list or map whose items take `items_len` bytes:
/// the 8-bit form when it fits, else the 32-bit one; `None` past the 32-bit form.
pub fn write_compound_header(
    out: &mut Vec<u8>,
    kind: CompoundKind,
    count: usize,
    items_len: usize,
) -> Option<()> {
    let map = u8::from(kind == CompoundKind::Map);
    if items_len < 255 && count <= 255 {
        out.extend_from_slice(&[0xc0 | map, (items_len + 1) as u8, count as u8]);
    } else {
        out.push(0xd0 | map);
        out.extend_from_slice(&u32::try_from(items_len + 4).ok()?.to_be_bytes());
        out.extend_from_slice(&u32::try_from(count).ok()?.to_be_bytes());
    }
    Some(())
}

/// Decodes bytes a client sent as a message, guarded against the decoder's own faults, which
/// the fuzz targets found in serde_amqp: it allocates whatever size a string or binary
/// declares before checking the bytes are there (13 bytes can ask for 4 GB), and some
/// malformed inputs make its arithmetic overflow (a panic in debug builds). Declared sizes are
/// checked first ([`sizes_fit`]) and a panic becomes a decode error, so one bad event
/// costs its sender an error, never the hub its memory or a task.
pub(crate) fn decode_message(bytes: &[u8]) -> Result<crate::AmqpMessage, String> {
    if !sizes_fit(bytes) {
        return Err("a value declares more bytes than the message holds".into());
    }
    match std::panic::catch_unwind(|| {
        serde_amqp::from_slice::<
            fe2o3_amqp::types::messaging::message::__private::Deserializable<crate::AmqpMessage>,
        >(bytes)
    }) {
        Ok(Ok(decoded)) => Ok(decoded.0),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the message could not be decoded".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_lengths_follow_the_format_codes() {
        assert_eq!(value_len(&[0x40]), Some(1));
        assert_eq!(value_len(&[0x52, 7]), Some(2));
        assert_eq!(value_len(&[0x81, 0, 0, 0, 0, 0, 0, 0, 1]), Some(9));
        assert_eq!(value_len(&[0x98; 17]), Some(17));
        assert_eq!(value_len(&[0xa1, 2, b'h', b'i', 0xff]), Some(4));
        assert_eq!(value_len(&[0xb0, 0, 0, 0, 1, 9]), Some(6));
        assert_eq!(value_len(&[0x00, 0x53, 0x75, 0xa0, 1, 9]), Some(6));
        assert_eq!(value_len(&[0xa1, 5, b'h']), None, "runs past the end");
        assert_eq!(value_len(&[0x20]), None, "no such format code");
        assert_eq!(value_len(&[0x00; 64]), None, "nested descriptors");
    }

    #[test]
    fn declared_sizes_must_fit_at_every_level() {
        assert!(sizes_fit(&[0x00, 0x53, 0x75, 0xa0, 1, 9]));
        assert!(sizes_fit(&[0xc0, 3, 2, 0x41, 0x42, 0x40]));
        // The fuzz target's input: a symbol declaring 4 GB at the top.
        assert!(!sizes_fit(&[
            0xb3, 0xff, 0xff, 0xff, 0x53, 0x75, 0x78, 0xe4, 0x3a, 0x06, 0x07, 0xe4
        ]));
        // The same inside a list whose own size fits.
        assert!(!sizes_fit(&[0xc0, 6, 1, 0xb3, 0xff, 0xff, 0xff, 0xff]));
        assert!(!sizes_fit(&[0x00, 0x53, 0x75, 0xb0, 0x7f, 0, 0, 0]));
        // In an array of symbols: the first fits, the second declares 4 GB.
        assert!(sizes_fit(&[0xe0, 6, 2, 0xa3, 1, b'a', 1, b'b']));
        assert!(!sizes_fit(&[
            0xe0, 9, 2, 0xb3, 0, 0, 0, 1, b'a', 0xff, 0xff
        ]));
    }

    #[test]
    fn descriptors_small_and_full_ulongs_only() {
        assert_eq!(descriptor(&[0x00, 0x53, 0x72, 0xc1]), Some((0x72, 3)));
        let mut full = vec![0x00, 0x80];
        full.extend_from_slice(&0x72u64.to_be_bytes());
        assert_eq!(descriptor(&full), Some((0x72, 10)));
        assert_eq!(descriptor(&[0x00, 0xa3, 0x01, b'x']), None, "a symbol");
        assert_eq!(descriptor(&[0x41]), None, "not described");
    }

    #[test]
    fn compounds_read_back_what_their_headers_write() {
        for (kind, count, items_len) in [
            (CompoundKind::List, 3, 10),
            (CompoundKind::Map, 4, 254),
            (CompoundKind::Map, 2, 255),
            (CompoundKind::List, 300, 400),
        ] {
            let mut bytes = Vec::new();
            write_compound_header(&mut bytes, kind, count, items_len).unwrap();
            let header = bytes.len();
            bytes.extend(std::iter::repeat_n(0x40, items_len));
            bytes.extend_from_slice(b"after");
            let read = compound(&bytes).unwrap();
            assert_eq!((read.kind, read.count), (kind, count));
            assert_eq!(read.items, &bytes[header..header + items_len]);
            assert_eq!(read.rest, b"after");
            assert_eq!(value_len(&bytes), Some(header + items_len));
        }
        let empty = compound(&[0x45, 0x99]).unwrap();
        assert_eq!(
            (empty.kind, empty.count, empty.items, empty.rest),
            (CompoundKind::List, 0, &[][..], &[0x99][..])
        );
        assert!(compound(&[0xc0, 9, 1, 0x40]).is_none(), "size past the end");
        assert!(compound(&[0xa1, 0]).is_none(), "not a compound");
    }
}
