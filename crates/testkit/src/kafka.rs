//! A bare Kafka connection to `hubhost hub`'s Kafka endpoint: SASL PLAIN with a connection
//! string, then one request at a time, each encoded and decoded by `kafka-protocol`. For tests
//! and benchmarks that send exactly the requests they mean, which a full client would not.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum KafkaCallError {
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("a request or response could not be encoded or decoded: {0}")]
    Protocol(String),
    #[error("SASL PLAIN was refused: {0}")]
    Sasl(String),
    #[error("the response is not one to this request: {0}")]
    Response(String),
}

/// A Kafka connection after SASL PLAIN: one request at a time.
pub struct KafkaConnection {
    stream: TcpStream,
    correlation: i32,
}

impl KafkaConnection {
    /// Connects and authenticates with `connection_string` as the password (user
    /// `$ConnectionString`, Event Hubs' convention).
    pub async fn open(
        address: SocketAddr,
        connection_string: &str,
    ) -> Result<Self, KafkaCallError> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let mut connection = KafkaConnection {
            stream,
            correlation: 0,
        };
        let handshake = connection
            .call(
                &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
                1,
            )
            .await?;
        if handshake.error_code != 0 {
            return Err(KafkaCallError::Sasl(format!("{handshake:?}")));
        }
        let auth = connection
            .call(
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(format!(
                    "\0$ConnectionString\0{connection_string}"
                ))),
                2,
            )
            .await?;
        if auth.error_code != 0 {
            return Err(KafkaCallError::Sasl(format!("{:?}", auth.error_message)));
        }
        Ok(connection)
    }

    /// Sends `request` at `version` and reads its response.
    pub async fn call<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, KafkaCallError> {
        let protocol = |e: anyhow::Error| KafkaCallError::Protocol(e.to_string());
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| KafkaCallError::Protocol(format!("API key {}", R::KEY)))?;
        self.correlation += 1;
        let mut out = BytesMut::new();
        out.put_i32(0);
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("hubhost-testkit")))
            .encode(&mut out, api.request_header_version(version))
            .map_err(protocol)?;
        request.encode(&mut out, version).map_err(protocol)?;
        let len = (out.len() - 4) as i32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&out).await?;
        let size = self.stream.read_i32().await?;
        if !(0..64 << 20).contains(&size) {
            return Err(KafkaCallError::Response(format!(
                "a response of {size} bytes"
            )));
        }
        let mut body = BytesMut::zeroed(size as usize);
        self.stream.read_exact(&mut body).await?;
        let mut body = body.freeze();
        let header = ResponseHeader::decode(&mut body, api.response_header_version(version))
            .map_err(protocol)?;
        if header.correlation_id != self.correlation {
            return Err(KafkaCallError::Response("out of order".into()));
        }
        R::Response::decode(&mut body, version).map_err(protocol)
    }
}

/// `records` as one uncompressed record batch (magic 2), as a Produce request carries them: the
/// batch's producer id and first sequence number are the first record's.
pub fn record_batch(records: &[kafka_protocol::records::Record]) -> Result<Bytes, KafkaCallError> {
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| KafkaCallError::Protocol(e.to_string()))?;
    Ok(batch.freeze())
}

/// `records` as one gzip-compressed record batch (magic 2): what a producer with
/// `compression.type=gzip` sends.
pub fn gzip_record_batch(
    records: &[kafka_protocol::records::Record],
) -> Result<Bytes, KafkaCallError> {
    use kafka_protocol::records::{Compression, RecordBatchEncoder, RecordEncodeOptions};
    let gzip = |input: &mut BytesMut, out: &mut BytesMut, _: Compression| -> anyhow::Result<()> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(input)?;
        out.extend_from_slice(&encoder.finish()?);
        Ok(())
    };
    let mut batch = BytesMut::new();
    RecordBatchEncoder::encode_with_custom_compression(
        &mut batch,
        records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::Gzip,
        },
        Some(gzip),
    )
    .map_err(|e| KafkaCallError::Protocol(e.to_string()))?;
    Ok(batch.freeze())
}

/// One record of `value` at `sequence` from producer `producer` at epoch 0 (-1, -1: a
/// producer without idempotence).
pub fn record(producer: i64, sequence: i32, value: Bytes) -> kafka_protocol::records::Record {
    kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: producer,
        producer_epoch: 0,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 0,
        sequence,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(value),
        headers: Default::default(),
    }
}

/// A Produce request (acks=all) of `records` (encoded batches) to `partition` of `topic`.
pub fn produce_request(
    topic: &str,
    partition: i32,
    records: Bytes,
) -> kafka_protocol::messages::ProduceRequest {
    use kafka_protocol::messages::*;
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(TopicName(StrBytes::from(topic.to_string())))
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ])
}
