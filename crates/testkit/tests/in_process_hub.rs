//! The in-process hub is a real event hub to the Rust SDK: what is sent to it is there to read,
//! per partition, and it stops when told.

use azure_messaging_eventhubs::SendEventOptions;
use azure_messaging_eventhubs::models::EventData;
use hubhost_eventhubs::EventHubTarget;
use hubhost_hub::HubSpec;
use hubhost_testkit::InProcessHub;

#[tokio::test]
async fn events_sent_to_an_in_process_hub_are_in_its_partitions() {
    let hub = InProcessHub::start(vec![HubSpec {
        name: "orders".into(),
        partitions: 3,
        consumer_groups: vec!["$Default".into()],
    }])
    .await
    .expect("the hub listens");
    let target = EventHubTarget::parse(&hub.connection_string(), Some("orders")).unwrap();

    let producer = target.producer().await.expect("the SDK connects");
    for (partition, count) in [("0", 3), ("2", 1)] {
        for i in 0..count {
            let event = EventData::builder()
                .with_body(format!("order {i}").into_bytes())
                .build();
            let options = SendEventOptions {
                partition_id: Some(partition.into()),
            };
            producer.send_event(event, Some(options)).await.unwrap();
        }
    }
    producer.close().await.unwrap();

    let ends = target.partition_ends().await.unwrap();
    let held: Vec<(String, Option<i64>)> = ends
        .iter()
        .map(|e| {
            let held = (!e.is_empty).then_some(e.last_sequence_number + 1);
            (e.partition_id.clone(), held)
        })
        .collect();
    assert_eq!(
        held,
        [
            ("0".to_string(), Some(3)),
            ("1".to_string(), None),
            ("2".to_string(), Some(1))
        ]
    );

    let port = hub.port;
    hub.stop().await.expect("the hub stops cleanly");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "nothing listens on {port} once the hub stopped"
    );
}
