//! The kubelet's `ResolveContainerPort` (`pkg/probe/util.go`): turns an
//! `httpGet.port` / `tcpSocket.port` into a number using the container's
//! declared ports (spec H19-H22).

use std::fmt;
use std::num::IntErrorKind;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::util::gofmt::go_quote;

/// Why a probe port could not be resolved; `Display` gives the kubelet's
/// error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// A string port that names no container port and does not parse as a
    /// decimal integer either. The kubelet reports Go's `strconv.Atoi` error,
    /// not "port not found" (H19).
    #[error("strconv.Atoi: parsing {}: {reason}", go_quote(.port))]
    NotANumber { port: String, reason: AtoiFailure },
    /// The resolved number is outside 1-65535 (H20).
    #[error("invalid port number: {0}")]
    OutOfRange(i64),
}

/// The two ways Go's `strconv.Atoi` fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtoiFailure {
    InvalidSyntax,
    ValueOutOfRange,
}

impl fmt::Display for AtoiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AtoiFailure::InvalidSyntax => "invalid syntax",
            AtoiFailure::ValueOutOfRange => "value out of range",
        })
    }
}

/// Resolves a probe port against `container` as the kubelet does:
/// - an integer is used as is;
/// - a string is looked up among the container's ports by `name`, the first
///   match in declaration order winning; `""` matches the first port without
///   a name (H22);
/// - a string that names no port is parsed as a decimal integer ("8080"), and
///   if that fails the parse error is the result (H19);
/// - the number must then satisfy `0 < port < 65536` (H20).
///
/// The kubelet's third case, an `IntOrString` of neither kind ("intOrString
/// had no kind", H21), cannot be represented by [`IntOrString`].
pub fn resolve_container_port(port: &IntOrString, container: &Container) -> Result<u16, PortError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(name) => match find_port_by_name(container, name) {
            Some(n) => i64::from(n),
            None => go_atoi(name).map_err(|reason| PortError::NotANumber {
                port: name.clone(),
                reason,
            })?,
        },
    };
    match u16::try_from(number) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(PortError::OutOfRange(number)),
    }
}

/// `containerPort` of the first port called `name` (an unnamed port is
/// called "").
fn find_port_by_name(container: &Container, name: &str) -> Option<i32> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref().unwrap_or("") == name)
        .map(|p| p.container_port)
}

/// Go's `strconv.Atoi` on a 64-bit platform: optional sign, decimal digits,
/// nothing else.
fn go_atoi(s: &str) -> Result<i64, AtoiFailure> {
    s.parse::<i64>().map_err(|e| match e.kind() {
        IntErrorKind::PosOverflow | IntErrorKind::NegOverflow => AtoiFailure::ValueOutOfRange,
        _ => AtoiFailure::InvalidSyntax,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn port(name: Option<&str>, number: i32) -> ContainerPort {
        ContainerPort {
            name: name.map(str::to_string),
            container_port: number,
            ..ContainerPort::default()
        }
    }

    fn container(ports: Vec<ContainerPort>) -> Container {
        Container {
            name: "app".into(),
            ports: Some(ports),
            ..Container::default()
        }
    }

    fn foo_bar() -> Container {
        container(vec![port(Some("foo"), 8080), port(Some("bar"), 9000)])
    }

    fn by_name(name: &str, c: &Container) -> Result<u16, String> {
        resolve_container_port(&IntOrString::String(name.into()), c).map_err(|e| e.to_string())
    }

    fn by_number(n: i32) -> Result<u16, String> {
        resolve_container_port(&IntOrString::Int(n), &Container::default())
            .map_err(|e| e.to_string())
    }

    // The cases of upstream TestResolveContainerPort / TestFindPortByName.
    #[test]
    fn h19_upstream_resolve_container_port_cases() {
        assert_eq!(by_number(443), Ok(443));
        assert_eq!(by_number(66666), Err("invalid port number: 66666".into()));
        assert_eq!(by_name("foo", &foo_bar()), Ok(8080));
        assert_eq!(by_name("bar", &foo_bar()), Ok(9000));
        assert_eq!(
            by_name("foo", &container(vec![port(Some("bar"), 9000)])),
            Err(r#"strconv.Atoi: parsing "foo": invalid syntax"#.into())
        );
        assert_eq!(
            by_name("http", &foo_bar()),
            Err(r#"strconv.Atoi: parsing "http": invalid syntax"#.into())
        );
    }

    #[test]
    fn h19_named_port_first_match() {
        let c = container(vec![
            port(Some("web"), 8080),
            port(Some("web"), 9090),
            port(None, 7070),
        ]);
        assert_eq!(by_name("web", &c), Ok(8080));
    }

    #[test]
    fn h19_unknown_name_falls_back_to_decimal() {
        assert_eq!(by_name("8080", &foo_bar()), Ok(8080));
        assert_eq!(by_name("+80", &foo_bar()), Ok(80));
        assert_eq!(by_name("0080", &foo_bar()), Ok(80));
    }

    #[test]
    fn h19_name_wins_over_number() {
        let c = container(vec![port(Some("8080"), 9090)]);
        assert_eq!(by_name("8080", &c), Ok(9090));
    }

    #[test]
    fn h19_unparsable_name_reports_atoi_error() {
        assert_eq!(
            by_name("abc", &foo_bar()),
            Err(r#"strconv.Atoi: parsing "abc": invalid syntax"#.into())
        );
        assert_eq!(
            by_name(" 80", &foo_bar()),
            Err(r#"strconv.Atoi: parsing " 80": invalid syntax"#.into())
        );
        assert_eq!(
            by_name("99999999999999999999", &foo_bar()),
            Err(r#"strconv.Atoi: parsing "99999999999999999999": value out of range"#.into())
        );
    }

    #[test]
    fn h20_port_out_of_range() {
        assert_eq!(by_number(0), Err("invalid port number: 0".into()));
        assert_eq!(by_number(-1), Err("invalid port number: -1".into()));
        assert_eq!(by_number(65536), Err("invalid port number: 65536".into()));
        assert_eq!(by_number(65535), Ok(65535));
        assert_eq!(by_number(1), Ok(1));
        assert_eq!(
            by_name("-1", &foo_bar()),
            Err("invalid port number: -1".into())
        );
        assert_eq!(
            by_name("66666", &foo_bar()),
            Err("invalid port number: 66666".into())
        );
        let zero = container(vec![port(Some("web"), 0)]);
        assert_eq!(by_name("web", &zero), Err("invalid port number: 0".into()));
    }

    #[test]
    fn h22_empty_name_matches_first_unnamed_port() {
        let c = container(vec![
            port(Some("web"), 8080),
            port(None, 7070),
            port(Some(""), 6060),
        ]);
        assert_eq!(by_name("", &c), Ok(7070));
        assert_eq!(
            by_name("", &foo_bar()),
            Err(r#"strconv.Atoi: parsing "": invalid syntax"#.into())
        );
    }
}
