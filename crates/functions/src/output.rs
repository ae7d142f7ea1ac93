//! What a function answers for a batch it processed: log lines, a return value, and values for
//! the output bindings its function.json declares, which the host then carries out (an
//! `eventHub` output sends events, a `blob` output writes a blob, a `queue` output puts
//! messages, a `table` output writes entities).
//!
//! The helpers write each value in the one form the host reads back exactly. The host decodes
//! any *string* value that happens to be valid base64 into bytes (unless the binding says
//! `dataType: binary`), so a lone string such as `"abcd"` would arrive as three bytes. Hence:
//! events always go as a JSON array of strings (the host sends each element as one event and
//! never base64-decodes inside an array), and blob contents always go base64-encoded (the host
//! decodes them back into exactly the bytes given). Queue messages and table entities go as a
//! JSON array too, one element per message or entity. docs/host-contract.md §6 has the details.

use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a function answers for a batch it processed.
///
/// ```
/// use hubhost_functions::output::FunctionOutput;
///
/// let mut output = FunctionOutput::default();
/// output.log("2 readings, 1 alarm");
/// output.send_event_text("alarms", "glass break in home 42");
/// output.send_event_json("alarms", &serde_json::json!({"home": 42}))?;
/// output.write_blob("report", b"home,events\n42,2\n");
/// assert_eq!(
///     output.outputs["alarms"],
///     serde_json::json!(["glass break in home 42", "{\"home\":42}"])
/// );
/// assert_eq!(output.outputs["report"], "aG9tZSxldmVudHMKNDIsMgo=");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct FunctionOutput {
    /// Lines the host logs for this invocation.
    pub logs: Vec<String>,
    /// `ReturnValue` of the answer (a `$return` output binding takes it).
    pub return_value: Value,
    /// `Outputs` of the answer: one value per output binding name. Set them with the helpers
    /// below; a name function.json does not declare is ignored by the host (and logged).
    pub outputs: Map<String, Value>,
}

impl FunctionOutput {
    /// Adds a line the host logs for this invocation.
    pub fn log(&mut self, line: impl Into<String>) -> &mut Self {
        self.logs.push(line.into());
        self
    }

    /// Sends one event, with `text` as its body (UTF-8), through the `eventHub` output
    /// `binding`. Call it again for more events: they go in the order given.
    pub fn send_event_text(&mut self, binding: &str, text: impl Into<String>) -> &mut Self {
        self.items(binding).push(Value::String(text.into()));
        self
    }

    /// Sends one event whose body is `event` as JSON (compact, UTF-8) through the `eventHub`
    /// output `binding`.
    pub fn send_event_json<T: Serialize + ?Sized>(
        &mut self,
        binding: &str,
        event: &T,
    ) -> Result<&mut Self, serde_json::Error> {
        let text = serde_json::to_string(event)?;
        Ok(self.send_event_text(binding, text))
    }

    /// Writes `content` as the blob of the `blob` output `binding` (the blob's name is the
    /// binding's `path`). The binding must not declare `dataType: binary` (see the module
    /// documentation); the server refuses such a binding at start-up.
    pub fn write_blob(&mut self, binding: &str, content: impl AsRef<[u8]>) -> &mut Self {
        let encoded = base64::engine::general_purpose::STANDARD.encode(content);
        self.outputs
            .insert(binding.to_string(), Value::String(encoded));
        self
    }

