//! Record batches, the Kafka log format (magic 2), in and out: a producer's batches decoded with
//! their sizes checked before anything is allocated or decompressed from them, and stored events
//! encoded as the batches a fetch returns.
//!
//! `kafka-protocol` decodes and encodes the batches; what it trusts, this module checks first: a
//! batch's declared length against the bytes that follow, its record count against the bytes its
//! records take (every record takes at least 7), every record's lengths and header count against
//! the record (`check_records`), and a compressed batch's output as it is decompressed against
//! what is left of its produce request's one budget of [`MAX_DECOMPRESSED_BYTES`] (a few bytes
//! of gzip can claim gigabytes, and a request can carry a hundred such batches).

use std::io::Read;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use super::convert::Event;

/// What the compressed batches of one produce request may decompress to, together: the
/// request's own size limit, so a request holds no more decompressed than it could have sent
/// plain.
pub const MAX_DECOMPRESSED_BYTES: usize = super::MAX_REQUEST_BYTES;
/// The fixed part of a magic-2 batch, up to and including its record count.
const BATCH_HEADER_BYTES: usize = 61;
/// The smallest record: seven one-byte varints (length, attributes, timestamp and offset deltas,
/// key and value lengths, header count).
const MIN_RECORD_BYTES: usize = 7;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("a record batch declares {declared} bytes where {left} are left")]
    Length { declared: i64, left: usize },
    #[error("record batches of magic {0} are not supported (only 2, Kafka 0.11 and later)")]
    Magic(i8),
    #[error("a record batch declares {count} records in {bytes} bytes")]
    Count { count: i64, bytes: usize },
    #[error("the request's record batches decompress to more than {MAX_DECOMPRESSED_BYTES} bytes")]
    Decompressed,
    #[error("a record batch is transactional; transactions are not supported")]
    Transactional,
    #[error("a record batch cannot be read: {0}")]
    Malformed(String),
}

/// A batch as a producer sent it: its idempotence fields and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducedBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub events: Vec<Event>,
}

/// Every batch in a produce request's `records` for one partition; what its compressed batches
/// decompress to is taken from `budget`, the request's, and refused before more than what is
/// left of it is decompressed.
pub fn decode(
    mut records: Bytes,
    budget: &std::cell::Cell<usize>,
) -> Result<Vec<ProducedBatch>, BatchError> {
    let mut batches = Vec::new();
    while records.has_remaining() {
        if records.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Length {
                declared: BATCH_HEADER_BYTES as i64,
                left: records.len(),
            });
        }
        let declared = i32::from_be_bytes(records[8..12].try_into().expect("4 bytes")) as i64;
        let total = 12 + declared;
        if declared < (BATCH_HEADER_BYTES - 12) as i64 || total > records.len() as i64 {
            return Err(BatchError::Length {
                declared,
                left: records.len() - 12,
            });
        }
        let magic = records[16] as i8;
        if magic != 2 {
            return Err(BatchError::Magic(magic));
        }
        let attributes = i16::from_be_bytes(records[21..23].try_into().expect("2 bytes"));
        let count = i32::from_be_bytes(records[57..61].try_into().expect("4 bytes")) as i64;
        let body = total as usize - BATCH_HEADER_BYTES;
        let compressed = attributes & 0x7 != 0;
        if count < 0 || (!compressed && count as usize > body / MIN_RECORD_BYTES) {
            return Err(BatchError::Count { count, bytes: body });
        }
        let mut batch = records.split_to(total as usize);
        let decompress = |data: &mut Bytes, compression: Compression| {
            let out = decompress(data, compression, budget.get())?;
            if compression != Compression::None {
                budget.set(budget.get() - out.len());
            }
            if count as usize > out.len() / MIN_RECORD_BYTES {
                anyhow::bail!(BatchError::Count {
                    count,
                    bytes: out.len()
                });
            }
            check_records(&out, count)?;
            Ok(out)
        };
        let set = RecordBatchDecoder::decode_with_custom_compression(&mut batch, Some(decompress))
            .map_err(|e| match e.downcast::<BatchError>() {
                Ok(known) => known,
                Err(other) => BatchError::Malformed(format!("{other:#}")),
            })?;
        let first = set.records.first();
        if first.is_some_and(|r| r.transactional || r.control) {
            return Err(BatchError::Transactional);
        }
        batches.push(ProducedBatch {
            producer_id: first.map(|r| r.producer_id).unwrap_or(-1),
            producer_epoch: first.map(|r| r.producer_epoch).unwrap_or(-1),
            base_sequence: first.map(|r| r.sequence).unwrap_or(-1),
            events: set
                .records
                .into_iter()
                .map(|r| Event {
                    key: r.key,
                    value: r.value,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|(k, v)| (k.as_str().to_string(), v))
                        .collect(),
                })
                .collect(),
        });
    }
    Ok(batches)
}

