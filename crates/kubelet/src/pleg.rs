//! pleg (in progress).
