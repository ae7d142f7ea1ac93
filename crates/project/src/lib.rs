//! A Rust function app's life outside its code: [`scaffold`] writes a new one (`hubhost new`)
//! with the dependency versions this build was tested with ([`lockfile`]),
//! [`package`] builds it for the Functions platform and zips its script root
//! (`hubhost package`), checking what it ships (the executable's ELF headers, host.json and
//! function.json against their schemas), and [`docs`] documents the hubhost crates it uses
//! (`hubhost docs`).

pub mod add;
pub mod docs;
pub mod lockfile;
pub mod package;
pub mod scaffold;
