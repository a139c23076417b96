//! Where probes may connect: podprobe's guard against a pod author aiming
//! its probes at the node or at the cloud's metadata service.
//!
//! podprobe probes from the node's network namespace, so a probe of
//! `127.0.0.1` reaches the node's own services and a probe of
//! `169.254.169.254` the metadata service, with the headers the probe sets.
//! Two rules, both set by the operator:
//!
//! - **Named hosts** ([`Destinations::allows_host`]): in gate mode a probe's
//!   `host` field comes from an annotation any pod author writes, so it is
//!   refused unless it matches `--allow-probe-hosts` (a host name, exactly,
//!   or an IP literal inside one of its CIDRs). Without `host` a probe goes
//!   to the pod's own IP, as the kubelet's does.
//! - **Denied addresses** ([`Destinations::check`]): every address a probe
//!   is about to connect to, after DNS and for every redirect, is refused
//!   when it lies in `--deny-probe-destinations` and not in an allowed CIDR.
//!   Gate mode denies loopback, link-local and "this host" addresses by
//!   default; authority mode denies nothing by default, as the kubelet does
//!   (its probes come from pod specs the API server admitted, where Pod
//!   Security applies).
//!
//! A probe with `podprobe.network: pod` connects from inside the pod's
//! network namespace ([`Destinations::in_pod_network`]). There loopback and
//! unspecified addresses mean the pod itself, not the node, so the denied
//! networks do not refuse them; every other address is checked as from the
//! node. The pod could open any such connection itself: the probe reaches
//! nothing the pod cannot.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use super::pod_network::PodNetwork;

/// An IP network in CIDR notation (`10.0.0.0/8`, `fe80::/10`); a bare
/// address is a network of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a CIDR did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {text:?}: {problem}")]
pub struct CidrError {
    text: String,
    problem: &'static str,
}

impl Cidr {
    /// Whether `ip` lies in this network. An IPv4-mapped IPv6 address
    /// (`::ffff:127.0.0.1`) counts as the IPv4 address it carries, since
    /// connecting to it reaches that address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_matches(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_matches(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

fn prefix_matches(network: &[u8], ip: &[u8], prefix: u8) -> bool {
    let (whole, rest) = (usize::from(prefix / 8), prefix % 8);
    if network[..whole] != ip[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        network[whole] & mask == ip[whole] & mask
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let error = |problem| CidrError {
            text: text.to_owned(),
            problem,
        };
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| error("not an IP address"))?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse().ok().filter(|&p| p <= max).ok_or_else(|| {
                    error("prefix length out of range (at most 32 for IPv4, 128 for IPv6)")
                })?
            }
            Some(_) => return Err(error("prefix length is not a number")),
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// One entry of `--allow-probe-hosts`: a network or a host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowedHost {
    Network(Cidr),
    /// Compared case-insensitively and without a trailing dot, as DNS does.
    Name(String),
}

impl FromStr for AllowedHost {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        if text.contains('/') || text.parse::<IpAddr>().is_ok() {
            return text.parse().map(AllowedHost::Network);
        }
        Ok(AllowedHost::Name(dns_name(text)))
    }
}

fn dns_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Loopback, link-local and "this host" networks: gate mode's default
/// `--deny-probe-destinations`. Connecting to `0.0.0.0` or `::` reaches
/// the local host on Linux, hence the unspecified networks.
pub const NODE_LOCAL: [&str; 6] = [
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/8",
    "::/128",
];

/// The probe destination policy, and the network namespace probes connect
/// from (the node's unless [`Destinations::in_pod_network`]); the default
/// allows everything. Cheap to clone: every probe's connector holds one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Destinations {
    allowed: Arc<[AllowedHost]>,
    denied: Arc<[Cidr]>,
    pod_network: Option<PodNetwork>,
}

/// A destination the policy refuses; `Display` is the probe's output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "destination {ip} is refused by podprobe: it is in {denied}, which --deny-probe-destinations \
     denies and --allow-probe-hosts does not allow"
)]
pub struct DestinationDenied {
    pub ip: IpAddr,
    pub denied: Cidr,
}

impl Destinations {
    pub fn new(allowed: Vec<AllowedHost>, denied: Vec<Cidr>) -> Self {
        Destinations {
            allowed: allowed.into(),
            denied: denied.into(),
            pod_network: None,
        }
    }

    /// The same policy for a probe that connects from inside `network`, a
    /// pod's network namespace, where the pod's own addresses (loopback,
    /// unspecified) are allowed.
    pub fn in_pod_network(&self, network: PodNetwork) -> Self {
        Destinations {
            pod_network: Some(network),
            ..self.clone()
        }
    }

    /// The pod network namespace probes connect from; `None`: the node's.
    pub fn pod_network(&self) -> Option<&PodNetwork> {
        self.pod_network.as_ref()
    }

