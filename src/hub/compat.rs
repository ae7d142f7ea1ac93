//! What the Python SDK's own AMQP stack needs of a server, beyond the AMQP standard.
//!
//! 1. A listener whose connections' maximum segment size fits in 15 bits. At connect, the Python
//!    package reads every TCP option of its socket and writes it back; Linux refuses
//!    `TCP_MAXSEG` above 32767 (EINVAL), and over loopback (MTU 65536) the segment size is 65483,
//!    so every producer and consumer connection to a local server fails with "[Errno 22] Invalid
//!    argument". Advertising a smaller segment size from the listener avoids it (`listen`).
//! 2. Every performative written with all of its fields (`FullFrames`):
//!
//! AMQP lets an encoder leave out a list's trailing null fields, and fe2o3 (our AMQP engine)
//! does. The Python `azure-eventhub` package's own AMQP stack does not accept that: it builds
//! each performative as a tuple of exactly its field count (`DispositionFrame.__new__() missing 1
//! required positional argument: 'batchable'`) and finds a transfer's payload by position. The
//! real service always sends full lists, so this stream wrapper pads the outgoing ones with
//! nulls — on the wire only, with no change to what they mean. Reads pass through.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The segment size the listener advertises: below Linux's 32767 limit on `TCP_MAXSEG`.
const LISTENER_MSS: u32 = 32_000;

/// A TCP listener whose connections the Python SDK can set its socket options on.
pub fn listen(address: std::net::SocketAddr) -> io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(address),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    // Only a refinement: where the platform does not allow it, connections still work for
    // every client but Python on loopback.
    let _ = socket.set_tcp_mss(LISTENER_MSS);
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// How many fields each performative has (AMQP 1.0 §2.7, §5.3).
fn field_count(frame_type: u8, code: u64) -> Option<usize> {
    match (frame_type, code) {
        (0, 0x10) => Some(10), // open
        (0, 0x11) => Some(8),  // begin
        (0, 0x12) => Some(14), // attach
        (0, 0x13) => Some(11), // flow
        (0, 0x14) => Some(11), // transfer
        (0, 0x15) => Some(6),  // disposition
        (0, 0x16) => Some(3),  // detach
        (0, 0x17) => Some(1),  // end
        (0, 0x18) => Some(1),  // close
        (1, 0x40) => Some(1),  // sasl-mechanisms
        (1, 0x42) => Some(1),  // sasl-challenge
        (1, 0x44) => Some(2),  // sasl-outcome
        _ => None,
    }
}

/// A frame with its performative's list padded to the full field count; `None` to keep it as is.
pub fn pad_frame(frame: &[u8]) -> Option<Vec<u8>> {
    let doff = *frame.get(4)? as usize * 4;
    let frame_type = *frame.get(5)?;
    let body = frame.get(doff..)?;
    if body.len() < 3 || body[0] != 0x00 {
        return None;
    }
    let (code, list_at) = match body[1] {
        0x53 => (body[2] as u64, 3),
        0x80 => (u64::from_be_bytes(body.get(2..10)?.try_into().ok()?), 10),
        _ => return None,
    };
    let need = field_count(frame_type, code)?;
    let list = body.get(list_at..)?;
    let (count, items, rest) = match *list.first()? {
        0x45 => (0usize, &list[1..1], &list[1..]),
        0xc0 => {
            let size = *list.get(1)? as usize;
            let count = *list.get(2)? as usize;
            (count, list.get(3..1 + 1 + size)?, list.get(1 + 1 + size..)?)
        }
        0xd0 => {
            let size = u32::from_be_bytes(list.get(1..5)?.try_into().ok()?) as usize;
            let count = u32::from_be_bytes(list.get(5..9)?.try_into().ok()?) as usize;
            (count, list.get(9..5 + size)?, list.get(5 + size..)?)
        }
        _ => return None,
    };
    if count >= need {
        return None;
    }
    let pad = need - count;
    let items_len = items.len() + pad;
    let mut out = Vec::with_capacity(frame.len() + pad + 8);
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&frame[4..doff]);
    out.extend_from_slice(&body[..list_at]);
    if items_len < 255 {
        out.push(0xc0);
        out.push((items_len + 1) as u8);
        out.push(need as u8);
    } else {
        out.push(0xd0);
        out.extend_from_slice(&((items_len + 4) as u32).to_be_bytes());
        out.extend_from_slice(&(need as u32).to_be_bytes());
    }
    out.extend_from_slice(items);
    out.extend(std::iter::repeat_n(0x40u8, pad));
    out.extend_from_slice(rest);
    let size = out.len() as u32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Some(out)
}

/// A stream whose outgoing AMQP frames are padded by `pad_frame`.
#[derive(Debug)]
pub struct FullFrames<S> {
    inner: S,
    pending: Vec<u8>,
    out: Vec<u8>,
    written: usize,
}

