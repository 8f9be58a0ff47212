//! CRI v1 client for rkubelet. Owns the `RuntimeService`/`ImageService` traits (one method per
//! CRI RPC, protocol types from `k8s_cri::v1` re-exported as [`api`]), the gRPC-status → domain
//! error mapping ([`CriError`]), the unix-socket client ([`RemoteRuntime`]) and, with feature
//! `fake`, an in-memory containerd look-alike (`fake::FakeRuntime`) for tests and the placement
//! rules of real-runtime tests (`testing`).

pub use k8s_cri::v1 as api;

pub mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod remote;
#[cfg(any(test, feature = "fake"))]
pub mod testing;
pub mod traits;

pub use error::CriError;
pub use remote::{MAX_MESSAGE_SIZE, RemoteRuntime, parse_endpoint};
pub use traits::{
    ContainerEventStream, IMAGE_METHODS, ImageService, RUNTIME_METHODS, RuntimeService,
};