/// Walks a batch's (decompressed) records as the decoder will, checking every declared length
/// and header count against the bytes left, so that the decoder never reserves room for more
/// than the batch holds.
fn check_records(mut bytes: &[u8], count: i64) -> Result<(), BatchError> {
    let malformed = |what: &str| BatchError::Malformed(format!("a record's {what} does not fit"));
    for _ in 0..count {
        let length = varint(&mut bytes).ok_or_else(|| malformed("length"))?;
        if length < 0 || length as usize > bytes.len() {
            return Err(malformed("length"));
        }
        let (mut record, rest) = bytes.split_at(length as usize);
        bytes = rest;
        // attributes, then the timestamp and offset deltas
        record = record.get(1..).ok_or_else(|| malformed("attributes"))?;
        varint(&mut record).ok_or_else(|| malformed("timestamp"))?;
        varint(&mut record).ok_or_else(|| malformed("offset"))?;
        for part in ["key", "value"] {
            skip_sized(&mut record).ok_or_else(|| malformed(part))?;
        }
        let headers = varint(&mut record).ok_or_else(|| malformed("header count"))?;
        // Every header takes two bytes at least (two lengths).
        if headers < 0 || headers as usize > record.len() / 2 {
            return Err(BatchError::Count {
                count: headers,
                bytes: record.len(),
            });
        }
        for _ in 0..headers {
            skip_sized(&mut record).ok_or_else(|| malformed("header name"))?;
            skip_sized(&mut record).ok_or_else(|| malformed("header value"))?;
        }
    }
    Ok(())
}

/// A zig-zag varint (at most 10 bytes), advancing past it.
fn varint(bytes: &mut &[u8]) -> Option<i64> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some((value >> 1) as i64 ^ -((value & 1) as i64));
        }
    }
    None
}

/// Skips a varint-length-prefixed field (-1: null).
fn skip_sized(bytes: &mut &[u8]) -> Option<()> {
    let len = varint(bytes)?;
    if len == -1 {
        return Some(());
    }
    let len = usize::try_from(len).ok()?;
    *bytes = bytes.get(len..)?;
    Some(())
}

/// Decompresses a batch's records, stopping past `left` bytes.
fn decompress(data: &mut Bytes, compression: Compression, left: usize) -> anyhow::Result<Bytes> {
    let input = data.split_to(data.len());
    let limit = left as u64 + 1;
    let mut out = Vec::new();
    let read = match compression {
        Compression::None => return Ok(input),
        Compression::Gzip => flate2::read::MultiGzDecoder::new(&input[..])
            .take(limit)
            .read_to_end(&mut out),
        Compression::Lz4 => lz4_flex::frame::FrameDecoder::new(&input[..])
            .take(limit)
            .read_to_end(&mut out),
        Compression::Zstd => ruzstd::decoding::StreamingDecoder::new(&input[..])
            .map_err(|e| anyhow::anyhow!("zstd: {e}"))?
            .take(limit)
            .read_to_end(&mut out),
        Compression::Snappy => return snappy(&input, left),
    };
    read.map_err(|e| anyhow::anyhow!("{compression:?}: {e}"))?;
    if out.len() > left {
        anyhow::bail!(BatchError::Decompressed);
    }
    Ok(Bytes::from(out))
}

