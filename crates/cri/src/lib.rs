//! CRI v1 client.
