//! The probe request as the kubelet builds it (`pkg/probe/http/request.go`)
//! and as Go's client sends it, hop by hop: the URL (H1, H2, H4), the header
//! set with its defaults (H5-H7), the `Host` override and what survives a
//! redirect (H8), and the header lines in the order Go writes them. Pure:
//! nothing here touches the network.

use std::borrow::Cow;
use std::collections::BTreeMap;

use bytes::Bytes;

use super::url::{ParseError, Url};
use podprobe_core::spec::join_host_port;
use podprobe_core::spec::probe_spec::extension::{Method, is_token_byte};
use podprobe_core::spec::probe_spec::{HttpGetAction, HttpProtocol, Scheme};
use podprobe_core::util::gofmt::go_quote;

/// Request headers keyed by canonical name, values in the order given.
/// Sorted keys are also the order Go writes header lines in.
pub type Header = BTreeMap<String, Vec<String>>;

/// One header line as it goes on the wire: the name and the value, borrowed
/// from the [`Hop`] they came from wherever they can be, so that a probe run
/// does not copy its request's headers again to send them.
pub type HeaderLine<'a> = (&'a str, Cow<'a, str>);

/// One request of a probe: the first one, or one that follows a redirect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    pub url: Url,
    /// Go's `Request.Host`: overrides the URL's `host:port` on the `Host`
    /// line when non-empty.
    pub host: String,
    pub header: Header,
    /// `GET`, as the kubelet, or the probe's `podprobe.method`; a redirect
    /// keeps it or turns it into a `GET` as Go's client does
    /// ([`Hop::redirected`]).
    pub method: Method,
    /// The body of a `POST` or `PUT` (`podprobe.body`, possibly empty);
    /// `None`: the request has none.
    pub body: Option<Bytes>,
    /// HTTP/1.1, or h2c on a cleartext connection (H23).
    pub protocol: HttpProtocol,
}

/// Headers Go's HTTP/1 writer takes from elsewhere or leaves out of a GET.
const NOT_WRITTEN: [&str; 5] = [
    "Host",
    "User-Agent",
    "Content-Length",
    "Transfer-Encoding",
    "Trailer",
];

impl Hop {
    /// The first request for `action`, targeting `pod_ip` unless the action
    /// names a host. Fails where Go's `http.NewRequest` fails (H18).
    pub fn first(
        action: &HttpGetAction,
        pod_ip: &str,
        user_agent: &str,
    ) -> Result<Hop, ParseError> {
        let host = action
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or(pod_ip);
        let url = probe_url(action.scheme, host, action.port, &action.path)?;
        let mut header = Header::new();
        for (name, value) in &action.headers {
            header
                .entry(canonical_header_key(name))
                .or_default()
                .push(value.clone());
        }
        apply_default_headers(&mut header, user_agent);
        let host = first_value(&header, "Host").to_string();
        let method = action.extensions.method;
        let body = method
            .sends_body()
            .then(|| Bytes::from(action.extensions.body.clone()));
        Ok(Hop {
            url,
            host,
            header,
            method,
            body,
            protocol: action.protocol,
        })
    }

    /// The request that follows `self`'s redirect (`status`) to `location`,
    /// which resolved to `url`: the first request's headers plus a
    /// `Referer`, and the first request's `Host` override only for a
    /// relative `location`. A 307 or 308 keeps the method and the body; any
    /// other redirect turns a `POST` or `PUT` into a bodiless `GET` (Go's
    /// `redirectBehavior`).
    pub fn redirected(&self, first: &Hop, status: u16, location: &str, url: Url) -> Hop {
        let custom_host = !first.host.is_empty() && first.host != first.url.host;
        let relative = Url::parse(location).is_ok_and(|l| !l.is_absolute());
        let host = if custom_host && relative {
            first.host.clone()
        } else {
            String::new()
        };
        let mut header = first.header.clone();
        if let Some(referer) = referer(&self.url, &url, first_value(&header, "Referer")) {
            header.insert("Referer".into(), vec![referer]);
        }
        let (method, body) = match (status, self.method) {
            (307 | 308, method) => (method, self.body.clone()),
            (_, Method::Post | Method::Put) => (Method::Get, None),
            (_, method) => (method, None),
        };
        Hop {
            url,
            host,
            header,
            method,
            body,
            protocol: self.protocol,
        }
    }

