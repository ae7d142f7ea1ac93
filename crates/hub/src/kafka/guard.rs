//! A request's arrays checked before the request is decoded. `kafka-protocol` reserves room for
//! an array from the count the request declares, before reading a single element, so a request
//! of a few bytes could ask for gigabytes. This module walks a request body as the decoder will,
//! field by field from a small schema per API and version, and refuses any array that declares
//! more elements than the bytes left could hold (every element takes at least one byte; an
//! `INT32` one, four).
//!
//! Only requests that hold arrays have a schema; the tests check each schema against the
//! crate's own encoder for every version the endpoint serves, so the walk and the decoder agree.

use kafka_protocol::messages::ApiKey;

#[derive(Debug, Clone, Copy)]
enum Ty {
    I8,
    I16,
    I32,
    I64,
    Bool,
    Uuid,
    /// A string, nullable or not (the walk accepts null wherever; the decoder judges).
    Str,
    Bytes,
    Array(&'static [Field]),
    I32Array,
    StrArray,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    ty: Ty,
    min: i16,
    max: i16,
}

const ALL: i16 = i16::MAX;

const fn f(ty: Ty, min: i16, max: i16) -> Field {
    Field { ty, min, max }
}

/// A request's fields and the version from which it is "flexible" (compact lengths, tagged
/// fields after every struct).
struct Schema {
    flexible_from: i16,
    fields: &'static [Field],
}

const METADATA_TOPIC: &[Field] = &[f(Ty::Uuid, 10, ALL), f(Ty::Str, 0, ALL)];
const METADATA: Schema = Schema {
    flexible_from: 9,
    fields: &[
        f(Ty::Array(METADATA_TOPIC), 0, ALL),
        f(Ty::Bool, 4, ALL),
        f(Ty::Bool, 8, 10),
        f(Ty::Bool, 8, ALL),
    ],
};

const PRODUCE_PARTITION: &[Field] = &[f(Ty::I32, 0, ALL), f(Ty::Bytes, 0, ALL)];
const PRODUCE_TOPIC: &[Field] = &[
    f(Ty::Str, 0, 12),
    f(Ty::Uuid, 13, ALL),
    f(Ty::Array(PRODUCE_PARTITION), 0, ALL),
];
const PRODUCE: Schema = Schema {
    flexible_from: 9,
    fields: &[
        f(Ty::Str, 3, ALL),
        f(Ty::I16, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::Array(PRODUCE_TOPIC), 0, ALL),
    ],
};

const FETCH_PARTITION: &[Field] = &[
    f(Ty::I32, 0, ALL),
    f(Ty::I32, 9, ALL),
    f(Ty::I64, 0, ALL),
    f(Ty::I32, 12, ALL),
    f(Ty::I64, 5, ALL),
    f(Ty::I32, 0, ALL),
];
const FETCH_TOPIC: &[Field] = &[
    f(Ty::Str, 0, 12),
    f(Ty::Uuid, 13, ALL),
    f(Ty::Array(FETCH_PARTITION), 0, ALL),
];
const FORGOTTEN_TOPIC: &[Field] = &[
    f(Ty::Str, 7, 12),
    f(Ty::Uuid, 13, ALL),
    f(Ty::I32Array, 7, ALL),
];
const FETCH: Schema = Schema {
    flexible_from: 12,
    fields: &[
        f(Ty::I32, 0, 14),
        f(Ty::I32, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::I8, 0, ALL),
        f(Ty::I32, 7, ALL),
        f(Ty::I32, 7, ALL),
        f(Ty::Array(FETCH_TOPIC), 0, ALL),
        f(Ty::Array(FORGOTTEN_TOPIC), 7, ALL),
        f(Ty::Str, 11, ALL),
    ],
};

const LIST_OFFSETS_PARTITION: &[Field] =
    &[f(Ty::I32, 0, ALL), f(Ty::I32, 4, ALL), f(Ty::I64, 0, ALL)];
const LIST_OFFSETS_TOPIC: &[Field] = &[
    f(Ty::Str, 0, ALL),
    f(Ty::Array(LIST_OFFSETS_PARTITION), 0, ALL),
];
const LIST_OFFSETS: Schema = Schema {
    flexible_from: 6,
    fields: &[
        f(Ty::I32, 0, ALL),
        f(Ty::I8, 2, ALL),
        f(Ty::Array(LIST_OFFSETS_TOPIC), 0, ALL),
        f(Ty::I32, 10, ALL),
    ],
};

const COMMIT_PARTITION: &[Field] = &[
    f(Ty::I32, 0, ALL),
    f(Ty::I64, 0, ALL),
    f(Ty::I32, 6, ALL),
    f(Ty::Str, 0, ALL),
];
const COMMIT_TOPIC: &[Field] = &[f(Ty::Str, 0, ALL), f(Ty::Array(COMMIT_PARTITION), 0, ALL)];
const OFFSET_COMMIT: Schema = Schema {
    flexible_from: 8,
    fields: &[
        f(Ty::Str, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::Str, 0, ALL),
        f(Ty::Str, 7, ALL),
        f(Ty::I64, 0, 4),
        f(Ty::Array(COMMIT_TOPIC), 0, ALL),
    ],
};

const FETCH_OFFSETS_TOPIC: &[Field] = &[f(Ty::Str, 0, ALL), f(Ty::I32Array, 0, ALL)];
const FETCH_OFFSETS_GROUP: &[Field] = &[
    f(Ty::Str, 8, ALL),
    f(Ty::Str, 9, ALL),
    f(Ty::I32, 9, ALL),
    f(Ty::Array(FETCH_OFFSETS_TOPIC), 8, ALL),
];
const OFFSET_FETCH: Schema = Schema {
    flexible_from: 6,
    fields: &[
        f(Ty::Str, 0, 7),
        f(Ty::Array(FETCH_OFFSETS_TOPIC), 0, 7),
        f(Ty::Array(FETCH_OFFSETS_GROUP), 8, ALL),
        f(Ty::Bool, 7, ALL),
    ],
};

const FIND_COORDINATOR: Schema = Schema {
    flexible_from: 3,
    fields: &[f(Ty::Str, 0, 3), f(Ty::I8, 1, ALL), f(Ty::StrArray, 4, ALL)],
};

const JOIN_PROTOCOL: &[Field] = &[f(Ty::Str, 0, ALL), f(Ty::Bytes, 0, ALL)];
const JOIN_GROUP: Schema = Schema {
    flexible_from: 6,
    fields: &[
        f(Ty::Str, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::I32, 1, ALL),
        f(Ty::Str, 0, ALL),
        f(Ty::Str, 5, ALL),
        f(Ty::Str, 0, ALL),
        f(Ty::Array(JOIN_PROTOCOL), 0, ALL),
        f(Ty::Str, 8, ALL),
    ],
};

const LEAVE_MEMBER: &[Field] = &[f(Ty::Str, 3, ALL), f(Ty::Str, 3, ALL), f(Ty::Str, 5, ALL)];
const LEAVE_GROUP: Schema = Schema {
    flexible_from: 4,
    fields: &[
        f(Ty::Str, 0, ALL),
        f(Ty::Str, 0, 2),
        f(Ty::Array(LEAVE_MEMBER), 3, ALL),
    ],
};

const SYNC_ASSIGNMENT: &[Field] = &[f(Ty::Str, 0, ALL), f(Ty::Bytes, 0, ALL)];
const SYNC_GROUP: Schema = Schema {
    flexible_from: 4,
    fields: &[
        f(Ty::Str, 0, ALL),
        f(Ty::I32, 0, ALL),
        f(Ty::Str, 0, ALL),
        f(Ty::Str, 3, ALL),
        f(Ty::Str, 5, ALL),
        f(Ty::Str, 5, ALL),
        f(Ty::Array(SYNC_ASSIGNMENT), 0, ALL),
    ],
};

fn schema(api: ApiKey) -> Option<&'static Schema> {
    Some(match api {
        ApiKey::Metadata => &METADATA,
        ApiKey::Produce => &PRODUCE,
        ApiKey::Fetch => &FETCH,
        ApiKey::ListOffsets => &LIST_OFFSETS,
        ApiKey::OffsetCommit => &OFFSET_COMMIT,
        ApiKey::OffsetFetch => &OFFSET_FETCH,
        ApiKey::FindCoordinator => &FIND_COORDINATOR,
        ApiKey::JoinGroup => &JOIN_GROUP,
        ApiKey::LeaveGroup => &LEAVE_GROUP,
        ApiKey::SyncGroup => &SYNC_GROUP,
        // The others hold no array.
        _ => return None,
    })
}

