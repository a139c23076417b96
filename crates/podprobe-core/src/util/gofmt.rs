//! Go's formatting of quoted strings (`%q`, `strconv.Quote`) and durations
//! (`time.Duration.String`): the kubelet's probe messages, the API server's
//! field errors and Go's client errors embed values formatted that way, and
//! our messages must match them byte for byte.

use std::fmt::Write;
use std::time::Duration;

/// `s` in double quotes with Go's escapes: `\"`, `\\`, the C escapes
/// (`\a \b \f \n \r \t \v`), `\xNN` for other ASCII control bytes, and
/// `\uNNNN` / `\UNNNNNNNN` for other characters Go does not print.
pub fn go_quote(s: &str) -> String {
    go_quote_bytes(s.as_bytes())
}

/// [`go_quote`] of bytes that need not be UTF-8, as Go quotes a string
/// holding any bytes: each byte of an invalid sequence as `\xNN`.
pub fn go_quote_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        quote_chars(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.push('"');
    out
}

fn quote_chars(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if is_go_printable(c) => out.push(c),
            // Writing to a String cannot fail.
            c if c < ' ' || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x1_0000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
}

/// Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols and
/// the ASCII space. Without Unicode category tables this treats every
/// non-control, non-space character as printable except the format and
/// private-use ranges listed, which covers what shows up in manifests; Go
/// would also escape unassigned code points.
fn is_go_printable(c: char) -> bool {
    if c.is_ascii() {
        return (' '..='~').contains(&c);
    }
    !(c.is_control() || c.is_whitespace() || is_format_or_private_use(c))
}

fn is_format_or_private_use(c: char) -> bool {
    matches!(c,
        '\u{ad}'
        | '\u{600}'..='\u{605}'
        | '\u{61c}'
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}'
        | '\u{e000}'..='\u{f8ff}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}'
        | '\u{f0000}'..='\u{10ffff}')
}

/// Renders a duration the way Go's `time.Duration.String` does (`1s`, `500ms`,
/// `1m30s`, `1.5s`), because the kubelet's probe messages embed it.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    let secs = trim_fraction(
        u128::from(secs as u64) * 1_000_000_000 + sub_nanos,
        1_000_000_000,
    );
    match (hours, minutes) {
        (0, 0) => format!("{secs}s"),
        (0, m) => format!("{m}m{secs}s"),
        (h, m) => format!("{h}h{m}m{secs}s"),
    }
}

/// `value / unit` as a decimal with trailing zeros removed (`1500, 1000` -> `1.5`).
fn trim_fraction(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{frac:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_invalid_utf8_byte_by_byte_like_go() {
        assert_eq!(go_quote_bytes(b"%a\xc3"), "\"%a\\xc3\"");
        assert_eq!(go_quote_bytes("caf\u{e9}\n".as_bytes()), "\"caf\u{e9}\\n\"");
        assert_eq!(go_quote_bytes(b"\xff\xfe"), "\"\\xff\\xfe\"");
    }

    #[test]
    fn quotes_like_go_strconv_quote() {
        let cases = [
            ("", r#""""#),
            ("web", r#""web""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("tab\there\n", r#""tab\there\n""#),
            ("\x00\x1b\x7f", r#""\x00\x1b\x7f""#),
            ("\x07\x08\x0b\x0c\r", r#""\a\b\v\f\r""#),
            ("héllo 世界", "\"héllo 世界\""),
            ("\u{a0}\u{200b}\u{85}", r#""\u00a0\u200b\u0085""#),
            ("\u{100000}", r#""\U00100000""#),
        ];
        for (input, want) in cases {
            assert_eq!(go_quote(input), want, "{input:?}");
        }
    }

    #[test]
    fn go_duration_matches_go_formatting() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_micros(1), "1µs"),
            (Duration::from_nanos(1500), "1.5µs"),
            (Duration::from_nanos(7), "7ns"),
            (
                Duration::from_secs(61) + Duration::from_millis(250),
                "1m1.25s",
            ),
        ];
        for (d, want) in cases {
            assert_eq!(go_duration(d), want, "{d:?}");
        }
    }
}
