//! Pod status: pure generation of the API `PodStatus` from the runtime's view (`generate`),
//! QoS classification (`qos`), the final status of a terminated pod (`terminate`), and the
//! status manager that owns every pod's latest status (`manager`).

pub mod api_sync;
pub mod generate;
pub mod manager;
pub mod terminate;
