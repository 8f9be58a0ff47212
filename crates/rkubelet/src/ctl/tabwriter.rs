//! Column alignment as Go's `text/tabwriter` does it for kubectl (no colour): owns nothing;
//! receives lines of tab-terminated cells; emits the aligned text. A column is aligned over a
//! block of consecutive lines that have a tab-terminated cell in it; a line's last cell is
//! never padded. `kubectl get` writes with minimum width 6 and padding 3, `kubectl describe`
//! with minimum width 0 and padding 2. Control characters in what is written are escaped first
//! (every human-readable line of `get` and `describe` goes through here).

/// One table being written (flushed as a whole, as kubectl flushes its writer).
pub struct TabWriter {
    min_width: usize,
    padding: usize,
    text: String,
}

impl TabWriter {
    /// `kubectl get`'s writer.
    pub fn table() -> Self {
        Self::new(6, 3)
    }

    /// `kubectl describe`'s writer.
    pub fn describe() -> Self {
        Self::new(0, 2)
    }

    pub fn new(min_width: usize, padding: usize) -> Self {
        Self {
            min_width,
            padding,
            text: String::new(),
        }
    }

    /// Adds text: each `\n` ends a line, each `\t` ends a cell. Terminal control characters
    /// are escaped (see [`super::terminal`]), as kubectl escapes every cell and describe line.
    pub fn write(&mut self, text: &str) {
        self.text.push_str(&super::terminal::escape(text));
    }

    /// The aligned text of everything written (every line ends with a newline).
    pub fn flush(self) -> String {
        let body = self.text.strip_suffix('\n').unwrap_or(&self.text);
        let lines: Vec<Vec<&str>> = if self.text.is_empty() {
            Vec::new()
        } else {
            body.split('\n').map(|l| l.split('\t').collect()).collect()
        };
        let mut out = String::new();
        let mut widths = Vec::new();
        self.format(&lines, &mut widths, 0, lines.len(), &mut out);
        out
    }

    fn format(
        &self,
        lines: &[Vec<&str>],
        widths: &mut Vec<usize>,
        mut line0: usize,
        line1: usize,
        out: &mut String,
    ) {
        let column = widths.len();
        let mut this = line0;
        while this < line1 {
            if column + 1 >= lines[this].len() {
                this += 1;
                continue;
            }
            write_lines(&lines[line0..this], widths, out);
            line0 = this;
            let mut width = self.min_width;
            while this < line1 && column + 1 < lines[this].len() {
                width = width.max(cell_width(lines[this][column]) + self.padding);
                this += 1;
            }
            widths.push(width);
            self.format(lines, widths, line0, this, out);
            widths.pop();
            line0 = this;
        }
        write_lines(&lines[line0..line1], widths, out);
    }
}

fn cell_width(s: &str) -> usize {
    s.chars().count()
}

fn write_lines(lines: &[Vec<&str>], widths: &[usize], out: &mut String) {
    for line in lines {
        for (j, cell) in line.iter().enumerate() {
            out.push_str(cell);
            if j + 1 < line.len()
                && let Some(w) = widths.get(j)
            {
                for _ in cell_width(cell)..*w {
                    out.push(' ');
                }
            }
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_per_block_and_last_cells_are_not_padded() {
        let mut w = TabWriter::describe();
        w.write("Name:\tnginx\nService Account:\tdefault\nContainers:\n  c:\n    Image:\tx\n    Restart Count:\t0\n");
        assert_eq!(
            w.flush(),
            "Name:             nginx\nService Account:  default\nContainers:\n  c:\n    Image:          x\n    Restart Count:  0\n"
        );
        let mut t = TabWriter::table();
        t.write("NAME\tREADY\tSTATUS\n");
        t.write("a-long-pod-name\t1/1\tRunning\n");
        assert_eq!(
            t.flush(),
            "NAME              READY   STATUS\na-long-pod-name   1/1     Running\n"
        );
    }
}
