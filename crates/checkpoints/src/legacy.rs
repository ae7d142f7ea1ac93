//! The legacy checkpoint format: one JSON blob per partition, written by EventProcessorHost
//! (Functions Event Hubs extension v3/v4), e.g.
//! `{"PartitionId":"0","Owner":"…","Token":"…","Epoch":386,"Offset":"8591964920","SequenceNumber":960180}`.
//!
//! hubhost only reads it: when a partition has no current checkpoint, its start position comes
//! from here, as the v5 extension does with `initializeWithLegacyCheckpoints`; and
//! `hubhost checkpoints migrate` copies it into the current format. Legacy blobs are never
//! written.

use serde::Deserialize;

use crate::CheckpointError;

/// What a legacy lease blob says about where its partition stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyCheckpoint {
    pub partition_id: String,
    /// The lease holder EventProcessorHost recorded (informational: legacy leases are not honoured).
    pub owner: Option<String>,
    pub epoch: Option<i64>,
    pub offset: String,
    pub sequence_number: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LeaseBody {
    partition_id: Option<String>,
    owner: Option<String>,
    epoch: Option<i64>,
    offset: Option<String>,
    sequence_number: Option<i64>,
}

/// Parses a legacy lease blob. `Ok(None)` is a lease that never checkpointed (EventProcessorHost
/// creates leases with a null `Offset`); anything that is not the lease JSON is an error naming
/// the blob.
pub fn parse(
    blob: &str,
    partition_id: &str,
    body: &[u8],
) -> Result<Option<LegacyCheckpoint>, CheckpointError> {
    let bad = |problem: String| CheckpointError::BadLegacyCheckpoint {
        blob: blob.to_string(),
        problem,
    };
    // EventProcessorHost's JSON.NET output may start with a byte order mark.
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let lease: LeaseBody = serde_json::from_slice(body)
        .map_err(|e| bad(format!("it is not a legacy lease JSON object: {e}")))?;
    if let Some(id) = &lease.partition_id
        && id != partition_id
    {
        return Err(bad(format!(
            "its PartitionId {id:?} does not match its name (partition {partition_id:?})"
        )));
    }
    let offset = match lease.offset {
        None => return Ok(None),
        Some(o) if o.is_empty() => return Ok(None),
        Some(o) => o,
    };
    if offset.parse::<i64>().is_err() {
        return Err(bad(format!("its Offset {offset:?} is not a number")));
    }
    let sequence_number = lease
        .sequence_number
        .ok_or_else(|| bad("it has an Offset but no SequenceNumber".to_string()))?;
    Ok(Some(LegacyCheckpoint {
        partition_id: partition_id.to_string(),
        owner: lease.owner.filter(|o| !o.is_empty()),
        epoch: lease.epoch,
        offset,
        sequence_number,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = include_str!("testdata/legacy_eph_checkpoint_blob_body.json");

    #[test]
    fn the_reference_sample_parses() {
        let cp = parse("ns/hub/$Default/0", "0", SAMPLE.as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(cp.offset, "8591964920");
        assert_eq!(cp.sequence_number, 960180);
        assert_eq!(cp.epoch, Some(386));
        assert_eq!(
            cp.owner.as_deref(),
            Some("681d365b-de1b-4288-9733-76294e17daf0")
        );
    }

    #[test]
    fn a_lease_that_never_checkpointed_is_no_checkpoint() {
        let body = br#"{"PartitionId":"2","Owner":"","Token":"","Epoch":0,"Offset":null,"SequenceNumber":0}"#;
        assert_eq!(parse("b", "2", body).unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error_naming_the_blob_and_the_problem() {
        for (body, needle) in [
            (&b"not json"[..], "not a legacy lease JSON"),
            (
                br#"{"PartitionId":"0","Offset":"abc","SequenceNumber":1}"#,
                "not a number",
            ),
            (br#"{"PartitionId":"0","Offset":"12"}"#, "no SequenceNumber"),
            (
                br#"{"PartitionId":"7","Offset":"12","SequenceNumber":1}"#,
                "does not match",
            ),
        ] {
            let err = parse("ns/hub/$Default/0", "0", body)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("ns/hub/$Default/0") && err.contains(needle),
                "{err}"
            );
        }
    }
}
