//! The slice of Go's `net/url` that shows through the kubelet's HTTP probe:
//! how `httpGet.path` is read as a URL reference, how the probe URL prints
//! (it appears in every transport error, `Get "<url>": ...`), how it is
//! re-parsed as the request URL, and how a redirect's `Location` resolves
//! against the URL that produced it.
//!
//! Paths and fragments are kept in their escaped form (Go's `EscapedPath`,
//! `EscapedFragment`), which is all that is ever printed or sent; the host is
//! kept unescaped, as Go's `URL.Host` is. Userinfo is kept as written and
//! printed back verbatim (Go re-escapes it and, when sending, turns it into a
//! Basic `Authorization` header; neither is reproduced).

use std::fmt;

use podprobe_core::util::gofmt::{go_quote, go_quote_bytes};

/// A parsed URL or URL reference (Go's `url.URL`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Url {
    /// Lower-cased scheme, empty for a relative reference.
    pub scheme: String,
    /// Rootless part after `scheme:` (`mailto:x`), empty otherwise.
    pub opaque: String,
    pub userinfo: Option<String>,
    /// `host[:port]`, unescaped, IPv6 literals bracketed.
    pub host: String,
    /// Escaped path.
    pub path: String,
    /// A `?` with nothing after it was present.
    pub force_query: bool,
    pub raw_query: String,
    /// Escaped fragment.
    pub fragment: String,
}

/// A string that Go's `url.Parse` rejects; displays as Go's `*url.Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse {}: {reason}", go_quote(.input))]
pub struct ParseError {
    pub input: String,
    pub reason: String,
}

/// Which URL component a byte is escaped for (Go's `encoding` modes).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Component {
    Path,
    Host,
    Fragment,
}

impl Url {
    /// Parses an absolute URL or a relative reference (Go's `url.Parse`).
    pub fn parse(raw: &str) -> Result<Url, ParseError> {
        let fail = |reason: String| ParseError {
            input: raw.to_string(),
            reason,
        };
        let (before_fragment, fragment) = match raw.split_once('#') {
            Some((before, fragment)) => (before, Some(fragment)),
            None => (raw, None),
        };
        let mut url = parse_without_fragment(before_fragment).map_err(fail)?;
        if let Some(fragment) = fragment {
            url.fragment = normalize_escapes(fragment, Component::Fragment).map_err(fail)?;
        }
        Ok(url)
    }

    /// A URL whose only part is `path`, taken literally (Go's
    /// `&url.URL{Path: path}`): what the kubelet falls back to when
    /// `httpGet.path` does not parse.
    pub fn from_literal_path(path: &str) -> Url {
        let path = if path == "*" {
            path.to_string()
        } else {
            escape(path.as_bytes(), Component::Path)
        };
        Url {
            path,
            ..Url::default()
        }
    }

    /// Resolves `reference` (a `Location` header value) against `self`
    /// (Go's `URL.Parse`).
    pub fn resolve(&self, reference: &str) -> Result<Url, ParseError> {
        let reference = Url::parse(reference)?;
        let mut url = reference.clone();
        if url.scheme.is_empty() {
            url.scheme.clone_from(&self.scheme);
        }
        if !reference.scheme.is_empty()
            || !reference.host.is_empty()
            || reference.userinfo.is_some()
        {
            url.path = remove_dot_segments(&reference.path, "");
            return Ok(url);
        }
        if !reference.opaque.is_empty() {
            url.userinfo = None;
            url.host.clear();
            url.path.clear();
            return Ok(url);
        }
        if reference.path.is_empty() && !reference.force_query && reference.raw_query.is_empty() {
            url.raw_query.clone_from(&self.raw_query);
            if reference.fragment.is_empty() {
                url.fragment.clone_from(&self.fragment);
            }
        }
        url.host.clone_from(&self.host);
        url.userinfo.clone_from(&self.userinfo);
        url.path = remove_dot_segments(&self.path, &reference.path);
        Ok(url)
    }

    /// Whether the URL has a scheme (Go's `IsAbs`).
    pub fn is_absolute(&self) -> bool {
        !self.scheme.is_empty()
    }

    /// The host without port or IPv6 brackets (Go's `Hostname`).
    pub fn hostname(&self) -> &str {
        split_host_port(&self.host).0
    }

