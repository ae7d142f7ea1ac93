//! What goes on the wire beyond fe2o3's defaults: what the Python SDK's own AMQP stack needs of a
//! server, and what lets the hub stream events cheaply.
//!
//! 1. A listener whose connections' maximum segment size fits in 15 bits. At connect, the Python
//!    package reads every TCP option of its socket and writes it back; Linux refuses
//!    `TCP_MAXSEG` above 32767 (EINVAL), and over loopback (MTU 65536) the segment size is 65483,
//!    so every producer and consumer connection to a local server fails with "[Errno 22] Invalid
//!    argument". Advertising a smaller segment size from the listener avoids it (`listen`).
//! 2. Every performative written with all of its fields. AMQP lets an encoder leave out a list's
//!    trailing null fields, and fe2o3 (our AMQP engine) does. The Python `azure-eventhub`
//!    package's own AMQP stack does not accept that: it builds each performative as a tuple of
//!    exactly its field count (`DispositionFrame.__new__() missing 1 required positional
//!    argument: 'batchable'`) and finds a transfer's payload by position. The real service always
//!    sends full lists, so outgoing ones are padded with nulls — on the wire only, with no change
//!    to what they mean.
//! 3. Pre-encoded deliveries. fe2o3 sends only typed messages, and decoding each stored event
//!    to encode it again was most of the hub's work when streaming (`received`). A consumer link
//!    sends the finished bytes wrapped as an amqp-value holding a binary, under the private
//!    message format `PRE_ENCODED`; here that wrapper is taken off again and the format set
//!    to 0, so the client receives exactly the finished bytes.
//! 4. Writes gathered: fe2o3 flushes after every frame, one `sendto` per event; a writer task
//!    of the connection's own writes whatever gathered meanwhile in one call (`WireStream`).
//!
//! Reads reach fe2o3 unchanged, but only whole frames that `inbound::FrameGuard` has checked:
//! what fe2o3's decoder would trust and should not is refused there, and the connection ends.
//! Until the connection authenticates, what waits for the rest of a frame is charged to the
//! hub's budget for unauthenticated connections (`connections::Meter`), and reads are small.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf, ReadHalf};
use tokio::sync::Notify;

use super::connections::Meter;
use super::encoding::{self, CompoundKind};
use super::inbound::FrameGuard;

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

/// The message format of a pre-encoded delivery (never seen by a client): the transfer's payload
/// is an amqp-value section holding a binary, whose content is the message to put on the wire.
pub const PRE_ENCODED: u32 = 0x8001_37ee;

/// The position of a performative's field list in `frame`, if the frame is a performative.
struct Performative<'a> {
    /// Everything before the list: frame header and descriptor.
    head: &'a [u8],
    code: u64,
    count: usize,
    items: &'a [u8],
    /// What follows the list: a transfer's payload.
    payload: &'a [u8],
}

fn performative(frame: &[u8]) -> Option<Performative<'_>> {
    let doff = *frame.get(4)? as usize * 4;
    let body = frame.get(doff..)?;
    let (code, list_at) = encoding::descriptor(body)?;
    let list = encoding::compound(&body[list_at..])?;
    if list.kind != CompoundKind::List {
        return None;
    }
    Some(Performative {
        head: &frame[..doff + list_at],
        code,
        count: list.count,
        items: list.items,
        payload: list.rest,
    })
}

/// Where a pre-encoded transfer's message-format field is (within the items) and how many bytes
/// of wrapper open its payload; `None` for any other frame.
fn pre_encoded(p: &Performative) -> Option<(usize, usize)> {
    if p.code != 0x14 || p.count < 4 {
        return None;
    }
    // handle, delivery-id, delivery-tag, then message-format.
    let mut at = 0;
    for _ in 0..3 {
        at += encoding::value_len(&p.items[at..])?;
    }
    let format = p.items.get(at..at + 5)?;
    if format[0] != 0x70 || format[1..] != PRE_ENCODED.to_be_bytes() {
        return None;
    }
    let wrapper = match p.payload.get(..4)? {
        [0x00, 0x53, 0x77, 0xa0] => 5,
        [0x00, 0x53, 0x77, 0xb0] => 8,
        _ => return None,
    };
    (p.payload.len() >= wrapper).then_some((at, wrapper))
}