    /// The HTTP/1.1 header lines Go writes for this request, in its order:
    /// `Host`, `User-Agent`, `Content-Length` (a `POST` or `PUT`, even of
    /// an empty body), the rest sorted by name, `Connection: close`.
    /// Fails with Go's transport error for an invalid header name or value.
    pub fn header_lines(&self) -> Result<Vec<HeaderLine<'_>>, String> {
        self.check_header()?;
        let mut lines = Vec::with_capacity(self.header.len() + 3);
        lines.push(("Host", Cow::Borrowed(self.host_line())));
        let user_agent = first_value(&self.header, "User-Agent");
        if !user_agent.is_empty() {
            lines.push(("User-Agent", Cow::Borrowed(trim_value(user_agent))));
        }
        if let Some(body) = &self.body {
            lines.push(("Content-Length", Cow::Owned(body.len().to_string())));
        }
        for (name, values) in &self.header {
            if NOT_WRITTEN.contains(&name.as_str()) {
                continue;
            }
            lines.extend(
                values
                    .iter()
                    .map(|v| (name.as_str(), Cow::Borrowed(trim_value(v)))),
            );
        }
        if !self.asks_to_close() {
            lines.push(("Connection", Cow::Borrowed("close")));
        }
        Ok(lines)
    }

    /// The `Host` line value: the override or the URL's `host:port`, sent
    /// empty when it is not a valid host (Go's `ValidHostHeader`).
    fn host_line(&self) -> &str {
        let host = if self.host.is_empty() {
            &self.url.host
        } else {
            &self.host
        };
        if host.bytes().all(is_host_byte) {
            host
        } else {
            ""
        }
    }

    /// Go's transport rejects a request whose header names are not HTTP
    /// tokens or whose values hold control characters, before dialing.
    fn check_header(&self) -> Result<(), String> {
        for (name, values) in &self.header {
            if name.is_empty() || !name.bytes().all(is_token_byte) {
                return Err(format!(
                    "net/http: invalid header field name {}",
                    go_quote(name)
                ));
            }
            let valid_value =
                |v: &String| v.bytes().all(|b| b == b'\t' || (b >= 0x20 && b != 0x7f));
            if !values.iter().all(valid_value) {
                return Err(format!(
                    "net/http: invalid header field value for {}",
                    go_quote(name)
                ));
            }
        }
        Ok(())
    }

    /// The user's own `Connection` header already carries `close`.
    fn asks_to_close(&self) -> bool {
        self.header.get("Connection").is_some_and(|values| {
            values
                .iter()
                .flat_map(|v| v.split(','))
                .any(|token| token.trim().eq_ignore_ascii_case("close"))
        })
    }
}

/// H1, H2, H4: Go's `formatURL` (path read as a URL reference, taken
/// literally if that fails; scheme and `host:port` set over it), printed and
/// parsed again as `http.NewRequest` does.
pub fn probe_url(scheme: Scheme, host: &str, port: u16, path: &str) -> Result<Url, ParseError> {
    let mut url = Url::parse(path).unwrap_or_else(|_| Url::from_literal_path(path));
    url.scheme = match scheme {
        Scheme::Http => "http",
        Scheme::Https => "https",
    }
    .to_string();
    url.host = join_host_port(host, port);
    Url::parse(&url.to_string())
}

