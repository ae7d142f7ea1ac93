//! Connections and framing: the listener, one connection's loop (a request frame, its size
//! checked before it is read, every read due by the open timeout until SASL), and a frame's
//! decoding (`guard` checks its arrays' declared counts, then `kafka-protocol` decodes it).

use super::*;

/// What a request frame cannot be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("a request declares {declared} bytes; the endpoint reads at most {limit} here")]
    TooLarge { declared: i64, limit: usize },
    #[error("a request is shorter than its header")]
    Short,
    #[error("API key {0} is not one this endpoint serves")]
    UnknownApi(i16),
    #[error("{api:?} version {version} is not served (versions {min} to {max} are)")]
    Version {
        api: ApiKey,
        version: i16,
        min: i16,
        max: i16,
    },
    #[error("the request cannot be read: {0}")]
    Malformed(String),
    #[error("{api:?} v{version}: {error}")]
    Refused {
        api: ApiKey,
        version: i16,
        error: guard::GuardError,
    },
}

/// A decoded request with its header.
#[derive(Debug)]
pub struct Decoded {
    pub header: RequestHeader,
    pub api: ApiKey,
    pub request: RequestKind,
}

/// Checks a frame's declared size (the 4 bytes before it), `authenticated` or not yet.
pub fn check_size(declared: i32, authenticated: bool) -> Result<usize, FrameError> {
    let limit = if authenticated {
        MAX_REQUEST_BYTES
    } else {
        MAX_UNAUTHENTICATED_REQUEST_BYTES
    };
    if declared < 8 || declared as usize > limit {
        return Err(FrameError::TooLarge {
            declared: declared as i64,
            limit,
        });
    }
    Ok(declared as usize)
}

/// Decodes one request frame (without its size). Never panics on any bytes.
pub fn decode(mut frame: Bytes) -> Result<Decoded, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::Short);
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api = ApiKey::try_from(key).map_err(|_| FrameError::UnknownApi(key))?;
    let (min, max) = supported(api).ok_or(FrameError::UnknownApi(key))?;
    // ApiVersions of any version is answered (with UNSUPPORTED_VERSION when too new), as
    // clients expect; its body is not read then.
    if api != ApiKey::ApiVersions && !(min..=max).contains(&version) {
        return Err(FrameError::Version {
            api,
            version,
            min,
            max,
        });
    }
    let header_version = api.request_header_version(version.min(max));
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| FrameError::Malformed(format!("header: {e:#}")))?;
    let request = if api == ApiKey::ApiVersions && version > max {
        RequestKind::ApiVersions(ApiVersionsRequest::default())
    } else {
        guard::check(api, version, &frame).map_err(|error| FrameError::Refused {
            api,
            version,
            error,
        })?;
        RequestKind::decode(api, &mut frame, version)
            .map_err(|e| FrameError::Malformed(format!("{api:?} v{version}: {e:#}")))?
    };
    Ok(Decoded {
        header,
        api,
        request,
    })
}

/// Accepts Kafka connections, each in a slot of the hub's (`crate::connections`).
pub async fn serve(
    listener: TcpListener,
    kafka: Arc<Kafka>,
    limits: ClientLimits,
    slots: Arc<Slots>,
) {
    let ticker = {
        let kafka = kafka.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            // Offsets are swept for expiry a few times per retention, at most once a minute.
            let sweep_every = (kafka.offsets_retention / 4)
                .clamp(Duration::from_millis(250), Duration::from_secs(60));
            let mut last_sweep = tokio::time::Instant::now();
            loop {
                tick.tick().await;
                kafka.coordinator.tick();
                if last_sweep.elapsed() >= sweep_every {
                    last_sweep = tokio::time::Instant::now();
                    let kafka = kafka.clone();
                    // Removing files: off the async workers.
                    let _ = tokio::task::spawn_blocking(move || kafka.expire_offsets()).await;
                }
            }
        })
    };
    let _stop_ticker = AbortOnDrop(ticker);
    loop {
        let (stream, peer) = crate::connections::accept(&listener, "kafka", &slots).await;
        let Some((slot, taken)) = slots.take() else {
            tracing::warn!(%peer, limit = limits.max_connections, "Kafka connection refused: the hub has as many authenticated connections as --max-connections allows");
            continue;
        };
        if taken == Taken::FromUnauthenticated {
            tracing::info!(%peer, "the hub is full: its oldest unauthenticated connection makes way for this one");
        }
        let _ = stream.set_nodelay(true);
        let kafka = kafka.clone();
        tokio::spawn(async move {
            let evicted = slot.evicted();
            tokio::select! {
                result = connection(stream, kafka, limits, &slot) => {
                    if let Err(reason) = result {
                        tracing::warn!(%peer, "Kafka connection closed: {reason}");
                    }
                }
                () = evicted => tracing::info!(%peer, "Kafka connection closed: not authenticated, and a newer connection took its slot"),
            }
        });
    }
}

pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves one connection; `Err` says why it closed early. Until the client authenticated, every
/// read is due by the open timeout and a request may hold at most
/// [`MAX_UNAUTHENTICATED_REQUEST_BYTES`].
pub(super) async fn connection(
    mut stream: TcpStream,
    kafka: Arc<Kafka>,
    limits: ClientLimits,
    slot: &Slot,
) -> Result<(), String> {
    let local = stream.local_addr().map_err(|e| e.to_string())?;
    let mut session = Session::new(local);
    let authentication_deadline = tokio::time::Instant::now() + limits.open_timeout;
    let mut meter = slot.meter();
    loop {
        let authenticated = session.access.is_some();
        let read = read_request(&mut stream, authenticated, &mut meter);
        let frame = if authenticated {
            read.await?
        } else {
            tokio::time::timeout_at(authentication_deadline, read)
                .await
                .map_err(|_| "not authenticated within the open timeout".to_string())??
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        let answer = kafka.answer(&mut session, frame.freeze()).await;
        // The request is answered: what it held is no longer the connection's.
        let _ = meter.hold(0);
        if !authenticated && session.access.is_some() {
            slot.authenticated();
        }
        let Answer { response, close } = answer?;
        if let Some(out) = response {
            stream
                .write_all(&out)
                .await
                .map_err(|e| format!("writing a response: {e}"))?;
        }
        if let Some(reason) = close {
            return Err(reason);
        }
    }
}

/// What a connection does with one request: write the response frame (size and header
/// included), if any, then close when `close` says why.
pub(crate) struct Answer {
    pub response: Option<BytesMut>,
    pub close: Option<String>,
}

impl Kafka {
    /// One request frame (without its size prefix) answered in `session`: `Err` when the
    /// connection must close at once without an answer (a request before SASL that is not part
    /// of the exchange, a frame that cannot be decoded). The whole of a connection's work but
    /// its socket, so that it can be fuzzed as a sequence of frames.
    pub(crate) async fn answer(
        &self,
        session: &mut Session,
        frame: Bytes,
    ) -> Result<Answer, String> {
        // Before authentication only the SASL exchange is read, and Metadata, the request a
        // client that skipped SASL sends first, to tell it why (`unauthenticated`).
        if session.access.is_none() {
            let key = i16::from_be_bytes([
                frame.first().copied().unwrap_or(0),
                frame.get(1).copied().unwrap_or(0),
            ]);
            let sasl = [
                ApiKey::ApiVersions,
                ApiKey::SaslHandshake,
                ApiKey::SaslAuthenticate,
                ApiKey::Metadata,
            ];
            if !sasl.iter().any(|k| *k as i16 == key) {
                return Err(format!("API key {key}: {SASL_REQUIRED}"));
            }
        }
        let decoded = decode(frame).map_err(|e| e.to_string())?;
        let correlation_id = decoded.header.correlation_id;
        if let Some(client) = &decoded.header.client_id {
            session.client_id = client.chars().take(100).collect();
        }
        let outcome = self.handle(session, decoded).await;
        let response = match outcome.response {
            Some(body) => {
                let mut out = BytesMut::with_capacity(body.len() + 16);
                out.put_i32(0);
                let header = ResponseHeader::default().with_correlation_id(correlation_id);
                header
                    .encode(&mut out, outcome.header_version)
                    .map_err(|e| e.to_string())?;
                out.extend_from_slice(&body);
                let len = (out.len() - 4) as i32;
                out[..4].copy_from_slice(&len.to_be_bytes());
                Some(out)
            }
            None => None,
        };
        Ok(Answer {
            response,
            close: outcome.close,
        })
    }
}

/// The next request frame, its declared size checked (and, before authentication, charged to
/// `meter`) before it is read; `None` at the end of the stream.
pub(super) async fn read_request(
    stream: &mut TcpStream,
    authenticated: bool,
    meter: &mut crate::connections::Meter,
) -> Result<Option<BytesMut>, String> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let len = check_size(i32::from_be_bytes(size), authenticated).map_err(|e| e.to_string())?;
    if !authenticated {
        meter.hold(len).map_err(|e| e.to_string())?;
    }
    let mut frame = BytesMut::zeroed(len);
    stream
        .read_exact(&mut frame)
        .await
        .map_err(|e| format!("a request was cut short: {e}"))?;
    Ok(Some(frame))
}

pub(super) const SASL_REQUIRED: &str = "a request before SASL authentication (the endpoint is SASL_PLAINTEXT: set security.protocol=SASL_PLAINTEXT, sasl.mechanism=PLAIN, user $ConnectionString and the connection string as the password)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_sizes_and_versions_are_checked_before_decoding() {
        let too_large = |declared: i64, limit| FrameError::TooLarge { declared, limit };
        assert_eq!(check_size(-1, true), Err(too_large(-1, MAX_REQUEST_BYTES)));
        assert_eq!(
            check_size(i32::MAX, true),
            Err(too_large(i32::MAX as i64, MAX_REQUEST_BYTES))
        );
        assert_eq!(check_size(100, true), Ok(100));
        // Before authentication, only what the SASL exchange needs.
        assert_eq!(check_size(16 * 1024, false), Ok(16 * 1024));
        assert_eq!(
            check_size(100_000, false),
            Err(too_large(100_000, MAX_UNAUTHENTICATED_REQUEST_BYTES))
        );
        assert_eq!(check_size(100_000, true), Ok(100_000));
        assert_eq!(
            decode(Bytes::from_static(b"\x00\x03")).unwrap_err(),
            FrameError::Short
        );
        // Produce v13 names topics by id: not served.
        let frame = Bytes::from_static(b"\x00\x00\x00\x0d\x00\x00\x00\x01\x00\x00");
        assert!(matches!(decode(frame), Err(FrameError::Version { .. })));
        let frame = Bytes::from_static(b"\x7f\x00\x00\x00\x00\x00\x00\x01\x00\x00");
        assert!(matches!(decode(frame), Err(FrameError::UnknownApi(_))));
    }

    #[test]
    fn a_too_new_api_versions_request_is_answered() {
        // ApiVersions v9, correlation id 7, client id "c".
        let frame = Bytes::from_static(b"\x00\x12\x00\x09\x00\x00\x00\x07\x00\x01c\x00");
        let decoded = decode(frame).unwrap();
        assert_eq!(decoded.api, ApiKey::ApiVersions);
        assert_eq!(decoded.header.correlation_id, 7);
    }
}
