//! hubhost's shared state beside independent peers: the official Python checkpoint store on one
//! Azurite container (`checkpoint_interop`), racing `hubhost` processes and `kill -9` during
//! writes (`checkpoint_processes`), and Entra ID sign-in against Azurite's OAuth mode and a
//! local token endpoint (`entra_id`).

mod checkpoint_interop;
mod checkpoint_processes;
mod entra_id;