    /// Sets `event` aside as poison, with `reason`, so that the rest of the batch goes on: the
    /// batch's poison events are written together as one JSON array — each with its partition,
    /// sequence number, offset, enqueued time, partition key, properties, body (as text when it
    /// is UTF-8, else `bodyBase64`) and the reason — through the `blob` output `binding`, e.g.
    /// one declared with `"path": "deadletter/{DateTime}-{rand-guid}.json"`.
    ///
    /// ```
    /// use hubhost_functions::batch::{EventRecord, PartitionContext};
    /// use hubhost_functions::output::FunctionOutput;
    ///
    /// let partition = PartitionContext { partition_id: "2".into(), ..Default::default() };
    /// let mut output = FunctionOutput::default();
    /// output.dead_letter("poison", &partition, &EventRecord::new("not json"), "not JSON");
    /// output.dead_letter("poison", &partition, &EventRecord::new(vec![0xff]), "not UTF-8");
    /// let records = FunctionOutput::dead_letters(&output.outputs["poison"]);
    /// assert_eq!(records.len(), 2);
    /// assert_eq!(records[0]["reason"], "not JSON");
    /// assert_eq!(records[0]["body"], "not json");
    /// assert_eq!(records[1]["bodyBase64"], "/w==");
    /// ```
    pub fn dead_letter(
        &mut self,
        binding: &str,
        partition: &crate::batch::PartitionContext,
        event: &crate::batch::EventRecord,
        reason: impl Into<String>,
    ) -> &mut Self {
        let mut records = self
            .outputs
            .get(binding)
            .map(Self::dead_letters)
            .unwrap_or_default();
        let mut record = serde_json::json!({
            "reason": reason.into(),
            "eventHubName": partition.event_hub_name,
            "consumerGroup": partition.consumer_group,
            "partitionId": partition.partition_id,
            "sequenceNumber": event.sequence_number,
            "offset": event.offset,
            "enqueuedTime": event.enqueued_time,
            "partitionKey": event.partition_key,
            "properties": event.properties,
        });
        match event.text() {
            Ok(text) => record["body"] = Value::from(text),
            Err(_) => {
                record["bodyBase64"] =
                    Value::from(base64::engine::general_purpose::STANDARD.encode(&event.body))
            }
        }
        records.push(record);
        let content = serde_json::to_vec(&records).expect("records serialize");
        self.write_blob(binding, content)
    }

    /// The records [`dead_letter`](Self::dead_letter) wrote into an output value (empty if
    /// the value is not such a blob).
    pub fn dead_letters(value: &Value) -> Vec<Value> {
        value
            .as_str()
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Puts one message whose text is `text` on the queue of the `queue` output `binding`. Call
    /// it again for more messages: they go in the order given. The Storage Queues extension
    /// encodes the text's UTF-8 bytes in base64 (unless host.json sets
    /// `extensions.queues.messageEncoding` to `none`), as its queue triggers read it.
    ///
    /// ```
    /// use hubhost_functions::output::FunctionOutput;
    ///
    /// let mut output = FunctionOutput::default();
    /// output.put_queue_message("work", "home 42").put_queue_message("work", "home 7");
    /// assert_eq!(output.outputs["work"], serde_json::json!(["home 42", "home 7"]));
    /// ```
    pub fn put_queue_message(&mut self, binding: &str, text: impl Into<String>) -> &mut Self {
        self.items(binding).push(Value::String(text.into()));
        self
    }

    /// Writes one entity to the table of the `table` output `binding`: `entity` as a JSON
    /// object, with `PartitionKey` and `RowKey` members unless the binding gives them. Its
    /// other members are the entity's properties: strings, numbers (integers are stored as
    /// 64-bit integers) and booleans. Without an `odata.etag` member the entity is inserted,
    /// and one with the same keys is a conflict that fails the invocation; with
    /// `"odata.etag": "*"` it is inserted or replaced.
    ///
    /// ```
    /// use hubhost_functions::output::FunctionOutput;
    ///
    /// let mut output = FunctionOutput::default();
    /// output.write_table_entity(
    ///     "readings",
    ///     &serde_json::json!({"PartitionKey": "home-42", "RowKey": "7", "watts": 12}),
    /// )?;
    /// assert_eq!(output.outputs["readings"][0]["watts"], 12);
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn write_table_entity<T: Serialize + ?Sized>(
        &mut self,
        binding: &str,
        entity: &T,
    ) -> Result<&mut Self, serde_json::Error> {
        let value = serde_json::to_value(entity)?;
        self.items(binding).push(value);
        Ok(self)
    }

    /// Sets an output binding's value as it is, for binding types without a helper.
    pub fn set_output(&mut self, binding: &str, value: Value) -> &mut Self {
        self.outputs.insert(binding.to_string(), value);
        self
    }

    /// The array of items (events, messages, entities) an output binding's value is.
    fn items(&mut self, binding: &str) -> &mut Vec<Value> {
        let slot = self
            .outputs
            .entry(binding.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        if !slot.is_array() {
            *slot = Value::Array(Vec::new());
        }
        slot.as_array_mut().expect("an array")
    }
}