/// Snappy as Kafka clients write it: xerial's framing (a magic header, then blocks each with its
/// length) or, from some clients, one raw block. Every block states its decompressed length,
/// which is checked before the block is decompressed.
fn snappy(input: &[u8], left: usize) -> anyhow::Result<Bytes> {
    const XERIAL: &[u8] = b"\x82SNAPPY\x00";
    let mut blocks = Vec::new();
    if input.starts_with(XERIAL) && input.len() >= 16 {
        let mut rest = &input[16..];
        while !rest.is_empty() {
            if rest.len() < 4 {
                anyhow::bail!("snappy: a block length is cut short");
            }
            let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
            rest = &rest[4..];
            if len > rest.len() {
                anyhow::bail!(
                    "snappy: a block declares {len} bytes where {} are left",
                    rest.len()
                );
            }
            blocks.push(&rest[..len]);
            rest = &rest[len..];
        }
    } else {
        blocks.push(input);
    }
    let mut out = BytesMut::new();
    for block in blocks {
        let len = snap::raw::decompress_len(block)?;
        if out.len() + len > left {
            anyhow::bail!(BatchError::Decompressed);
        }
        let start = out.len();
        out.resize(start + len, 0);
        snap::raw::Decoder::new().decompress(block, &mut out[start..])?;
    }
    Ok(out.freeze())
}

/// One stored event as a fetch returns it.
pub struct Fetched {
    pub sequence: i64,
    pub enqueued_ms: i64,
    pub event: Event,
}

/// A record of `event` at `offset`, from `producer` (id, epoch).
fn record(
    offset: i64,
    sequence: i32,
    timestamp: i64,
    producer: (i64, i16),
    event: &Event,
) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: producer.0,
        producer_epoch: producer.1,
        timestamp_type: TimestampType::Creation,
        offset,
        sequence,
        timestamp,
        key: event.key.clone(),
        value: event.value.clone(),
        headers: event
            .headers
            .iter()
            .map(|(k, v)| (k.clone().into(), v.clone()))
            .collect(),
    }
}

