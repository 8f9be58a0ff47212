//! The fake API server's black-box suites in one test binary (kubectl, raw HTTP, the strategic
//! merge differential, faults): each module was one test file and keeps its name; `common`
//! holds the server-with-kubeconfig and kubectl helpers.
//!
//! One binary, not one per file: each test binary linked the whole crate graph, which cost CI
//! disk and link time.

mod common;

mod csr;
mod faults;
mod http;
mod kubectl;
mod kubectl_csr;
mod kubectl_ephemeral;
mod kubectl_resize;
mod kubectl_reviews;
mod kubectl_runtimeclass;
mod kubectl_stream;
mod smp_diff;
mod streaming_proxy;