/// Appends `frame` to `out` as it goes on the wire: its performative padded to all its fields,
/// and a pre-encoded transfer unwrapped (only a delivery's first frame has the wrapper; fe2o3
/// clears the message format on the frames that continue it).
pub fn write_frame(frame: &[u8], out: &mut Vec<u8>) {
    let frame_type = frame.get(5).copied().unwrap_or(0);
    let Some(p) = performative(frame) else {
        out.extend_from_slice(frame);
        return;
    };
    let Some(need) = field_count(frame_type, p.code) else {
        out.extend_from_slice(frame);
        return;
    };
    let unwrap = pre_encoded(&p);
    if p.count >= need && unwrap.is_none() {
        out.extend_from_slice(frame);
        return;
    }
    let start = out.len();
    let fields = p.count.max(need);
    let items_len = p.items.len() + (fields - p.count);
    out.extend_from_slice(p.head);
    // A performative is far below 4 GiB: fe2o3 bounds frames by the negotiated frame size.
    encoding::write_compound_header(out, CompoundKind::List, fields, items_len)
        .expect("a frame's list fits the 32-bit form");
    let payload = match unwrap {
        Some((format_at, wrapper)) => {
            // The format becomes 0 in the same five bytes (a uint), so nothing else moves.
            out.extend_from_slice(&p.items[..format_at]);
            out.extend_from_slice(&[0x70, 0, 0, 0, 0]);
            out.extend_from_slice(&p.items[format_at + 5..]);
            &p.payload[wrapper..]
        }
        None => {
            out.extend_from_slice(p.items);
            p.payload
        }
    };
    out.extend(std::iter::repeat_n(0x40u8, fields - p.count));
    out.extend_from_slice(payload);
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// A stream whose outgoing AMQP frames are rewritten by `write_frame` and written by a task of
/// their own.
///
/// fe2o3 flushes after every frame, which on a consumer's link is one `sendto` per event: a sixth
/// of the hub's CPU when it streams events. Here a flush only hands the bytes over; the writer
/// task writes whatever has gathered meanwhile in one call, so under load many frames share a
/// system call (and the client's reads get fuller too), and when idle a frame still leaves at once.
pub struct WireStream<S> {
    reader: ReadHalf<S>,
    pending: Vec<u8>,
    outbox: Arc<Outbox>,
    inbound: Inbound,
}

/// What has been read from the client and not yet handed to fe2o3.
struct Inbound {
    guard: FrameGuard,
    bytes: Vec<u8>,
    /// How many of `bytes` passed the guard.
    admitted: usize,
    /// Why the input was refused, once it was: reported after the admitted bytes.
    refused: Option<String>,
    scratch: Box<[u8]>,
    /// What `bytes` holds is charged here until the connection authenticates (none: never).
    meter: Option<Meter>,
}

/// The size a frame's header declares, once the 8 bytes of one are at the start of `rest` (a
/// protocol header is not a frame: 0).
fn declared_frame(rest: &[u8]) -> usize {
    if rest.len() < 8 || rest.starts_with(b"AMQP") {
        return 0;
    }
    u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize
}

/// What one read takes at most: once authenticated, and before.
const READ_BYTES: usize = 64 * 1024;
const UNAUTHENTICATED_READ_BYTES: usize = 4 * 1024;

/// The bytes waiting for the writer task, shared between it and the stream.
#[derive(Default)]
struct Outbox {
    state: Mutex<OutboxState>,
    ready: Notify,
}

#[derive(Default)]
struct OutboxState {
    bytes: Vec<u8>,
    /// Set once the stream is shut down or dropped: the writer writes what is left and ends.
    closed: bool,
    /// What ended the writer early; every later write fails with it.
    failed: Option<io::ErrorKind>,
    /// A write waiting for room (back-pressure).
    blocked: Option<Waker>,
}

/// How much may wait for the socket before writes wait too.
const OUTBOX_LIMIT: usize = 1 << 20;

impl<S: AsyncRead + AsyncWrite + Send + 'static> WireStream<S> {
    /// Wraps `stream`, its input checked by `guard` and, until the connection authenticates,
    /// charged to `meter`; needs a tokio runtime, where the writer task runs.
    pub fn new(stream: S, guard: FrameGuard, meter: Option<Meter>) -> Self {
        let (reader, writer) = tokio::io::split(stream);
        let outbox = Arc::new(Outbox::default());
        tokio::spawn(write_out(writer, outbox.clone()));
        WireStream {
            reader,
            pending: Vec::new(),
            outbox,
            inbound: Inbound {
                guard,
                bytes: Vec::new(),
                admitted: 0,
                refused: None,
                scratch: vec![
                    0;
                    if meter.is_some() {
                        UNAUTHENTICATED_READ_BYTES
                    } else {
                        READ_BYTES
                    }
                ]
                .into_boxed_slice(),
                meter,
            },
        }
    }
}