/// H5: Go's `CanonicalMIMEHeaderKey`: `FOO-bAR` -> `Foo-Bar`; a name with a
/// byte that is not an HTTP token character is left as it is.
pub fn canonical_header_key(name: &str) -> String {
    if !name.bytes().all(is_token_byte) {
        return name.to_string();
    }
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// H6, H7: `User-Agent` defaults to the kube-probe agent; `Accept` defaults
/// to `*/*` and an empty user value removes it.
fn apply_default_headers(header: &mut Header, user_agent: &str) {
    header
        .entry("User-Agent".into())
        .or_insert_with(|| vec![user_agent.to_string()]);
    match header.get("Accept") {
        None => {
            header.insert("Accept".into(), vec!["*/*".into()]);
        }
        Some(values) if values.first().is_none_or(String::is_empty) => {
            header.remove("Accept");
        }
        Some(_) => {}
    }
}

/// Go's `Header.Get`: the first value, or empty.
fn first_value<'a>(header: &'a Header, name: &str) -> &'a str {
    header
        .get(name)
        .and_then(|values| values.first())
        .map_or("", String::as_str)
}

/// Go's `refererForURL`: none from https to http; an explicit one wins;
/// otherwise the previous URL without its userinfo.
fn referer(previous: &Url, next: &Url, explicit: &str) -> Option<String> {
    if previous.scheme == "https" && next.scheme == "http" {
        return None;
    }
    if !explicit.is_empty() {
        return Some(explicit.to_string());
    }
    let mut previous = previous.clone();
    previous.userinfo = None;
    Some(previous.to_string())
}

/// Go trims spaces and tabs around header values it writes.
fn trim_value(value: &str) -> &str {
    value.trim_matches([' ', '\t'])
}