    /// The port, empty when absent (Go's `Port`).
    pub fn port(&self) -> &str {
        split_host_port(&self.host).1
    }

    /// The request target sent on the request line (Go's `RequestURI`).
    pub fn request_uri(&self) -> String {
        let mut target = if !self.opaque.is_empty() {
            if self.opaque.starts_with("//") {
                format!("{}:{}", self.scheme, self.opaque)
            } else {
                self.opaque.clone()
            }
        } else if self.path.is_empty() {
            "/".to_string()
        } else {
            self.path.clone()
        };
        if self.force_query || !self.raw_query.is_empty() {
            target.push('?');
            target.push_str(&self.raw_query);
        }
        target
    }
}

/// Go's `URL.String`.
impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.scheme.is_empty() {
            write!(f, "{}:", self.scheme)?;
        }
        if !self.opaque.is_empty() {
            f.write_str(&self.opaque)?;
        } else {
            if !self.scheme.is_empty() || !self.host.is_empty() || self.userinfo.is_some() {
                if !self.host.is_empty() || !self.path.is_empty() || self.userinfo.is_some() {
                    f.write_str("//")?;
                }
                if let Some(userinfo) = &self.userinfo {
                    write!(f, "{userinfo}@")?;
                }
                f.write_str(&escape(self.host.as_bytes(), Component::Host))?;
            }
            if !self.path.is_empty() && !self.path.starts_with('/') && !self.host.is_empty() {
                f.write_str("/")?;
            }
            f.write_str(&self.path)?;
        }
        if self.force_query || !self.raw_query.is_empty() {
            write!(f, "?{}", self.raw_query)?;
        }
        if !self.fragment.is_empty() {
            write!(f, "#{}", self.fragment)?;
        }
        Ok(())
    }
}

/// Go's `parse(rawURL, viaRequest=false)`: everything but the fragment.
fn parse_without_fragment(raw: &str) -> Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = raw.to_string();
        return Ok(url);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((before, query)) = rest.split_once('?') {
        url.raw_query = query.to_string();
        rest = before;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        let first_segment = rest.split('/').next().unwrap_or_default();
        if first_segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if rest.starts_with("//") && (!url.scheme.is_empty() || !rest.starts_with("///")) {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => authority_and_path.split_at(i),
            None => (authority_and_path, ""),
        };
        (url.userinfo, url.host) = parse_authority(authority)?;
        rest = path;
    }
    url.path = normalize_escapes(rest, Component::Path)?;
    Ok(url)
}

/// Go's `getScheme`: a leading `scheme:`, if the text has one.
fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, b) in raw.bytes().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `parseAuthority`: `[userinfo@]host[:port]`.
fn parse_authority(authority: &str) -> Result<(Option<String>, String), String> {
    let (userinfo, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let host = parse_host(host)?;
    if let Some(userinfo) = userinfo {
        let valid = userinfo
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b));
        if !valid {
            return Err("net/url: invalid userinfo".into());
        }
        check_escapes(userinfo, None)?;
    }
    Ok((userinfo.map(str::to_string), host))
}