impl<S> WireStream<S> {
    /// Moves every complete protocol header or frame from `pending` to `out`, rewritten.
    fn frame_pending(&mut self, out: &mut Vec<u8>) {
        let mut at = 0;
        loop {
            let rest = &self.pending[at..];
            if rest.len() >= 8 && rest.starts_with(b"AMQP") {
                out.extend_from_slice(&rest[..8]);
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
            write_frame(frame, out);
            at += size;
        }
        self.pending.drain(..at);
    }

    fn close(&self) {
        self.outbox.state.lock().expect("outbox lock").closed = true;
        self.outbox.ready.notify_one();
    }
}

impl<S> std::fmt::Debug for WireStream<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireStream")
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl<S> Drop for WireStream<S> {
    fn drop(&mut self) {
        self.close();
    }
}

/// The writer task: waits for bytes, lets more gather for one scheduling round, writes them all.
async fn write_out<W: AsyncWrite + Unpin>(mut socket: W, outbox: Arc<Outbox>) {
    let mut batch = Vec::new();
    loop {
        outbox.ready.notified().await;
        tokio::task::yield_now().await;
        loop {
            let closed = {
                let mut state = outbox.state.lock().expect("outbox lock");
                std::mem::swap(&mut state.bytes, &mut batch);
                if let Some(waiting) = state.blocked.take() {
                    waiting.wake();
                }
                state.closed
            };
            if batch.is_empty() {
                if closed {
                    let _ = socket.shutdown().await;
                    return;
                }
                break;
            }
            // Flushed for the transports that buffer (TLS, WebSocket messages); a no-op on TCP.
            let written = match socket.write_all(&batch).await {
                Ok(()) => socket.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                let mut state = outbox.state.lock().expect("outbox lock");
                state.failed = Some(e.kind());
                if let Some(waiting) = state.blocked.take() {
                    waiting.wake();
                }
                return;
            }
            batch.clear();
        }
    }
}

impl<S: AsyncRead> AsyncRead for WireStream<S> {
    /// Hands over admitted bytes; reads more (and checks them) when there are none.
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            let inbound = &mut this.inbound;
            if inbound.admitted > 0 {
                let n = inbound.admitted.min(buf.remaining());
                buf.put_slice(&inbound.bytes[..n]);
                inbound.bytes.drain(..n);
                inbound.admitted -= n;
                if inbound.bytes.is_empty()
                    && let Some(meter) = &mut inbound.meter
                    && !meter.is_authenticated()
                {
                    // Nothing waits: what held an unfinished frame is given back.
                    inbound.bytes = Vec::new();
                    let _ = meter.hold(0);
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(reason) = &inbound.refused {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    reason.clone(),
                )));
            }
            if inbound.scratch.len() < READ_BYTES
                && inbound.meter.as_ref().is_none_or(Meter::is_authenticated)
            {
                inbound.scratch = vec![0; READ_BYTES].into_boxed_slice();
            }
            let mut read = ReadBuf::new(&mut inbound.scratch);
            match Pin::new(&mut this.reader).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                // End of input: whatever partial frame is left is dropped with the connection.
                Poll::Ready(Ok(())) if read.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => {
                    inbound.bytes.extend_from_slice(read.filled());
                    match inbound.guard.admit(&inbound.bytes) {
                        Ok(n) => inbound.admitted = n,
                        Err(e) => {
                            tracing::warn!(error = %e, "connection closed: its input was refused");
                            inbound.refused = Some(e.to_string());
                            continue;
                        }
                    }
                    if let Some(meter) = &mut inbound.meter
                        && !meter.is_authenticated()
                    {
                        // Room for the whole of the frame being read, charged before it is
                        // made, and made once: grown read by read, the buffer's earlier sizes
                        // were memory the allocator kept long after.
                        let admitted = inbound.admitted;
                        let whole = admitted
                            + declared_frame(&inbound.bytes[admitted..])
                                .max(inbound.bytes.len() - admitted);
                        if let Err(over) = meter.hold(whole.max(inbound.bytes.capacity())) {
                            tracing::info!("connection closed: {over}");
                            inbound.refused = Some(over.to_string());
                            inbound.bytes = Vec::new();
                            inbound.admitted = 0;
                            continue;
                        }
                        inbound.bytes.reserve_exact(whole - inbound.bytes.len());
                    }
                }
            }
        }
    }
}

