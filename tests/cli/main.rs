//! The command line as a user runs it, each from the folder the docs imply: `hubhost demo`
//! (`demo`), `new` (`new_project`), the development loop of `invoke` and `emulate --watch`
//! (`dev_loop`), `package` (`package`), `checkpoints` (`checkpoints`), and the files a
//! deployment reads: the function app against the official schemas (`function_app_files`) and
//! the infrastructure template (`deploy_template`).

mod checkpoints;
mod demo;
mod deploy_template;
mod dev_loop;
mod function_app_files;
mod new_project;
mod package;