impl<S> FullFrames<S> {
    pub fn new(inner: S) -> Self {
        FullFrames {
            inner,
            pending: Vec::new(),
            out: Vec::new(),
            written: 0,
        }
    }

    /// Moves every complete protocol header or frame from `pending` to `out`.
    fn frame_pending(&mut self) {
        let mut at = 0;
        loop {
            let rest = &self.pending[at..];
            if rest.len() >= 8 && rest.starts_with(b"AMQP") {
                self.out.extend_from_slice(&rest[..8]);
                at += 8;
                continue;
            }
            if rest.len() < 8 {
                break;
            }
            let size = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            if size < 8 || rest.len() < size {
                break;
            }
            let frame = &rest[..size];
            if tracing::enabled!(tracing::Level::TRACE) && size > 10 {
                let channel = u16::from_be_bytes([frame[6], frame[7]]);
                let doff = frame[4] as usize * 4;
                let code = frame.get(doff + 2).copied().unwrap_or(0);
                tracing::trace!(channel, performative = code, size, "frame out");
            }
            match pad_frame(frame) {
                Some(padded) => self.out.extend_from_slice(&padded),
                None => self.out.extend_from_slice(frame),
            }
            at += size;
        }
        self.pending.drain(..at);
    }
}

impl<S: AsyncWrite + Unpin> FullFrames<S> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.out.len() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.out[self.written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FullFrames<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FullFrames<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // Back-pressure: take no more while a lot is still waiting for the socket.
        if self.out.len() - self.written > 1 << 20 {
            match self.poll_drain(cx) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
            }
        }
        self.pending.extend_from_slice(buf);
        self.frame_pending();
        if let Poll::Ready(Err(e)) = self.poll_drain(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.poll_drain(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(frame_type: u8, performative: &[u8], payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0, 0, 0, 0, 2, frame_type, 0, 1];
        f.extend_from_slice(performative);
        f.extend_from_slice(payload);
        let size = f.len() as u32;
        f[..4].copy_from_slice(&size.to_be_bytes());
        f
    }

    #[test]
    fn pads_a_short_disposition_with_nulls() {
        // disposition(role=true, first=0, last=0 omitted..., settled=true): 4 of 6 fields.
        let short = frame(
            0,
            &[0x00, 0x53, 0x15, 0xc0, 0x05, 0x04, 0x41, 0x43, 0x43, 0x41],
            &[],
        );
        let padded = pad_frame(&short).unwrap();
        assert_eq!(
            &padded[8..],
            &[
                0x00, 0x53, 0x15, 0xc0, 0x07, 0x06, 0x41, 0x43, 0x43, 0x41, 0x40, 0x40
            ]
        );
        assert_eq!(
            u32::from_be_bytes(padded[..4].try_into().unwrap()) as usize,
            padded.len()
        );
    }

    #[test]
    fn keeps_a_transfers_payload_after_the_padded_list() {
        let short = frame(0, &[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43], b"payload");
        let padded = pad_frame(&short).unwrap();
        assert!(padded.ends_with(b"payload"));
        assert_eq!(padded[12] as usize, 1 + 1 + 10); // size: count byte + item + 10 nulls
        assert_eq!(padded[13], 11); // count
    }

    #[test]
    fn leaves_full_frames_heartbeats_and_empty_lists_right() {
        let end = frame(0, &[0x00, 0x53, 0x17, 0xc0, 0x02, 0x01, 0x40], &[]);
        assert!(pad_frame(&end).is_none());
        let heartbeat = vec![0, 0, 0, 8, 2, 0, 0, 0];
        assert!(pad_frame(&heartbeat).is_none());
        let close = frame(0, &[0x00, 0x53, 0x18, 0x45], &[]);
        assert_eq!(
            &pad_frame(&close).unwrap()[8..],
            &[0x00, 0x53, 0x18, 0xc0, 0x02, 0x01, 0x40]
        );
    }

    #[tokio::test]
    async fn a_stream_written_in_pieces_comes_out_padded() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(4096);
        let mut wrapped = FullFrames::new(server);
        let mut bytes = b"AMQP\x00\x01\x00\x00".to_vec();
        bytes.extend(frame(0, &[0x00, 0x53, 0x18, 0x45], &[]));
        bytes.extend(frame(0, &[0x00, 0x53, 0x17, 0xc0, 0x02, 0x01, 0x40], &[]));
        for piece in bytes.chunks(3) {
            wrapped.write_all(piece).await.unwrap();
        }
        wrapped.flush().await.unwrap();
        drop(wrapped);
        let mut received = Vec::new();
        let mut client = client;
        client.read_to_end(&mut received).await.unwrap();
        let mut expected = b"AMQP\x00\x01\x00\x00".to_vec();
        expected.extend(frame(0, &[0x00, 0x53, 0x18, 0xc0, 0x02, 0x01, 0x40], &[]));
        expected.extend(frame(0, &[0x00, 0x53, 0x17, 0xc0, 0x02, 0x01, 0x40], &[]));
        assert_eq!(received, expected);
    }
}