/// Go's `parseHost`: checks the port and unescapes the host.
fn parse_host(host: &str) -> Result<String, String> {
    let port_start = if host.starts_with('[') {
        Some(host.rfind(']').ok_or("missing ']' in host")? + 1)
    } else {
        host.rfind(':')
    };
    if let Some(start) = port_start {
        let colon_port = &host[start..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    check_escapes(host, Some(Component::Host))?;
    Ok(String::from_utf8_lossy(&unescape(host)).into_owned())
}

/// Empty, or `:` followed by digits only.
fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Go's `splitHostPort` (used by `Hostname` and `Port`).
fn split_host_port(host_port: &str) -> (&str, &str) {
    let (mut host, mut port) = (host_port, "");
    if let Some(colon) = host_port.rfind(':')
        && valid_optional_port(&host_port[colon..])
    {
        (host, port) = (&host_port[..colon], &host_port[colon + 1..]);
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        host = inner;
    }
    (host, port)
}

/// The escaped form Go prints for a path or fragment given as `raw`: `raw`
/// itself when its escaping is valid, otherwise the default escaping of what
/// it decodes to (Go's `setPath` followed by `EscapedPath`).
fn normalize_escapes(raw: &str, component: Component) -> Result<String, String> {
    check_escapes(raw, Some(component))?;
    if valid_encoded(raw, component) {
        Ok(raw.to_string())
    } else {
        Ok(escape(&unescape(raw), component))
    }
}

/// Go's `unescape` checks: every `%` starts a two-digit hex escape; a host
/// may only escape non-ASCII bytes (or `%25`) and may not contain bytes that
/// need escaping.
fn check_escapes(s: &str, component: Option<Component>) -> Result<(), String> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            // Bytes, not a str slice: the escape may end inside a
            // multi-byte character (`%aé`), which Go quotes byte-wise.
            let escape_text = &bytes[i..(i + 3).min(bytes.len())];
            let well_formed = i + 2 < bytes.len()
                && bytes[i + 1].is_ascii_hexdigit()
                && bytes[i + 2].is_ascii_hexdigit();
            if !well_formed {
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote_bytes(escape_text)
                ));
            }
            let ascii_escape = hex_value(bytes[i + 1]) < 8 && escape_text != b"%25";
            if component == Some(Component::Host) && ascii_escape {
                return Err(format!(
                    "invalid URL escape {}",
                    go_quote_bytes(escape_text)
                ));
            }
            i += 3;
            continue;
        }
        if component == Some(Component::Host) && b < 0x80 && should_escape(b, Component::Host) {
            let c = char::from(b).to_string();
            return Err(format!("invalid character {} in host name", go_quote(&c)));
        }
        i += 1;
    }
    Ok(())
}

/// Decodes `%XX` escapes; `s` has passed [`check_escapes`].
fn unescape(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            out.push(hex_value(bytes[i + 1]) << 4 | hex_value(bytes[i + 2]));
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// Go's `escape`: `%XX` (upper-case hex) for every byte that needs it.
fn escape(bytes: &[u8], component: Component) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if should_escape(b, component) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Go's `validEncoded`: `s` may be printed as it is.
fn valid_encoded(s: &str, component: Component) -> bool {
    s.bytes()
        .all(|b| b"!$&'()*+,;=:@[]%".contains(&b) || !should_escape(b, component))
}

/// Go's `shouldEscape` for the three components the probe uses.
fn should_escape(b: u8, component: Component) -> bool {
    if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
        return false;
    }
    match component {
        Component::Host => !b"!$&'()*+,;=:[]<>\"".contains(&b),
        Component::Path => !b"$&+,/:;=@".contains(&b),
        Component::Fragment => !b"$&+,/:;=?@!()*".contains(&b),
    }
}

