//! The queue and table services against a real Azurite (its queue and table services): a put
//! on a missing queue creates it; an entity inserted twice is a conflict, upserted twice is
//! one entity, replaced on a stale ETag is a lost condition; a missing table is created; a
//! wrong key is refused, without the key in the message.

use hubhost_testkit as common;
use hubhost_testkit::Tool;

use hubhost_storage::queue::QueueService;
use hubhost_storage::table::{EntityWrite, TableService};
use hubhost_storage::{StorageConnection, StoreError};
use serde_json::{Map, Value, json};

fn entity(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

#[tokio::test]
async fn queues_and_tables_behave_as_the_extensions_expect_of_them() {
    common::require!(Tool::Azurite);
    let azurite = common::Azurite::start_all();
    let connection = StorageConnection::parse(&azurite.connection_string()).unwrap();

    let queues = QueueService::new(&connection)
        .unwrap()
        .expect("a queue service");
    queues
        .put_message("made-on-first-put", "aGk=")
        .await
        .unwrap();
    queues
        .put_message("made-on-first-put", "<&>")
        .await
        .unwrap();
    assert!(matches!(
        queues.put_message("Not_Valid", "x").await,
        Err(StoreError::InvalidName { .. })
    ));

    let tables = TableService::new(&connection)
        .unwrap()
        .expect("a table service");
    let first =
        entity(json!({"PartitionKey": "p", "RowKey": "1", "n@odata.type": "Edm.Int64", "n": "1"}));
    tables
        .write("readings", &first, &EntityWrite::Insert)
        .await
        .unwrap();
    let again = tables.write("readings", &first, &EntityWrite::Insert).await;
    assert!(
        matches!(&again, Err(StoreError::AlreadyExists { container, name }) if container == "readings" && name == "p/1"),
        "{again:?}"
    );
    let changed = entity(json!({"PartitionKey": "p", "RowKey": "1", "note": "o'clock"}));
    tables
        .write("readings", &changed, &EntityWrite::Upsert)
        .await
        .unwrap();
    tables
        .write("readings", &changed, &EntityWrite::Upsert)
        .await
        .unwrap();
    let stale = tables
        .write(
            "readings",
            &changed,
            &EntityWrite::Replace {
                etag: "W/\"datetime'2000-01-01T00%3A00%3A00Z'\"".into(),
            },
        )
        .await;
    assert!(
        matches!(stale, Err(StoreError::ConditionNotMet { .. })),
        "{stale:?}"
    );
    // Keys with a quote go into the entity's path quoted.
    let quoted = entity(json!({"PartitionKey": "it's", "RowKey": "a b"}));
    tables
        .write("readings", &quoted, &EntityWrite::Upsert)
        .await
        .unwrap();

    // A wrong key: refused, permanently, and the key is not in the message.
    let wrong_key =
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==";
    let wrong = StorageConnection::parse(
        &azurite
            .connection_string()
            .replace(hubhost_storage::connection::DEV_KEY, wrong_key),
    )
    .unwrap();
    let refused = QueueService::new(&wrong)
        .unwrap()
        .unwrap()
        .put_message("made-on-first-put", "x")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::Rejected { status: 403, .. }),
        "{refused:?}"
    );
    assert!(!refused.to_string().contains(wrong_key));
    let refused = TableService::new(&wrong)
        .unwrap()
        .unwrap()
        .write("readings", &first, &EntityWrite::Upsert)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::Rejected { status: 403, .. }),
        "{refused:?}"
    );
}
