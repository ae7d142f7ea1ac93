//! A Rust function app's life outside its code: [`scaffold`] writes a new one (`hubhost new`),
//! [`package`] builds it for the Functions platform and zips its script root
//! (`hubhost package`), checking what it ships (the executable's ELF headers, host.json and
//! function.json against their schemas).

pub mod package;
pub mod scaffold;
