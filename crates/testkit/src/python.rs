//! The official Python SDK as an independent peer: the scripts in the repository's
//! `tests/python/`, run with the Python that has the Azure packages.

use std::process::{Command, Output};

use serde_json::Value;

use crate::process::{COMMAND_LIMIT, output_within};
use crate::repository;
use crate::tools::python;

/// Runs a Python script from tests/python with arguments, to completion, whatever its exit.
pub fn python_output(script: &str, args: &[&str]) -> Output {
    let path = repository().join("tests/python").join(script);
    output_within(Command::new(python()).arg(path).args(args), COMMAND_LIMIT)
}

/// Runs a Python script from tests/python with arguments; returns its stdout parsed as JSON.
pub fn python_json(script: &str, args: &[&str]) -> Value {
    json_output(&format!("{script} {args:?}"), &python_output(script, args))
}

/// What a peer program that ran to completion printed, as JSON; the test fails when it failed
/// (with its stderr) or printed something else. `what` names it in the failure.
pub fn json_output(what: &str, out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}
