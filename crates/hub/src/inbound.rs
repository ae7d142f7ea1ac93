//! What a client sends, checked before fe2o3 decodes it (pure; `wire` runs it on every read).
//!
//! fe2o3's decoder (serde_amqp) trusts the sizes and counts a value declares: a 12-byte frame
//! whose performative is a list declaring 4 GB and 4 billion items made the hub touch 260 MB
//! before it gave up, and a message declaring a 4 GB symbol asks for 4 GB. So the hub lets a
//! frame through only once all of it has arrived and its performative's declared sizes fit in
//! it (`encoding::sizes_fit`), and a transfer's message only once every frame of it has arrived
//! and the whole message passes the same walk. Frames over the limit, frame headers that cannot
//! be, and anything that fails the walk end the connection: these are not mistakes an SDK
//! makes, and there is no AMQP way to answer one frame. A message that passes, but still does
//! not decode, is rejected by the link with `amqp:decode-error` (`links`).
//!
//! The bytes of unfinished multi-frame deliveries are kept here until their last frame (they
//! are passed on at once, as fe2o3 needs them to keep its session's counts), up to
//! `max_unfinished_bytes` per connection.

use std::collections::HashMap;

use super::encoding;

/// Why a connection's input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InboundError {
    #[error("a frame of {size} bytes, over the {limit}-byte max-frame-size")]
    FrameTooLarge { size: usize, limit: usize },
    #[error("a frame header that cannot be (size {size}, data offset {offset})")]
    BadFrameHeader { size: usize, offset: usize },
    #[error("a performative whose declared sizes do not fit in its frame")]
    MalformedPerformative,
    #[error("a transferred message whose declared sizes do not fit in it")]
    MalformedMessage,
    #[error("more than {limit} bytes of unfinished deliveries on one connection")]
    TooManyUnfinished { limit: usize },
}

/// The checks' state for one connection's input.
#[derive(Debug)]
pub struct FrameGuard {
    max_frame_bytes: usize,
    max_unfinished_bytes: usize,
    /// The payload so far of each delivery whose last frame has not arrived, by (channel, handle).
    unfinished: HashMap<(u16, u32), Vec<u8>>,
    unfinished_bytes: usize,
}

const TRANSFER: u64 = 0x14;

impl FrameGuard {
    pub fn new(max_frame_bytes: usize, max_unfinished_bytes: usize) -> Self {
        FrameGuard {
            max_frame_bytes,
            max_unfinished_bytes,
            unfinished: HashMap::new(),
            unfinished_bytes: 0,
        }
    }

    /// How many bytes at the start of `input` are whole protocol headers and frames that passed
    /// the checks (what may go to the decoder now); the rest waits for more input.
    pub fn admit(&mut self, input: &[u8]) -> Result<usize, InboundError> {
        let mut at = 0;
        loop {
            let rest = &input[at..];
            if rest.len() < 8 {
                return Ok(at);
            }
            if rest.starts_with(b"AMQP") {
                at += 8;
                continue;
            }
            let size = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            let offset = rest[4] as usize * 4;
            if size > self.max_frame_bytes {
                return Err(InboundError::FrameTooLarge {
                    size,
                    limit: self.max_frame_bytes,
                });
            }
            if size < 8 || offset < 8 || offset > size {
                return Err(InboundError::BadFrameHeader { size, offset });
            }
            if rest.len() < size {
                return Ok(at);
            }
            let channel = u16::from_be_bytes([rest[6], rest[7]]);
            let body = &rest[offset..size];
            if !body.is_empty() {
                self.check_body(rest[5], channel, body)?;
            }
            at += size;
        }
    }

    fn check_body(
        &mut self,
        frame_type: u8,
        channel: u16,
        body: &[u8],
    ) -> Result<(), InboundError> {
        let performative_len =
            encoding::value_len(body).ok_or(InboundError::MalformedPerformative)?;
        let performative = &body[..performative_len];
        if !encoding::sizes_fit(performative) {
            return Err(InboundError::MalformedPerformative);
        }
        if frame_type != 0 {
            return Ok(());
        }
        let Some((TRANSFER, list_at)) = encoding::descriptor(performative) else {
            return Ok(());
        };
        let fields = encoding::compound(&performative[list_at..])
            .ok_or(InboundError::MalformedPerformative)?;
        let (handle, more, aborted) =
            transfer_fields(fields.items).ok_or(InboundError::MalformedPerformative)?;
        let payload = &body[performative_len..];
        let key = (channel, handle);
        if aborted {
            // The sender gave the delivery up: its frames are discarded, never decoded.
            if let Some(dropped) = self.unfinished.remove(&key) {
                self.unfinished_bytes -= dropped.len();
            }
            return Ok(());
        }
        if more {
            self.unfinished_bytes += payload.len();
            if self.unfinished_bytes > self.max_unfinished_bytes {
                return Err(InboundError::TooManyUnfinished {
                    limit: self.max_unfinished_bytes,
                });
            }
            self.unfinished
                .entry(key)
                .or_default()
                .extend_from_slice(payload);
            return Ok(());
        }
        let fits = match self.unfinished.remove(&key) {
            Some(mut message) => {
                self.unfinished_bytes -= message.len();
                message.extend_from_slice(payload);
                encoding::sizes_fit(&message)
            }
            None => encoding::sizes_fit(payload),
        };
        if fits {
            Ok(())
        } else {
            Err(InboundError::MalformedMessage)
        }
    }
}