/// Why a request body was refused before decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    #[error("an array declares {count} elements where {left} bytes are left")]
    Array { count: u64, left: usize },
    #[error("the request ends inside a field")]
    Short,
}

/// Checks a request body (after its header) of `api` at `version`.
pub fn check(api: ApiKey, version: i16, body: &[u8]) -> Result<(), GuardError> {
    let Some(schema) = schema(api) else {
        return Ok(());
    };
    let mut walk = Walk {
        bytes: body,
        version,
        flexible: version >= schema.flexible_from,
    };
    walk.fields(schema.fields)?;
    if walk.flexible {
        walk.tagged_fields()?;
    }
    Ok(())
}

struct Walk<'a> {
    bytes: &'a [u8],
    version: i16,
    flexible: bool,
}

impl Walk<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], GuardError> {
        if n > self.bytes.len() {
            return Err(GuardError::Short);
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn uvarint(&mut self) -> Result<u64, GuardError> {
        let mut value = 0u64;
        for i in 0..5 {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(GuardError::Short)
    }

    fn i16(&mut self) -> Result<i16, GuardError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, GuardError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A length: compact (unsigned varint, 0 null) or not (`i16`/`i32`, -1 null).
    fn length(&mut self, wide: bool) -> Result<Option<u64>, GuardError> {
        if self.flexible {
            return Ok(self.uvarint()?.checked_sub(1));
        }
        let n = if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        Ok(u64::try_from(n).ok())
    }

    fn skip(&mut self, n: u64) -> Result<(), GuardError> {
        let n = usize::try_from(n).map_err(|_| GuardError::Short)?;
        self.take(n).map(|_| ())
    }

    /// An array's count, refused when the bytes left cannot hold it.
    fn count(&mut self, element_bytes: usize) -> Result<u64, GuardError> {
        let count = self.length(true)?.unwrap_or(0);
        let left = self.bytes.len();
        if count.saturating_mul(element_bytes as u64) > left as u64 {
            return Err(GuardError::Array { count, left });
        }
        Ok(count)
    }

    fn fields(&mut self, fields: &[Field]) -> Result<(), GuardError> {
        for field in fields {
            if (field.min..=field.max).contains(&self.version) {
                self.value(field.ty)?;
            }
        }
        Ok(())
    }

    fn value(&mut self, ty: Ty) -> Result<(), GuardError> {
        match ty {
            Ty::I8 | Ty::Bool => self.skip(1),
            Ty::I16 => self.skip(2),
            Ty::I32 => self.skip(4),
            Ty::I64 => self.skip(8),
            Ty::Uuid => self.skip(16),
            Ty::Str => match self.length(false)? {
                Some(n) => self.skip(n),
                None => Ok(()),
            },
            Ty::Bytes => match self.length(true)? {
                Some(n) => self.skip(n),
                None => Ok(()),
            },
            Ty::I32Array => {
                let n = self.count(4)?;
                self.skip(n * 4)
            }
            Ty::StrArray => {
                for _ in 0..self.count(1)? {
                    self.value(Ty::Str)?;
                }
                Ok(())
            }
            Ty::Array(fields) => {
                for _ in 0..self.count(1)? {
                    self.fields(fields)?;
                    if self.flexible {
                        self.tagged_fields()?;
                    }
                }
                Ok(())
            }
        }
    }

    fn tagged_fields(&mut self) -> Result<(), GuardError> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn s(text: &'static str) -> StrBytes {
        StrBytes::from_static_str(text)
    }

    /// Every request with arrays, at `version`, with one element in each array (two where an
    /// array holds plain integers), and every optional field of the version set.
    /// Writes a request's body as the crate encodes it.
    type Encoder = Box<dyn Fn(&mut BytesMut) -> anyhow::Result<()>>;

    fn request(api: ApiKey, v: i16) -> Encoder {
        macro_rules! encoded {
            ($value:expr) => {{
                let value = $value;
                Box::new(move |buf: &mut BytesMut| value.encode(buf, v))
            }};
        }
        match api {
            ApiKey::Metadata => encoded!(MetadataRequest::default().with_topics(Some(vec![
                metadata_request::MetadataRequestTopic::default()
                    .with_name(Some(TopicName(s("sensors"))))
            ]))),
            ApiKey::Produce => encoded!(ProduceRequest::default().with_acks(-1).with_topic_data(
                vec![produce_request::TopicProduceData::default()
                    .with_name(TopicName(s("sensors")))
                    .with_partition_data(vec![
                        produce_request::PartitionProduceData::default()
                            .with_index(3)
                            .with_records(Some(Bytes::from_static(b"records")))
                    ])]
            )),
            ApiKey::Fetch => {
                let mut r = FetchRequest::default().with_topics(vec![
                    fetch_request::FetchTopic::default()
                        .with_topic(TopicName(s("sensors")))
                        .with_partitions(vec![
                            fetch_request::FetchPartition::default()
                                .with_partition(2)
                                .with_fetch_offset(40),
                        ]),
                ]);
                if v >= 7 {
                    r.forgotten_topics_data = vec![
                        fetch_request::ForgottenTopic::default()
                            .with_topic(TopicName(s("alarms")))
                            .with_partitions(vec![1, 2]),
                    ];
                }
                if v >= 11 {
                    r.rack_id = s("rack");
                }
                encoded!(r)
            }
            ApiKey::ListOffsets => encoded!(ListOffsetsRequest::default().with_topics(vec![
                list_offsets_request::ListOffsetsTopic::default()
                    .with_name(TopicName(s("sensors")))
                    .with_partitions(vec![
                        list_offsets_request::ListOffsetsPartition::default()
                            .with_partition_index(1)
                            .with_timestamp(-2)
                    ])
            ])),
            ApiKey::OffsetCommit => encoded!(
                OffsetCommitRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_member_id(s("member"))
                    .with_group_instance_id((v >= 7).then(|| s("instance")))
                    .with_topics(vec![
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(TopicName(s("sensors")))
                            .with_partitions(vec![
                                offset_commit_request::OffsetCommitRequestPartition::default()
                                    .with_partition_index(4)
                                    .with_committed_offset(99)
                                    .with_committed_metadata(Some(s("meta")))
                            ])
                    ])
            ),
            ApiKey::OffsetFetch if v >= 8 => encoded!(OffsetFetchRequest::default().with_groups(
                vec![offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s("group")))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s("sensors")))
                            .with_partition_indexes(vec![0, 1])
                    ]))]
            )),
            ApiKey::OffsetFetch => encoded!(
                OffsetFetchRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopic::default()
                            .with_name(TopicName(s("sensors")))
                            .with_partition_indexes(vec![0, 1])
                    ]))
            ),
            ApiKey::FindCoordinator if v >= 4 => encoded!(
                FindCoordinatorRequest::default()
                    .with_coordinator_keys(vec![s("group"), s("other")])
            ),
            ApiKey::FindCoordinator => {
                encoded!(FindCoordinatorRequest::default().with_key(s("group")))
            }
            ApiKey::JoinGroup => encoded!(
                JoinGroupRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_member_id(s("member"))
                    .with_group_instance_id((v >= 5).then(|| s("instance")))
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        join_group_request::JoinGroupRequestProtocol::default()
                            .with_name(s("range"))
                            .with_metadata(Bytes::from_static(b"subscription"))
                    ])
                    .with_reason((v >= 8).then(|| s("because")))
            ),
            ApiKey::LeaveGroup if v >= 3 => encoded!(
                LeaveGroupRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_members(vec![
                        leave_group_request::MemberIdentity::default()
                            .with_member_id(s("member"))
                            .with_group_instance_id(Some(s("instance")))
                            .with_reason((v >= 5).then(|| s("bye")))
                    ])
            ),
            ApiKey::LeaveGroup => encoded!(
                LeaveGroupRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_member_id(s("member"))
            ),
            ApiKey::SyncGroup => encoded!(
                SyncGroupRequest::default()
                    .with_group_id(GroupId(s("group")))
                    .with_member_id(s("member"))
                    .with_group_instance_id((v >= 3).then(|| s("instance")))
                    .with_protocol_type((v >= 5).then(|| s("consumer")))
                    .with_protocol_name((v >= 5).then(|| s("range")))
                    .with_assignments(vec![
                        sync_group_request::SyncGroupRequestAssignment::default()
                            .with_member_id(s("member"))
                            .with_assignment(Bytes::from_static(b"assignment"))
                    ])
            ),
            other => panic!("no request built for {other:?}"),
        }
    }

    /// The walk ends exactly where the crate's encoding does, for every API with arrays at
    /// every version the endpoint serves, and the crate decodes what the walk passed.
    #[test]
    fn the_schemas_walk_the_crates_encoding_of_every_served_version() {
        for (api, min, max) in super::super::versions::SUPPORTED {
            if schema(*api).is_none() {
                continue;
            }
            for version in *min..=*max {
                let mut buf = BytesMut::new();
                request(*api, version)(&mut buf)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} encodes: {e}"));
                let schema = schema(*api).unwrap();
                let mut walk = Walk {
                    bytes: &buf,
                    version,
                    flexible: version >= schema.flexible_from,
                };
                walk.fields(schema.fields).unwrap();
                if walk.flexible {
                    walk.tagged_fields().unwrap();
                }
                assert!(
                    walk.bytes.is_empty(),
                    "{api:?} v{version}: {} bytes left of {}",
                    walk.bytes.len(),
                    buf.len()
                );
                // One byte short ends inside a field (or inside an array of integers).
                assert!(
                    check(*api, version, &buf[..buf.len() - 1]).is_err(),
                    "{api:?} v{version}"
                );
                let mut bytes = buf.freeze();
                RequestKind::decode(*api, &mut bytes, version)
                    .unwrap_or_else(|e| panic!("{api:?} v{version} decodes: {e}"));
            }
        }
    }

    #[test]
    fn an_array_declaring_more_than_its_bytes_is_refused() {
        // Metadata v1: topics, 2^31 - 1 of them, in four bytes.
        assert_eq!(
            check(ApiKey::Metadata, 1, b"\x7f\xff\xff\xff"),
            Err(GuardError::Array {
                count: i32::MAX as u64,
                left: 0
            })
        );
        // Metadata v9 (compact): a varint count of 2^28, then one byte.
        assert!(matches!(
            check(ApiKey::Metadata, 9, b"\x81\x80\x80\x80\x01\x00"),
            Err(GuardError::Array { .. })
        ));
        // OffsetFetch v1: one topic whose partition list declares 3 integers in 8 bytes.
        let mut body = b"\x00\x01g\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x03".to_vec();
        body.extend_from_slice(&[0; 8]);
        assert!(matches!(
            check(ApiKey::OffsetFetch, 1, &body),
            Err(GuardError::Array { count: 3, left: 8 })
        ));
        body.extend_from_slice(&[0; 4]);
        assert_eq!(check(ApiKey::OffsetFetch, 1, &body), Ok(()));
    }
}
