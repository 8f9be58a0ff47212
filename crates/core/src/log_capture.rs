//! Test-only: a tracing `MakeWriter` that keeps everything logged in a shared buffer, so a
//! unit test can assert on what the kubelet said. Owns the buffer; emits its text on request.

use crate::sync;
use std::sync::{Arc, Mutex, MutexGuard};

/// A `MakeWriter` appending every log line to one shared buffer (clones share it).
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    fn buf(&self) -> MutexGuard<'_, Vec<u8>> {
        sync::lock(&self.0)
    }

    /// Everything logged so far (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buf()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buf().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