    /// The networks of [`NODE_LOCAL`].
    pub fn node_local() -> Vec<Cidr> {
        NODE_LOCAL
            .iter()
            .map(|cidr| cidr.parse().expect("NODE_LOCAL holds valid CIDRs"))
            .collect()
    }

    /// Whether a probe's `host` field may name `host` (gate mode asks this
    /// of every annotated `host`).
    pub fn allows_host(&self, host: &str) -> bool {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.allowed_network(ip),
            Err(_) => {
                let name = dns_name(bare);
                self.allowed
                    .iter()
                    .any(|a| matches!(a, AllowedHost::Name(n) if *n == name))
            }
        }
    }

    /// `Ok` if a probe may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), DestinationDenied> {
        let canonical = ip.to_canonical();
        if self.pod_network.is_some() && (canonical.is_loopback() || canonical.is_unspecified()) {
            return Ok(());
        }
        match self.denied.iter().find(|cidr| cidr.contains(ip)) {
            Some(&denied) if !self.allowed_network(ip) => Err(DestinationDenied { ip, denied }),
            _ => Ok(()),
        }
    }

    fn allowed_network(&self, ip: IpAddr) -> bool {
        self.allowed
            .iter()
            .any(|a| matches!(a, AllowedHost::Network(cidr) if cidr.contains(ip)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn allowed(entries: &[&str]) -> Vec<AllowedHost> {
        entries.iter().map(|e| e.parse().unwrap()).collect()
    }

    #[test]
    fn cidrs_parse_and_match_on_their_prefix() {
        let net: Cidr = "10.1.0.0/17".parse().unwrap();
        assert!(net.contains(ip("10.1.127.255")));
        assert!(!net.contains(ip("10.1.128.0")));
        assert!(!net.contains(ip("::ffff:10.2.0.0")));
        assert!(net.contains(ip("::ffff:10.1.0.1")));
        let one: Cidr = "fd00::1".parse().unwrap();
        assert_eq!(one.to_string(), "fd00::1/128");
        assert!("0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("8.8.8.8")));
        assert!(!"0.0.0.0/0".parse::<Cidr>().unwrap().contains(ip("::1")));
        for bad in [
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/x",
            "host/8",
            "",
            "::/129",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gate_default_denies_node_local_addresses_however_written() {
        let policy = Destinations::new(Vec::new(), Destinations::node_local());
        for denied in [
            "127.0.0.1",
            "127.255.0.9",
            "::1",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
        ] {
            assert!(policy.check(ip(denied)).is_err(), "{denied}");
        }
        for allowed in ["10.244.0.7", "192.168.1.1", "fd00::7", "2001:db8::1"] {
            assert_eq!(policy.check(ip(allowed)), Ok(()), "{allowed}");
        }
        assert_eq!(
            policy.check(ip("169.254.169.254")).unwrap_err().to_string(),
            "destination 169.254.169.254 is refused by podprobe: it is in 169.254.0.0/16, which \
             --deny-probe-destinations denies and --allow-probe-hosts does not allow"
        );
    }

    #[test]
    fn an_allowed_network_punches_through_the_denied_ones() {
        let policy = Destinations::new(allowed(&["169.254.20.10"]), Destinations::node_local());
        assert_eq!(policy.check(ip("169.254.20.10")), Ok(()));
        assert!(policy.check(ip("169.254.169.254")).is_err());
    }

    #[test]
    fn hosts_are_allowed_by_exact_name_or_network() {
        let policy = Destinations::new(allowed(&["Metrics.Internal.", "10.0.0.0/8"]), Vec::new());
        assert!(policy.allows_host("metrics.internal"));
        assert!(policy.allows_host("METRICS.internal."));
        assert!(!policy.allows_host("evil.metrics.internal"));
        assert!(policy.allows_host("10.9.9.9"));
        assert!(!policy.allows_host("11.0.0.1"));
        assert!(!policy.allows_host("10.9.9.9.nip.io"));
        assert!(!Destinations::default().allows_host("10.9.9.9"));
        assert!(Destinations::new(allowed(&["::1"]), Vec::new()).allows_host("[::1]"));
    }

    #[test]
    fn in_a_pod_network_the_pods_own_addresses_are_allowed_and_no_others() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let node = Destinations::new(Vec::new(), Destinations::node_local());
        let pod = node.in_pod_network(PodNetwork::unchecked(file));
        for own in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "::",
        ] {
            assert_eq!(pod.check(ip(own)), Ok(()), "{own}");
            assert!(node.check(ip(own)).is_err(), "{own}");
        }
        for denied in ["169.254.169.254", "fe80::1", "0.1.2.3"] {
            assert!(pod.check(ip(denied)).is_err(), "{denied}");
        }
        assert_eq!(pod.check(ip("10.244.0.7")), Ok(()));
    }

    #[test]
    fn the_default_policy_allows_every_destination() {
        assert_eq!(Destinations::default().check(ip("127.0.0.1")), Ok(()));
    }
}
