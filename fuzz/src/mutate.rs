//! Seed-corpus mutation: receives a target's seeds (valid inputs) and token dictionary and emits
//! a new byte string — byte-, token- and line-level edits that keep most of the structure so
//! inputs reach deep into the parsers, plus a share of fully random bytes. Pure over [`Rng`].

use crate::rng::Rng;

/// Generic tokens worth splicing into any text format.
pub const COMMON_TOKENS: &[&str] = &[
    "+",
    "-",
    ".",
    "..",
    "e",
    "E",
    "%",
    "%%",
    "%ff",
    "%0",
    "%zz",
    "&",
    "=",
    "?",
    "/",
    "//",
    "\\",
    "\"",
    "'",
    "`",
    " ",
    "\t",
    "\n",
    "\r\n",
    "\0",
    "\u{7f}",
    "\u{b5}",
    "\u{3bc}",
    "\u{feff}",
    "\u{1f600}",
    "\u{10ffff}",
    "\u{fffd}",
    "true",
    "false",
    "null",
    "~",
    "[]",
    "{}",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    ";",
];

/// Numbers at and around the edges parsers get wrong.
pub const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "00",
    "007",
    "1.",
    ".5",
    "1.5",
    "-0",
    "1_000",
    "0x10",
    "0o7",
    "0b1",
    "255",
    "256",
    "65535",
    "65536",
    "2147483647",
    "2147483648",
    "-2147483648",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551616",
    "99999999999999999999999999999999999999999",
    "1e308",
    "1e309",
    "-1e309",
    "1e-400",
    "1e9223372036854775807",
    "1e-9223372036854775808",
    "NaN",
    "inf",
    "-inf",
];

/// Mutates `seeds` into a fresh input of at most `max_len` bytes. `dict` adds target tokens.
pub fn mutate(rng: &mut Rng, seeds: &[&[u8]], dict: &[&str], max_len: usize) -> Vec<u8> {
    if seeds.is_empty() || rng.one_in(20) {
        return random_bytes(rng, max_len.min(512));
    }
    let mut data = rng.pick(seeds).to_vec();
    // Mostly one or two edits (inputs stay close to valid and get deep), sometimes many.
    let rounds = match rng.below(4) {
        0 | 1 => 1,
        2 => rng.range(2, 3),
        _ => rng.range(2, 16),
    };
    for _ in 0..rounds {
        mutate_once(rng, &mut data, seeds, dict);
        if data.len() > max_len {
            data.truncate(max_len);
        }
    }
    data
}

/// Random bytes: raw, printable, or a token soup.
pub fn random_bytes(rng: &mut Rng, max_len: usize) -> Vec<u8> {
    let len = rng.small(max_len);
    match rng.below(3) {
        0 => (0..len).map(|_| rng.byte()).collect(),
        1 => (0..len).map(|_| b' ' + (rng.byte() % 95)).collect(),
        _ => {
            let mut out = Vec::new();
            while out.len() < len {
                let t = if rng.one_in(3) {
                    NUMBERS
                } else {
                    COMMON_TOKENS
                };
                out.extend_from_slice(rng.pick(t).as_bytes());
            }
            out
        }
    }
}

fn token<'a>(rng: &mut Rng, dict: &[&'a str]) -> &'a [u8] {
    match rng.below(6) {
        0 => rng.pick(COMMON_TOKENS).as_bytes(),
        1 => rng.pick(NUMBERS).as_bytes(),
        _ if dict.is_empty() => rng.pick(COMMON_TOKENS).as_bytes(),
        _ => rng.pick(dict).as_bytes(),
    }
}

/// A random `start..end` inside `data` of length up to `max`.
fn span(rng: &mut Rng, len: usize, max: usize) -> (usize, usize) {
    let start = rng.below(len + 1);
    let end = (start + 1 + rng.small(max)).min(len);
    (start, end.max(start))
}