/// Go's `resolvePath`: merges `reference` into `base` and removes dot
/// segments; the result always starts with a single `/` unless empty.
fn remove_dot_segments(base: &str, reference: &str) -> String {
    let full = if reference.is_empty() {
        base.to_string()
    } else if reference.starts_with('/') {
        reference.to_string()
    } else {
        let directory_end = base.rfind('/').map_or(0, |i| i + 1);
        format!("{}{reference}", &base[..directory_end])
    };
    if full.is_empty() {
        return full;
    }
    let mut kept: Vec<&str> = Vec::new();
    let mut last = "";
    for segment in full.split('/') {
        last = segment;
        match segment {
            "." => {}
            ".." => {
                kept.pop();
            }
            _ => kept.push(segment),
        }
    }
    let mut resolved = format!("/{}", kept.join("/"));
    if last == "." || last == ".." {
        resolved.push('/');
    }
    match resolved.strip_prefix('/') {
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => resolved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(raw: &str) -> String {
        Url::parse(raw).unwrap().to_string()
    }

    #[test]
    fn parse_and_print_round_trip_like_go() {
        for raw in [
            "http://127.0.0.1:8080/healthz",
            "http://[::1]:80/a?b=c#frag",
            "https://host:443/a%2Fb",
            "/path?x",
            "?foo",
            "http://h:1/?",
        ] {
            assert_eq!(round_trip(raw), raw);
        }
    }

    #[test]
    fn paths_are_escaped_only_when_needed() {
        assert_eq!(round_trip("/a b"), "/a%20b");
        assert_eq!(round_trip("/caf\u{e9}"), "/caf%C3%A9");
        assert_eq!(round_trip("/a(b)*!"), "/a(b)*!");
        assert_eq!(Url::from_literal_path("%zz").to_string(), "%25zz");
    }

    #[test]
    fn parse_errors_match_go() {
        let reason = |raw: &str| Url::parse(raw).unwrap_err().reason;
        assert_eq!(reason("%zz"), "invalid URL escape \"%zz\"");
        // An escape cut inside a multi-byte character: Go quotes its bytes.
        assert_eq!(reason("/%a\u{e9}"), "invalid URL escape \"%a\\xc3\"");
        assert_eq!(reason("/%\u{e9}"), "invalid URL escape \"%\u{e9}\"");
        // What the property test below shrank the panic to.
        assert_eq!(reason("%%\u{e9}"), "invalid URL escape \"%%\\xc3\"");
        assert_eq!(Url::parse("a:b/c").unwrap().opaque, "b/c");
        assert_eq!(
            reason("1:b"),
            "first path segment in URL cannot contain colon"
        );
        assert_eq!(reason(":x"), "missing protocol scheme");
        assert_eq!(reason("http://h:x/"), "invalid port \":x\" after host");
        assert_eq!(reason("http://[::1/"), "missing ']' in host");
        assert_eq!(
            reason("http://a b/"),
            "invalid character \" \" in host name"
        );
        assert_eq!(reason("/a\nb"), "net/url: invalid control character in URL");
        assert_eq!(
            Url::parse("http://a b/").unwrap_err().to_string(),
            "parse \"http://a b/\": invalid character \" \" in host name"
        );
    }

    #[test]
    fn hostname_and_port_strip_brackets() {
        let url = Url::parse("http://[fd00::1]:8080/").unwrap();
        assert_eq!((url.hostname(), url.port()), ("fd00::1", "8080"));
        let url = Url::parse("http://example.com/").unwrap();
        assert_eq!((url.hostname(), url.port()), ("example.com", ""));
    }

    #[test]
    fn resolve_follows_go_reference_resolution() {
        let base = Url::parse("http://h:80/a/b/c?q=1#f").unwrap();
        let resolve = |reference: &str| base.resolve(reference).unwrap().to_string();
        assert_eq!(resolve("d"), "http://h:80/a/b/d");
        assert_eq!(resolve("../d"), "http://h:80/a/d");
        assert_eq!(resolve("/x/./y/../z"), "http://h:80/x/z");
        assert_eq!(resolve("?n"), "http://h:80/a/b/c?n");
        assert_eq!(resolve(""), "http://h:80/a/b/c?q=1#f");
        assert_eq!(resolve("//other:9/p"), "http://other:9/p");
        assert_eq!(resolve("https://other/"), "https://other/");
        assert_eq!(resolve(".."), "http://h:80/a/");
        assert_eq!(resolve("/../../x"), "http://h:80/x");
    }

    #[test]
    fn request_uri_defaults_to_slash() {
        assert_eq!(Url::parse("http://h:1").unwrap().request_uri(), "/");
        assert_eq!(Url::parse("http://h:1?x").unwrap().request_uri(), "/?x");
        assert_eq!(Url::parse("http://h:1/p?").unwrap().request_uri(), "/p?");
    }

    /// Text built from the characters URL parsing treats specially,
    /// multi-byte characters and controls among them.
    fn url_text() -> impl Strategy<Value = String> {
        const PIECES: [&str; 23] = [
            "%",
            "a",
            "F",
            "0",
            "7",
            "\u{e9}",
            "\u{1f600}",
            "/",
            ":",
            "?",
            "#",
            "[",
            "]",
            "@",
            " ",
            ".",
            "..",
            "\u{0}",
            "\n",
            "http:",
            "//",
            "%25",
            "%c3",
        ];
        prop::collection::vec(prop::sample::select(&PIECES[..]), 0..24).prop_map(|v| v.concat())
    }

    proptest! {
        /// A pod's `httpGet` and any server's `Location` reach this code:
        /// it must return, never panic.
        #[test]
        fn parse_and_resolve_never_panic(raw in url_text(), reference in url_text()) {
            if let Ok(url) = Url::parse(&raw) {
                let _ = url.to_string();
                let _ = url.request_uri();
                let _ = url.resolve(&reference);
            }
            let _ = Url::from_literal_path(&raw).resolve(&reference);
        }
    }
}
