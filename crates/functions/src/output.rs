//! What a function answers for a batch it processed: log lines, a return value, and values for
//! the output bindings its function.json declares, which the host then carries out (an
//! `eventHub` output sends events, a `blob` output writes a blob).
//!
//! The helpers write each value in the one form the host reads back exactly. The host decodes
//! any *string* value that happens to be valid base64 into bytes (unless the binding says
//! `dataType: binary`), so a lone string such as `"abcd"` would arrive as three bytes. Hence:
//! events always go as a JSON array of strings (the host sends each element as one event and
//! never base64-decodes inside an array), and blob contents always go base64-encoded (the host
//! decodes them back into exactly the bytes given). docs/host-contract.md §6 has the details.

use base64::Engine;
use serde::Serialize;
use serde_json::{Map, Value};

/// What a function answers for a batch it processed.
///
/// ```
/// use hubhost_functions::server::FunctionOutput;
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
        self.events(binding).push(Value::String(text.into()));
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

    /// Sets an output binding's value as it is, for binding types without a helper.
    pub fn set_output(&mut self, binding: &str, value: Value) -> &mut Self {
        self.outputs.insert(binding.to_string(), value);
        self
    }

    fn events(&mut self, binding: &str) -> &mut Vec<Value> {
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