/// Byte ranges of the lines of `data` (without their `\n`).
fn lines(data: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, b) in data.iter().enumerate() {
        if *b == b'\n' {
            out.push((start, i));
            start = i + 1;
        }
    }
    out.push((start, data.len()));
    out
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, seeds: &[&[u8]], dict: &[&str]) {
    let len = data.len();
    match rng.below(16) {
        // Bit flip.
        0 if len > 0 => {
            let i = rng.below(len);
            data[i] ^= 1 << rng.below(8);
        }
        // Random byte.
        1 if len > 0 => {
            let i = rng.below(len);
            data[i] = rng.byte();
        }
        // Insert random bytes.
        2 => {
            let at = rng.below(len + 1);
            let n = 1 + rng.small(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
            data.splice(at..at, bytes);
        }
        // Delete a span.
        3 if len > 0 => {
            let (s, e) = span(rng, len, 32);
            data.drain(s..e);
        }
        // Insert a token.
        4..=6 => {
            let at = rng.below(len + 1);
            let t = token(rng, dict).to_vec();
            data.splice(at..at, t);
        }
        // Replace a span with a token.
        7 | 8 => {
            let (s, e) = span(rng, len, 12);
            let t = token(rng, dict).to_vec();
            data.splice(s..e, t);
        }
        // Duplicate a span elsewhere.
        9 if len > 0 => {
            let (s, e) = span(rng, len, 64);
            let chunk = data[s..e].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, chunk);
        }
        // Repeat a span many times (size and nesting blow-ups).
        10 if len > 0 => {
            let (s, e) = span(rng, len, 16);
            let chunk = data[s..e].to_vec();
            let times = 1 + rng.small(200);
            let rep: Vec<u8> = chunk
                .iter()
                .copied()
                .cycle()
                .take(chunk.len() * times)
                .collect();
            data.splice(s..s, rep);
        }
        // Splice in a span of another seed.
        11 => {
            let other = rng.pick(seeds);
            let (s, e) = span(rng, other.len(), 128);
            let at = rng.below(len + 1);
            data.splice(at..at, other[s..e].iter().copied());
        }
        // Line edits: delete, duplicate, swap, re-indent.
        12 | 13 => {
            let ls = lines(data);
            let (s, e) = *rng.pick(&ls);
            match rng.below(4) {
                0 => {
                    data.drain(s..(e + 1).min(len));
                }
                1 => {
                    let mut line = data[s..e].to_vec();
                    line.push(b'\n');
                    data.splice(s..s, line);
                }
                2 => {
                    let (s2, e2) = *rng.pick(&ls);
                    if e <= s2 {
                        let (a, b) = (data[s..e].to_vec(), data[s2..e2].to_vec());
                        data.splice(s2..e2, a);
                        data.splice(s..e, b);
                    }
                }
                _ => {
                    let indent: Vec<u8> = vec![b' '; rng.small(6)];
                    let strip = data[s..e].iter().take_while(|b| **b == b' ').count();
                    data.splice(s..s + strip, indent);
                }
            }
        }
        // Change a number into another (interesting) number.
        14 => {
            if let Some(pos) = (0..len.min(4096))
                .map(|_| rng.below(len))
                .find(|i| data[*i].is_ascii_digit())
            {
                let mut end = pos;
                while end < len && data[end].is_ascii_digit() {
                    end += 1;
                }
                let mut start = pos;
                while start > 0 && data[start - 1].is_ascii_digit() {
                    start -= 1;
                }
                let n = rng.pick(NUMBERS).as_bytes().to_vec();
                data.splice(start..end, n);
            }
        }
        // Truncate.
        _ if len > 0 => {
            let at = rng.below(len);
            data.truncate(at);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutation_is_deterministic_and_bounded() {
        let seeds: &[&[u8]] = &[b"apiVersion: v1\nkind: Pod\n", b"{\"a\": [1, 2]}"];
        let gen_all = || {
            (0..500)
                .map(|i| mutate(&mut Rng::for_input(7, i), seeds, &["name"], 256))
                .collect::<Vec<_>>()
        };
        let a = gen_all();
        assert_eq!(a, gen_all());
        assert!(a.iter().all(|x| x.len() <= 256));
        // Mutation actually changes inputs (not every input is a verbatim seed).
        assert!(a.iter().filter(|x| !seeds.contains(&x.as_slice())).count() > 400);
    }
}
