//! AMQP over WebSockets, as Event Hubs serves it to clients behind proxies and firewalls: an
//! HTTP upgrade on the path `/$servicebus/websocket` with the subprotocol `AMQPWSB10` (or the
//! binding's own name, `amqp`), then the
//! AMQP byte stream carried in binary messages (OASIS "AMQP WebSocket Binding"). Past the
//! upgrade, the connection is served exactly as a TCP one: `WebSocketIo` turns the messages back
//! into a byte stream, and `server` puts its frame guard and fe2o3 on top.
//!
//! What a client can make the hub hold here is bounded as over TCP: the upgrade request by the
//! WebSocket library's own limit on its size, and, with the AMQP open, by the open timeout; a
//! WebSocket frame or message by the hub's AMQP frame limit (plus room for one frame's header),
//! checked from the frame header before its payload is read; and until the connection
//! authenticates, what the WebSocket library has read towards a message not yet whole is
//! charged to the hub's budget for unauthenticated connections (`Metered`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};

use crate::connections::Meter;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

/// The path Event Hubs serves AMQP over WebSockets on.
pub const PATH: &str = "/$servicebus/websocket";
/// The WebSocket subprotocols of AMQP 1.0: the name Azure's SDKs ask for, and the OASIS
/// binding's own (which the Rust SDK's WebSocket layer asks for); the hub answers with the one
/// the client offered.
pub const SUBPROTOCOLS: [&str; 2] = ["AMQPWSB10", "amqp"];

/// The most bytes the hub puts in one message: what it writes at once can be many frames, and
/// clients bound a message's size (aiohttp, under the async Python SDK, at 4 MiB).
const MAX_MESSAGE_OUT: usize = 64 * 1024;

/// What the WebSocket library reads at once.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// Why an upgrade request is refused; each becomes an HTTP error with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeRefusal {
    #[error("AMQP over WebSockets is served on {PATH}, not on {0}")]
    WrongPath(String),
    #[error("the upgrade must ask for the WebSocket subprotocol AMQPWSB10 or amqp (AMQP 1.0)")]
    NoAmqpSubprotocol,
}

/// Checks an upgrade request's path and the subprotocols it offers (the values of its
/// `Sec-WebSocket-Protocol` headers, each a comma-separated list); the subprotocol to answer.
pub fn check_upgrade<'a>(
    path: &str,
    offered_protocols: impl IntoIterator<Item = &'a str>,
) -> Result<&'static str, UpgradeRefusal> {
    let path = path.split('?').next().unwrap_or_default();
    // The Rust SDK ends the path with a slash; some clients percent-encode the `$`.
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    if trimmed != PATH && !trimmed.eq_ignore_ascii_case("/%24servicebus/websocket") {
        return Err(UpgradeRefusal::WrongPath(path.to_string()));
    }
    offered_protocols
        .into_iter()
        .flat_map(|value| value.split(','))
        .find_map(|offered| {
            SUBPROTOCOLS
                .into_iter()
                .find(|p| offered.trim().eq_ignore_ascii_case(p))
        })
        .ok_or(UpgradeRefusal::NoAmqpSubprotocol)
}

/// Answers the upgrade on `stream`: a WebSocket carrying AMQP, or an error (the refusal is
/// sent to the client as an HTTP 400 or 404 first).
// The upgrade callback's error type is the WebSocket library's HTTP response.
#[allow(clippy::result_large_err)]
pub async fn accept<S>(
    stream: S,
    max_frame_bytes: usize,
    meter: Meter,
) -> Result<WebSocketIo<S>, tungstenite::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // One AMQP frame and a WebSocket frame's header: clients put at most one AMQP frame (or a
    // part of one) in a message; the hub's own messages are as large as what it gathered.
    let limit = max_frame_bytes + 64;
    // Reads of 8 KiB: the library zeroes its whole read buffer before each read, so its default
    // of 128 KiB made every connection, authenticated or not, hold 128 KiB from its upgrade on.
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_frame_size(Some(limit))
        .max_message_size(Some(limit));
    let check = |request: &Request, mut response: Response| {
        let offered = request
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok());
        match check_upgrade(request.uri().path(), offered) {
            Ok(subprotocol) => {
                response.headers_mut().insert(
                    "sec-websocket-protocol",
                    HeaderValue::from_static(subprotocol),
                );
                Ok(response)
            }
            Err(refusal) => {
                let status = match refusal {
                    UpgradeRefusal::WrongPath(_) => StatusCode::NOT_FOUND,
                    UpgradeRefusal::NoAmqpSubprotocol => StatusCode::BAD_REQUEST,
                };
                let mut error = ErrorResponse::new(Some(refusal.to_string()));
                *error.status_mut() = status;
                Err(error)
            }
        }
    };
    let stream = Metered {
        inner: stream,
        meter,
        message_limit: limit,
        in_message: false,
    };
    let socket =
        tokio_tungstenite::accept_hdr_async_with_config(stream, check, Some(config)).await?;
    Ok(WebSocketIo {
        socket,
        unread: Bytes::new(),
    })
}

