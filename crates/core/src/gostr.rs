//! Go's string forms that the kubelet reproduces byte for byte: `strconv.Quote` (`%q`, used
//! by klog's text format and by `fieldpath.FormatMap`) and `FormatMap` itself (downwardAPI
//! labels/annotations in volumes and env). Pure.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Go's `strconv.Quote`: double quotes, Go escapes for `"` `\` and control characters, `\x`,
/// `\u` and `\U` forms for other non-printable characters (control, non-ASCII spaces and
/// the common invisible format characters).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format_char = matches!(c as u32, 0xad | 0x200b..=0x200f | 0x2028..=0x202e | 0x2060..=0x2064 | 0xfeff | 0xe0000..=0xe007f);
    !c.is_control() && !c.is_whitespace() && !format_char
}

/// Upstream `fieldpath.FormatMap`: `key="quoted value"` lines in key order, no trailing newline.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_matches_strconv_quote() {
        for (s, want) in [
            ("plain", "\"plain\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("\u{7}\u{8}\u{c}\n\r\t\u{b}", "\"\\a\\b\\f\\n\\r\\t\\v\""),
            ("\u{1}\u{7f}", "\"\\x01\\x7f\""),
            ("caf\u{e9} \u{2603}", "\"caf\u{e9} \u{2603}\""),
            ("\u{a0}\u{200b}\u{feff}", "\"\\u00a0\\u200b\\ufeff\""),
            ("\u{e0001}", "\"\\U000e0001\""),
            ("", "\"\""),
        ] {
            assert_eq!(go_quote(s), want, "{s:?}");
        }
    }

    #[test]
    fn format_map_sorts_and_quotes() {
        let m = BTreeMap::from([
            ("b".to_owned(), "x\ny".to_owned()),
            ("a".to_owned(), "1".to_owned()),
        ]);
        assert_eq!(format_map(&m), "a=\"1\"\nb=\"x\\ny\"");
        assert_eq!(format_map(&BTreeMap::new()), "");
    }
}
