//! Go's `strconv.Quote`, because the API server's field errors (`%q`) and
//! Go's `strconv.Atoi` errors embed user strings quoted that way, and our
//! messages must match them byte for byte.

use std::fmt::Write;

/// `s` in double quotes with Go's escapes: `\"`, `\\`, the C escapes
/// (`\a \b \f \n \r \t \v`), `\xNN` for other ASCII control bytes, and
/// `\uNNNN` / `\UNNNNNNNN` for other characters Go does not print.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
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
    out.push('"');
    out
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

#[cfg(test)]
mod tests {
    use super::go_quote;

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
}
