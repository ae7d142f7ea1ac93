//! The command line as a user runs it, each from the folder the docs imply: `hubhost demo`
//! (`demo`), `new` (`new_project`), the development loop of `invoke` and `emulate --watch`
//! (`dev_loop`), `package` (`package`), `checkpoints` (`checkpoints`), an app read as the host
//! reads it (`app_reading`), its output bindings and other triggers (`bindings`), and the files a
//! deployment reads: the function app against the official schemas (`function_app_files`) and
//! the infrastructure template (`deploy_template`), and the help pages (`help`).

mod app_reading;
mod bindings;
mod checkpoints;
mod demo;
mod deploy_template;
mod dev_loop;
mod function_app_files;
mod help;
mod host_request;
mod new_project;
mod package;

/// The target folder the new projects of these tests share (`CARGO_TARGET_DIR`, as developers
/// share one between projects): beside this workspace's build, not in it, so building a new
/// project neither waits for Cargo's lock on the workspace's `debug` folder (which the other
/// tests' builds of the examples take) nor makes them wait.
fn shared_target() -> std::path::PathBuf {
    let hubhost = std::path::Path::new(env!("CARGO_BIN_EXE_hubhost"));
    let workspace_target = hubhost.parent().and_then(std::path::Path::parent).unwrap();
    workspace_target.join("new-projects")
}