/// A WebSocket carrying AMQP, as the byte stream AMQP expects: each binary message's bytes are
/// read in order; each write goes out as one binary message.
pub struct WebSocketIo<S> {
    socket: WebSocketStream<Metered<S>>,
    /// What is left of the last message read.
    unread: Bytes,
}

impl<S> std::fmt::Debug for WebSocketIo<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketIo")
            .field("unread", &self.unread.len())
            .finish()
    }
}

fn io_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed => {
            io::Error::from(io::ErrorKind::BrokenPipe)
        }
        other => io::Error::new(io::ErrorKind::InvalidData, other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WebSocketIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.unread.is_empty() {
                let n = self.unread.len().min(buf.remaining());
                buf.put_slice(&self.unread[..n]);
                self.unread.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.socket).poll_next(cx)) {
                // The end of the stream: the client closed (a close message) or went away.
                None | Some(Ok(Message::Close(_))) => return Poll::Ready(Ok(())),
                Some(Ok(Message::Binary(bytes))) => {
                    // The library has what it read as a message now (charged on with the AMQP
                    // frames it carries, in `wire`).
                    self.socket.get_mut().message_done();
                    self.unread = bytes;
                }
                // Pings are answered by the WebSocket library itself.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "AMQP over WebSockets travels in binary messages; a text message arrived",
                    )));
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WebSocketIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.socket).poll_ready(cx)).map_err(io_error)?;
        let part = &buf[..buf.len().min(MAX_MESSAGE_OUT)];
        Pin::new(&mut self.socket)
            .start_send(Message::Binary(Bytes::copy_from_slice(part)))
            .map_err(io_error)?;
        Poll::Ready(Ok(part.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_close(cx).map_err(io_error)
    }
}

/// The socket under the WebSocket library, charging `meter` (until the connection
/// authenticates) for what the library holds towards its next message: as soon as any of a
/// message has arrived, twice the largest message it may hold (`message_limit`), since the
/// library makes room for (and zeroes) a frame's whole declared payload once it has read the
/// frame's header, in a buffer that grows past it (charged once the limit, a budget of 16 MiB
/// let 300 connections each holding 260 KB take 33 MiB); nothing again once the message is
/// whole.
pub struct Metered<S> {
    inner: S,
    meter: Meter,
    message_limit: usize,
    in_message: bool,
}

impl<S> Metered<S> {
    fn message_done(&mut self) {
        if self.in_message {
            self.in_message = false;
            let _ = self.meter.hold(0);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let this = &mut *self;
        if buf.filled().len() > before && !this.in_message && !this.meter.is_authenticated() {
            this.in_message = true;
            if let Err(over) = this.meter.hold(2 * this.message_limit) {
                return Poll::Ready(Err(io::Error::other(over)));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_path_with_the_amqp_subprotocol_is_upgraded() {
        assert_eq!(check_upgrade(PATH, ["AMQPWSB10"]), Ok("AMQPWSB10"));
        assert_eq!(
            check_upgrade("/%24servicebus/websocket", ["amqpwsb10"]),
            Ok("AMQPWSB10")
        );
        assert_eq!(
            check_upgrade("/$servicebus/websocket?x=1", ["chat, AMQPWSB10"]),
            Ok("AMQPWSB10")
        );
        assert_eq!(check_upgrade(PATH, ["chat", "AMQPWSB10"]), Ok("AMQPWSB10"));
        assert_eq!(
            check_upgrade("/$servicebus/websocket/", ["amqp"]),
            Ok("amqp")
        );
    }

    #[test]
    fn other_paths_and_subprotocols_are_refused_with_what_was_wrong() {
        assert_eq!(
            check_upgrade("/", ["AMQPWSB10"]),
            Err(UpgradeRefusal::WrongPath("/".into()))
        );
        assert_eq!(
            check_upgrade(PATH, ["chat"]),
            Err(UpgradeRefusal::NoAmqpSubprotocol)
        );
        assert_eq!(
            check_upgrade(PATH, std::iter::empty()),
            Err(UpgradeRefusal::NoAmqpSubprotocol)
        );
    }
}
