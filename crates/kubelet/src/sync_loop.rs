//! sync_loop (in progress).
