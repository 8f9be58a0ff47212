//! Escaping of terminal control characters in the operator CLI's human-readable output
//! (`get` tables, `describe`, error lines): owns nothing; receives text that pods, events and
//! the runtime wrote (event and termination messages, reasons, names); emits it with every
//! character a terminal would act on made visible, so a message cannot clear root's screen,
//! set its clipboard (OSC 52), retitle the window or overwrite a line. Container log content
//! (`rkubelet logs`) is never passed here: like `kubectl logs`, it stays raw.
//!
//! kubectl's printers (cli-runtime `EscapeTerminal`, used by its table printer and `describe`)
//! replace ESC with `^[` and CR with `\r`; the same spellings are used here. This goes further,
//! as the threat model asks: the other C0 controls (BEL, BS, …) become caret notation (`^G`),
//! DEL `^?`, and the C1 controls U+0080–U+009F (8-bit CSI, OSC, …) `\u009b`. Tab and newline
//! stay: they are the layout of the output.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `s` with its terminal control characters made visible (borrowed when there are none).
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\x1b' => out.push_str("^["),
            '\r' => out.push_str("\\r"),
            '\x7f' => out.push_str("^?"),
            c if (c as u32) < 0x20 && needs_escape(c) => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text with its C1 controls (valid raw in JSON strings) written as `\u00XX` escapes,
/// which decode to the same characters. serde_json already escapes the C0 ones.
pub fn escape_c1_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if ('\u{80}'..='\u{9f}').contains(&c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

fn needs_escape(c: char) -> bool {
    match c {
        '\t' | '\n' => false,
        c => c.is_control(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_made_visible() {
        let hostile = "a\x1b[2Jb\x1b]52;c;aGk=\x07c\rd\x08e\x00f\x7fg\u{9b}31mh\u{9d}0;t\u{9c}i";
        assert_eq!(
            escape(hostile),
            "a^[[2Jb^[]52;c;aGk=^Gc\\rd^He^@f^?g\\u009b31mh\\u009d0;t\\u009ci"
        );
        // Layout and printable text (any script) are kept.
        assert_eq!(escape("ok\tcol\nnext é ✓"), "ok\tcol\nnext é ✓");
        assert!(matches!(escape("plain"), Cow::Borrowed("plain")));
    }
}