/// Encodes fetched events (consecutive sequence numbers) as one uncompressed batch whose
/// offsets are their sequence numbers and whose timestamps are their enqueued times.
pub fn encode(events: &[Fetched]) -> Bytes {
    let records: Vec<Record> = events
        .iter()
        // The encoder starts a new batch where offset minus sequence changes; kept equal, the
        // events go out as one batch (producer id -1: clients ignore the sequence).
        .map(|f| {
            record(
                f.sequence,
                f.sequence as i32,
                f.enqueued_ms,
                (-1, -1),
                &f.event,
            )
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .expect("uncompressed records encode");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(i: u8) -> Event {
        Event {
            key: Some(Bytes::from(vec![b'k', i])),
            value: Some(Bytes::from(vec![i; 100])),
            headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
        }
    }

    fn produced(compression: Compression, events: &[Event]) -> Bytes {
        let records: Vec<Record> = events
            .iter()
            .enumerate()
            .map(|(i, e)| record(i as i64, 40 + i as i32, 1_700_000_000_000, (7, 0), e))
            .collect();
        let mut out = BytesMut::new();
        RecordBatchEncoder::encode_with_custom_compression(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
            Some(compress),
        )
        .unwrap();
        out.freeze()
    }

    /// What clients do: gzip, snappy in xerial's framing (two blocks), LZ4 frames, zstd.
    fn compress(
        input: &mut BytesMut,
        out: &mut BytesMut,
        compression: Compression,
    ) -> anyhow::Result<()> {
        use std::io::Write;
        match compression {
            Compression::None => out.extend_from_slice(input),
            Compression::Gzip => {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                gz.write_all(input)?;
                out.extend_from_slice(&gz.finish()?);
            }
            Compression::Snappy => {
                out.extend_from_slice(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01");
                let half = input.len() / 2;
                for block in [&input[..half], &input[half..]] {
                    let compressed = snap::raw::Encoder::new().compress_vec(block)?;
                    out.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
                    out.extend_from_slice(&compressed);
                }
            }
            Compression::Lz4 => {
                let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
                lz4.write_all(input)?;
                out.extend_from_slice(&lz4.finish()?);
            }
            Compression::Zstd => out.extend_from_slice(&ruzstd::encoding::compress_to_vec(
                &input[..],
                ruzstd::encoding::CompressionLevel::Fastest,
            )),
        }
        Ok(())
    }

    /// One partition's records decoded with a whole request's budget.
    fn decode_alone(records: Bytes) -> Result<Vec<ProducedBatch>, BatchError> {
        decode(records, &std::cell::Cell::new(MAX_DECOMPRESSED_BYTES))
    }

    #[test]
    fn batches_in_every_compression_decode_with_their_producer_fields() {
        let events: Vec<Event> = (0..20).map(event).collect();
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let batches = decode_alone(produced(compression, &events)).unwrap();
            assert_eq!(
                batches,
                vec![ProducedBatch {
                    producer_id: 7,
                    producer_epoch: 0,
                    base_sequence: 40,
                    events: events.clone()
                }],
                "{compression:?}"
            );
        }
    }

    #[test]
    fn fetched_events_encode_with_their_sequence_numbers_as_offsets() {
        let fetched: Vec<Fetched> = (0..3)
            .map(|i| Fetched {
                sequence: 1000 + i as i64,
                enqueued_ms: 1_700_000_000_000 + i as i64,
                event: event(i),
            })
            .collect();
        let mut bytes = encode(&fetched);
        let set = RecordBatchDecoder::decode(&mut bytes).unwrap();
        let offsets: Vec<i64> = set.records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![1000, 1001, 1002]);
        assert_eq!(set.records[2].timestamp, 1_700_000_000_002);
        assert_eq!(set.records[1].key.as_deref(), Some(&b"k\x01"[..]));
    }

    #[test]
    fn declared_sizes_are_checked_before_anything_is_allocated() {
        let good = produced(Compression::None, &[event(1)]);
        // A batch length past the end.
        let mut long = good.to_vec();
        long[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_alone(long.into()),
            Err(BatchError::Length { .. })
        ));
        // A record count no body could hold (the CRC is checked later; the count first).
        let mut many = good.to_vec();
        many[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_alone(many.into()),
            Err(BatchError::Count { .. })
        ));
        // Old message sets.
        let mut old = good.to_vec();
        old[16] = 1;
        assert_eq!(decode_alone(old.into()), Err(BatchError::Magic(1)));
        // Cut short.
        assert!(decode_alone(good.slice(..30)).is_err());
        assert!(decode_alone(good.slice(..good.len() - 1)).is_err());
    }

    #[test]
    fn a_record_declaring_more_headers_than_it_holds_is_refused() {
        // One record: attributes, two zero deltas, a null key and value (-1), then a header
        // count of 2^30 (zig-zag 2^31, as a varint) and nothing after it.
        let mut record = vec![0, 0, 0, 1, 1];
        record.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x08]);
        let mut bytes = vec![(record.len() as u8) << 1];
        bytes.extend_from_slice(&record);
        assert_eq!(
            check_records(&bytes, 1),
            Err(BatchError::Count {
                count: 1 << 30,
                bytes: 0
            })
        );
        // A length past the end, and a count of records the bytes do not hold.
        assert!(check_records(&[0x7e, 0], 1).is_err());
        assert!(check_records(&bytes[..1], 2).is_err());
    }

    #[test]
    fn a_compressed_batch_is_cut_off_past_the_limit() {
        // 8 MiB of zeros gzip to a few kilobytes.
        let big = Event {
            key: None,
            value: Some(Bytes::from(vec![0u8; 8 * 1024 * 1024])),
            headers: Vec::new(),
        };
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let bomb = produced(compression, std::slice::from_ref(&big));
            assert!(bomb.len() < 1024 * 1024, "{compression:?}: {}", bomb.len());
            assert_eq!(
                decode_alone(bomb),
                Err(BatchError::Decompressed),
                "{compression:?}"
            );
        }
    }

    #[test]
    fn a_request_s_batches_share_one_decompression_budget() {
        // A hundred batches each 1 MiB of zeros compressed: each alone is within the limit, the
        // hundred together are not, and decoding stops at the budget, not at the hundredth.
        let big = Event {
            key: None,
            value: Some(Bytes::from(vec![0u8; 1024 * 1024])),
            headers: Vec::new(),
        };
        let one = produced(Compression::Zstd, std::slice::from_ref(&big));
        assert!(decode_alone(one.clone()).is_ok());
        let mut many = Vec::new();
        for _ in 0..100 {
            many.extend_from_slice(&one);
        }
        let budget = std::cell::Cell::new(MAX_DECOMPRESSED_BYTES);
        assert_eq!(
            decode(Bytes::from(many), &budget),
            Err(BatchError::Decompressed)
        );
        assert!(budget.get() < 1024 * 1024, "{} left", budget.get());
        // And across a request's partitions: what one spent, the next does not have.
        let budget = std::cell::Cell::new(MAX_DECOMPRESSED_BYTES);
        for _ in 0..3 {
            decode(one.clone(), &budget).unwrap();
        }
        assert_eq!(decode(one.clone(), &budget), Err(BatchError::Decompressed));
    }
}