/// Go's `httpguts` valid host bytes.
fn is_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!$%&'()*+,-.:;=[]_~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(path: &str, headers: &[(&str, &str)]) -> HttpGetAction {
        HttpGetAction {
            scheme: Scheme::Http,
            host: None,
            port: 8080,
            path: path.to_string(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            protocol: Default::default(),
            extensions: Default::default(),
        }
    }

    fn url(scheme: Scheme, host: &str, port: u16, path: &str) -> String {
        probe_url(scheme, host, port, path).unwrap().to_string()
    }

    #[test]
    fn h4_url_building_matches_upstream_format_url_cases() {
        use Scheme::{Http, Https};
        assert_eq!(url(Http, "localhost", 93, ""), "http://localhost:93");
        assert_eq!(
            url(Https, "localhost", 93, "/path?bar"),
            "https://localhost:93/path?bar"
        );
        assert_eq!(
            url(Http, "localhost", 93, "?foo"),
            "http://localhost:93?foo"
        );
        assert_eq!(url(Http, "hostname", 76, "path"), "http://hostname:76/path");
        assert_eq!(
            url(Http, "fd00::1", 8080, "/healthz"),
            "http://[fd00::1]:8080/healthz"
        );
        assert_eq!(
            url(Http, "10.0.0.1", 80, "http://elsewhere:1/x"),
            "http://10.0.0.1:80/x"
        );
        assert_eq!(url(Http, "10.0.0.1", 80, "%zz"), "http://10.0.0.1:80/%25zz");
        assert_eq!(
            url(Http, "10.0.0.1", 80, "/a b#frag"),
            "http://10.0.0.1:80/a%20b#frag"
        );
    }

    #[test]
    fn h18_unparsable_url_is_a_request_error() {
        let err = probe_url(Scheme::Http, "bad host", 80, "/").unwrap_err();
        assert_eq!(
            err.to_string(),
            "parse \"http://bad%20host:80/\": invalid URL escape \"%20\""
        );
    }

    #[test]
    fn h2_host_defaults_to_pod_ip_and_action_host_wins() {
        let hop = Hop::first(&action("/", &[]), "10.1.2.3", "kube-probe/1.35").unwrap();
        assert_eq!(hop.url.to_string(), "http://10.1.2.3:8080/");
        let mut named = action("/", &[]);
        named.host = Some("example.test".into());
        let hop = Hop::first(&named, "10.1.2.3", "kube-probe/1.35").unwrap();
        assert_eq!(hop.url.host, "example.test:8080");
    }

    #[test]
    fn h5_header_names_are_canonicalised_and_values_accumulate() {
        assert_eq!(canonical_header_key("HOST"), "Host");
        assert_eq!(canonical_header_key("FOO-bAR"), "Foo-Bar");
        assert_eq!(canonical_header_key("accept"), "Accept");
        assert_eq!(canonical_header_key("x y"), "x y");
        let hop = Hop::first(
            &action(
                "/",
                &[
                    ("accept", "application/json"),
                    ("Accept", "*/*"),
                    ("X-b", "2"),
                    ("x-a", "1"),
                ],
            ),
            "10.0.0.1",
            "kube-probe/1.35",
        )
        .unwrap();
        assert_eq!(hop.header["Accept"], ["application/json", "*/*"]);
        let lines = hop.header_lines().unwrap();
        let expected = [
            ("Host", "10.0.0.1:8080"),
            ("User-Agent", "kube-probe/1.35"),
            ("Accept", "application/json"),
            ("Accept", "*/*"),
            ("X-A", "1"),
            ("X-B", "2"),
            ("Connection", "close"),
        ];
        let expected: Vec<_> = expected.iter().map(|&(n, v)| (n, Cow::from(v))).collect();
        assert_eq!(lines, expected);
    }

    #[test]
    fn h6_h7_defaults_and_overrides() {
        let names = |headers: &[(&str, &str)]| {
            let hop = Hop::first(&action("/", headers), "10.0.0.1", "kube-probe/1.35").unwrap();
            let lines = hop.header_lines().unwrap();
            lines
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.into_owned()))
                .collect::<Vec<_>>()
        };
        let line = |n: &str, v: &str| (n.to_string(), v.to_string());
        let default = names(&[]);
        assert!(default.contains(&line("User-Agent", "kube-probe/1.35")));
        assert!(default.contains(&line("Accept", "*/*")));
        let custom = names(&[("user-agent", "mine"), ("Accept", "text/plain")]);
        assert!(custom.contains(&line("User-Agent", "mine")));
        assert!(custom.contains(&line("Accept", "text/plain")));
        let removed = names(&[("User-Agent", ""), ("Accept", "")]);
        assert!(
            removed
                .iter()
                .all(|(n, _)| n != "User-Agent" && n != "Accept"),
            "{removed:?}"
        );
    }

    #[test]
    fn h8_host_header_overrides_host_line_and_survives_relative_redirects_only() {
        let first =
            Hop::first(&action("/a", &[("host", "svc.example")]), "10.0.0.1", "ua").unwrap();
        assert_eq!(
            first.header_lines().unwrap()[0],
            ("Host", Cow::from("svc.example"))
        );
        let next = first.url.resolve("/b").unwrap();
        let relative = first.redirected(&first, 302, "/b", next.clone());
        assert_eq!(relative.host, "svc.example");
        assert_eq!(relative.header["Referer"], ["http://10.0.0.1:8080/a"]);
        let absolute = first.redirected(&first, 302, "http://10.0.0.1:8080/b", next);
        assert_eq!(
            absolute.header_lines().unwrap()[0],
            ("Host", Cow::from("10.0.0.1:8080"))
        );
    }

    #[test]
    fn h9_connection_close_unless_the_user_asked_for_it() {
        let hop = Hop::first(&action("/", &[("Connection", "Close")]), "10.0.0.1", "ua").unwrap();
        let lines = hop.header_lines().unwrap();
        let connection: Vec<_> = lines.iter().filter(|(n, _)| *n == "Connection").collect();
        assert_eq!(connection, [&("Connection", Cow::from("Close"))]);
    }

    #[test]
    fn invalid_header_names_and_values_fail_like_go() {
        let hop = Hop::first(&action("/", &[("x y", "1")]), "10.0.0.1", "ua").unwrap();
        assert_eq!(
            hop.header_lines().unwrap_err(),
            "net/http: invalid header field name \"x y\""
        );
        let hop = Hop::first(&action("/", &[("X", "a\rb")]), "10.0.0.1", "ua").unwrap();
        assert_eq!(
            hop.header_lines().unwrap_err(),
            "net/http: invalid header field value for \"X\""
        );
    }
}