impl<S> AsyncWrite for WireStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let outbox = this.outbox.clone();
        let mut state = outbox.state.lock().expect("outbox lock");
        if let Some(kind) = state.failed {
            return Poll::Ready(Err(kind.into()));
        }
        if state.closed {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if state.bytes.len() > OUTBOX_LIMIT {
            state.blocked = Some(cx.waker().clone());
            return Poll::Pending;
        }
        this.pending.extend_from_slice(buf);
        this.frame_pending(&mut state.bytes);
        drop(state);
        outbox.ready.notify_one();
        Poll::Ready(Ok(buf.len()))
    }

    /// Handing the bytes to the writer task is the flush: they leave as soon as it runs.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.outbox.state.lock().expect("outbox lock").failed {
            Some(kind) => Poll::Ready(Err(kind.into())),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.close();
        Poll::Ready(Ok(()))
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

    fn rewritten(frame: &[u8]) -> Vec<u8> {
        let mut out = vec![0xff]; // something already waiting: the frame is appended after it
        write_frame(frame, &mut out);
        assert_eq!(out[0], 0xff);
        let out = out.split_off(1);
        assert_eq!(
            u32::from_be_bytes(out[..4].try_into().unwrap()) as usize,
            out.len(),
            "the frame's size field"
        );
        out
    }

    #[test]
    fn pads_a_short_disposition_with_nulls() {
        // disposition(role=true, first=0, last=0 omitted..., settled=true): 4 of 6 fields.
        let short = frame(
            0,
            &[0x00, 0x53, 0x15, 0xc0, 0x05, 0x04, 0x41, 0x43, 0x43, 0x41],
            &[],
        );
        let padded = rewritten(&short);
        assert_eq!(
            &padded[8..],
            &[
                0x00, 0x53, 0x15, 0xc0, 0x07, 0x06, 0x41, 0x43, 0x43, 0x41, 0x40, 0x40
            ]
        );
    }

    #[test]
    fn keeps_a_transfers_payload_after_the_padded_list() {
        let short = frame(0, &[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43], b"payload");
        let padded = rewritten(&short);
        assert!(padded.ends_with(b"payload"));
        assert_eq!(padded[12] as usize, 1 + 1 + 10); // size: count byte + item + 10 nulls
        assert_eq!(padded[13], 11); // count
    }

    #[test]
    fn leaves_full_frames_heartbeats_and_empty_lists_right() {
        let end = frame(0, &[0x00, 0x53, 0x17, 0xc0, 0x02, 0x01, 0x40], &[]);
        assert_eq!(rewritten(&end), end);
        let heartbeat = vec![0, 0, 0, 8, 2, 0, 0, 0];
        assert_eq!(rewritten(&heartbeat), heartbeat);
        let close = frame(0, &[0x00, 0x53, 0x18, 0x45], &[]);
        assert_eq!(
            &rewritten(&close)[8..],
            &[0x00, 0x53, 0x18, 0xc0, 0x02, 0x01, 0x40]
        );
    }

    /// transfer(handle 0, delivery-id 7, delivery-tag 4 bytes, message-format, settled).
    fn transfer(format: u32) -> Vec<u8> {
        let mut p = vec![
            0x00, 0x53, 0x14, 0xc0, 0, 5, 0x43, 0x52, 0x07, 0xa0, 4, 1, 2, 3, 4,
        ];
        p.push(0x70);
        p.extend_from_slice(&format.to_be_bytes());
        p.push(0x41);
        p[4] = (p.len() - 5) as u8;
        p
    }

    #[test]
    fn a_pre_encoded_transfer_goes_out_as_the_message_it_wraps() {
        let message = b"\x00\x53\x75\xa0\x05hello";
        for wrapper in [
            vec![0x00, 0x53, 0x77, 0xa0, message.len() as u8],
            [
                vec![0x00, 0x53, 0x77, 0xb0],
                (message.len() as u32).to_be_bytes().to_vec(),
            ]
            .concat(),
        ] {
            let sent = frame(0, &transfer(PRE_ENCODED), &[&wrapper[..], message].concat());
            let out = rewritten(&sent);
            let mut expected = transfer(0);
            expected.extend([0x40; 6]); // padded from 5 to 11 fields
            expected[4] += 6;
            expected[5] = 11;
            assert_eq!(out, frame(0, &expected, message));
        }
    }

    #[test]
    fn other_transfers_keep_their_payload() {
        // Format 0 with a payload that happens to start like the wrapper: left alone.
        let payload = [0x00, 0x53, 0x77, 0xa0, 0x01, 0x41];
        let out = rewritten(&frame(0, &transfer(0), &payload));
        assert!(out.ends_with(&payload));
        // A continuation frame (fe2o3 leaves the format out): left alone.
        let continuation = frame(0, &[0x00, 0x53, 0x14, 0xc0, 0x02, 0x01, 0x43], b"rest");
        assert!(rewritten(&continuation).ends_with(b"rest"));
        // The marker without the wrapper is not unwrapped either.
        let out = rewritten(&frame(0, &transfer(PRE_ENCODED), b"plain"));
        assert!(out.ends_with(b"plain"));
    }

    #[tokio::test]
    async fn a_stream_written_in_pieces_comes_out_rewritten() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(4096);
        let mut wrapped = WireStream::new(server, FrameGuard::new(1 << 16, 1 << 20), None);
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