/// A transfer's handle, `more` and `aborted` fields (AMQP 1.0 §2.7.5: fields 0, 5 and 10).
fn transfer_fields(mut items: &[u8]) -> Option<(u32, bool, bool)> {
    let mut handle = None;
    let mut more = false;
    let mut aborted = false;
    for index in 0..=10 {
        if items.is_empty() {
            break;
        }
        let len = encoding::value_len(items)?;
        let value = &items[..len];
        match index {
            0 => handle = uint(value),
            5 => more = boolean(value)?,
            10 => aborted = boolean(value)?,
            _ => {}
        }
        items = &items[len..];
    }
    Some((handle?, more, aborted))
}

fn uint(value: &[u8]) -> Option<u32> {
    match value {
        [0x43] => Some(0),
        [0x52, v] => Some(*v as u32),
        [0x70, a, b, c, d] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// A boolean field; null is the default, false.
fn boolean(value: &[u8]) -> Option<bool> {
    match value {
        [0x41] | [0x56, 0x01] => Some(true),
        [0x42] | [0x56, 0x00] | [0x40] => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(channel: u16, body: &[u8]) -> Vec<u8> {
        let mut out = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&channel.to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    /// A transfer on `handle` with `more`, followed by `payload`.
    fn transfer(handle: u8, more: bool, payload: &[u8]) -> Vec<u8> {
        // handle, delivery-id, delivery-tag, message-format, settled, more
        let items = [
            &[0x52, handle][..],
            &[0x43],
            &[0xa0, 1, 7],
            &[0x43],
            &[0x42],
            &[if more { 0x41 } else { 0x42 }],
        ]
        .concat();
        let mut body = vec![0x00, 0x53, 0x14, 0xc0, (items.len() + 1) as u8, 6];
        body.extend_from_slice(&items);
        body.extend_from_slice(payload);
        body
    }

    fn guard() -> FrameGuard {
        FrameGuard::new(4096, 1000)
    }

    const DATA_SECTION: &[u8] = &[0x00, 0x53, 0x75, 0xa0, 0x03, b'a', b'b', b'c'];

    #[test]
    fn whole_frames_and_headers_pass_and_a_partial_one_waits() {
        let mut input = b"AMQP\x00\x01\x00\x00".to_vec();
        input.extend(frame(0, &transfer(1, false, DATA_SECTION)));
        let whole = input.len();
        input.extend(frame(0, &transfer(1, false, DATA_SECTION)));
        input.truncate(input.len() - 3);
        assert_eq!(guard().admit(&input), Ok(whole));
        // Heartbeats (empty frames) pass too.
        assert_eq!(guard().admit(&frame(0, &[])), Ok(8));
        assert_eq!(guard().admit(b"AMQP"), Ok(0));
    }

    #[test]
    fn a_performative_declaring_more_than_its_frame_is_refused_before_it_arrives_whole() {
        // A begin whose list declares 4 GB and 4 billion items (this made fe2o3 touch 260 MB).
        let body = [
            0x00, 0x53, 0x11, 0xd0, 0xff, 0xff, 0xff, 0xf0, 0xff, 0xff, 0xff, 0xff,
        ];
        assert_eq!(
            guard().admit(&frame(0, &body)),
            Err(InboundError::MalformedPerformative)
        );
        assert_eq!(
            guard().admit(&frame(0, &[0x00, 0x53, 0x99])),
            Err(InboundError::MalformedPerformative)
        );
    }

    #[test]
    fn frame_headers_over_the_limit_or_impossible_are_refused_at_once() {
        assert_eq!(
            guard().admit(&[0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0]),
            Err(InboundError::FrameTooLarge {
                size: u32::MAX as usize,
                limit: 4096
            })
        );
        assert!(matches!(
            guard().admit(&[0, 0, 0, 4, 2, 0, 0, 0]),
            Err(InboundError::BadFrameHeader { .. })
        ));
        assert!(matches!(
            guard().admit(&[0, 0, 0, 16, 9, 0, 0, 0]),
            Err(InboundError::BadFrameHeader { .. })
        ));
    }

    #[test]
    fn a_message_declaring_more_than_it_holds_is_refused_even_split_over_frames() {
        // A symbol declaring 4 GB, in one frame.
        let bomb = [0x00, 0x53, 0x77, 0xb3, 0xff, 0xff, 0xff, 0xff, b'x'];
        assert_eq!(
            guard().admit(&frame(0, &transfer(1, false, &bomb))),
            Err(InboundError::MalformedMessage)
        );
        // The same, its declaration in the first frame and a byte in the last.
        let mut guard = guard();
        let first = frame(0, &transfer(1, true, &bomb[..8]));
        assert_eq!(guard.admit(&first), Ok(first.len()));
        assert_eq!(
            guard.admit(&frame(0, &transfer(1, false, &bomb[8..]))),
            Err(InboundError::MalformedMessage)
        );
    }

    #[test]
    fn a_message_split_over_frames_is_checked_whole_per_link() {
        let mut guard = guard();
        let mut input = frame(0, &transfer(1, true, &DATA_SECTION[..5]));
        // Another link's delivery in between.
        input.extend(frame(0, &transfer(2, false, DATA_SECTION)));
        input.extend(frame(0, &transfer(1, false, &DATA_SECTION[5..])));
        assert_eq!(guard.admit(&input), Ok(input.len()));
        assert_eq!(guard.unfinished_bytes, 0);
        assert!(guard.unfinished.is_empty());
    }

    #[test]
    fn unfinished_deliveries_are_bounded_per_connection() {
        let mut guard = guard();
        let chunk = vec![0u8; 400];
        let mut admitted = 0;
        let result = (0..3u8).try_for_each(|handle| {
            let f = frame(0, &transfer(handle, true, &chunk));
            admitted += guard.admit(&f)?;
            Ok(())
        });
        assert_eq!(result, Err(InboundError::TooManyUnfinished { limit: 1000 }));
        assert!(admitted > 0);
    }
}
