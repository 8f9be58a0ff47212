//! Health checks the kubelet's parts register and `/healthz` runs (upstream's `healthz.Checker`):
//! a named closure returning why a part is unhealthy. Owned by whoever registers it; the server
//! runs them; the supervisor and node status add theirs.

use std::sync::Arc;

/// One check: `Ok` when healthy, else the reason `/healthz` reports.
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
