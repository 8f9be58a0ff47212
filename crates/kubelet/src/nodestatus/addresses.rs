//! nodestatus::addresses — which IPs the Node reports as `InternalIP` (upstream
//! `ParseNodeIPArgument` of `--node-ip`, the IP choice of the `NodeAddress` setter, the
//! kubelet's `validateNodeIP` and apimachinery's `ResolveBindAddress`). Receives `--node-ip`,
//! the node and host names and a [`HostNetwork`] (the host's resolver, local addresses and
//! default routes); emits the node IPs, or an error naming the flag or the node. Pure apart
//! from [`SystemNetwork`], the real host.
//!
//! Upstream's choice, kept here: a specified `--node-ip` (one, or a dual-stack pair) is used as
//! given; `0.0.0.0` / `::` (or no flag) mean "find one", preferring IPv4 (IPv6 for `::`):
//! the host name if it is an IP, else the first valid address the node name resolves to in
//! the preferred family (else the first valid one), else the address of the default route of
//! the preferred family (else of the other). A valid address is on a host interface and not
//! loopback, link-local, multicast or unspecified. With `--cloud-provider=external` and no
//! specified IP nothing is looked up: the cloud controller manager sets the addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs, UdpSocket};
use std::path::Path;

/// `--node-ip` and node IP failures; messages name the flag or the node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeIpError {
    #[error("--node-ip: {0:?} is not an IP address")]
    Parse(String),
    #[error("--node-ip: {0:?} must contain either a single IP or a dual-stack pair of IPs")]
    NotSingleOrDualStack(String),
    #[error("--node-ip: {0:?}: dual-stack node IP cannot include '0.0.0.0' or '::'")]
    DualStackUnspecified(String),
    #[error("can't get ip address of node {node}: {reason}")]
    NotFound { node: String, reason: String },
}

/// What the node IP choice asks of the host.
pub trait HostNetwork {
    /// The addresses `host` resolves to (upstream `net.LookupIP`), in resolver order; empty
    /// when it does not resolve.
    fn lookup_ip(&self, host: &str) -> Vec<IpAddr>;
    /// Whether `ip` is assigned to one of the host's interfaces.
    fn is_local(&self, ip: IpAddr) -> bool;
    /// The host's address on the interface of the default route of that family (IPv6 when
    /// `v6`), if there is such a route and a global unicast address on it.
    fn default_route_ip(&self, v6: bool) -> Option<IpAddr>;
}

/// Upstream `ParseNodeIPArgument`: one IP, or two of different families, neither of them
/// unspecified. Empty → none. Unlike upstream (which logs and ignores them) an unparsable
/// entry is an error: a typo must not silently become another address.
pub fn parse_node_ip_argument(arg: &str) -> Result<Vec<IpAddr>, NodeIpError> {
    if arg.trim().is_empty() {
        return Ok(Vec::new());
    }
    let ips = arg
        .split(',')
        .map(|s| {
            let s = s.trim();
            s.parse::<IpAddr>()
                .map_err(|_| NodeIpError::Parse(s.to_owned()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match ips.as_slice() {
        [_] => Ok(ips),
        [a, b] if a.is_ipv6() != b.is_ipv6() => {
            if a.is_unspecified() || b.is_unspecified() {
                Err(NodeIpError::DualStackUnspecified(arg.to_owned()))
            } else {
                Ok(ips)
            }
        }
        _ => Err(NodeIpError::NotSingleOrDualStack(arg.to_owned())),
    }
}

/// Go's `IP.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local or the IPv4
/// broadcast address.
pub fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// Upstream `validateNodeIP`: why `ip` cannot be the node IP, if it cannot.
pub fn validate_node_ip(ip: IpAddr, net: &dyn HostNetwork) -> Result<(), String> {
    let link_local = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    };
    if ip.is_loopback() {
        Err("nodeIP can't be loopback address".to_owned())
    } else if ip.is_multicast() {
        Err("nodeIP can't be a multicast address".to_owned())
    } else if link_local {
        Err("nodeIP can't be a link-local unicast address".to_owned())
    } else if ip.is_unspecified() {
        Err("nodeIP can't be an all zeros address".to_owned())
    } else if !net.is_local(ip) {
        Err(format!(
            "node IP: {:?} not found in the host's network interfaces",
            ip.to_string()
        ))
    } else {
        Ok(())
    }
}

/// The `InternalIP`s of the Node (upstream `NodeAddress` without a cloud provider): see the
/// module doc. `node_ips` is what [`parse_node_ip_argument`] returned. Empty (not an error)
/// with an external cloud provider and no specified IP.
pub fn choose_node_ips(
    node_ips: &[IpAddr],
    hostname: &str,
    node_name: &str,
    external_cloud_provider: bool,
    net: &dyn HostNetwork,
) -> Result<Vec<IpAddr>, NodeIpError> {
    let primary = node_ips.first().copied();
    let specified = |ip: Option<IpAddr>| ip.filter(|ip| !ip.is_unspecified());
    let prefer_v4 = primary.is_none_or(|ip| ip.is_ipv4());
    match (specified(primary), specified(node_ips.get(1).copied())) {
        (Some(a), Some(b)) => return Ok(vec![a, b]),
        (Some(a), None) => return Ok(vec![a]),
        (None, _) if external_cloud_provider => return Ok(Vec::new()),
        (None, _) => {}
    }
    if let Ok(ip) = hostname.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    let mut found = None;
    let mut last_error = None;
    for ip in net.lookup_ip(node_name) {
        match validate_node_ip(ip, net) {
            Ok(()) if ip.is_ipv4() == prefer_v4 => {
                found = Some(ip);
                break;
            }
            Ok(()) => {
                found = found.or(Some(ip));
            }
            Err(e) => last_error = Some(e),
        }
    }
    if let Some(ip) = found {
        return Ok(vec![ip]);
    }
    // Upstream `ResolveBindAddress(nodeIP)`: the default route's address, preferred family
    // first.
    let families = if prefer_v4 {
        [false, true]
    } else {
        [true, false]
    };
    families
        .into_iter()
        .find_map(|v6| net.default_route_ip(v6))
        .map(|ip| vec![ip])
        .ok_or_else(|| NodeIpError::NotFound {
            node: node_name.to_owned(),
            reason: last_error.map_or_else(
                || "unable to select an IP from default routes".to_owned(),
                |e| format!("unable to select an IP from default routes ({e})"),
            ),
        })
}

/// Interfaces carrying a default route, from `/proc/net/route` (IPv4) or
/// `/proc/net/ipv6_route` (IPv6) text: destination and mask (prefix length) all zero.
pub fn default_route_interfaces(text: &str, v6: bool) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (dest_zero, iface) = if v6 {
            // dest, dest prefix, src, src prefix, next hop, metric, refcnt, use, flags, iface
            match f.as_slice() {
                [dest, plen, .., iface] if f.len() == 10 => {
                    (dest.bytes().all(|b| b == b'0') && *plen == "00", *iface)
                }
                _ => continue,
            }
        } else {
            // Iface Destination Gateway Flags RefCnt Use Metric Mask …
            match f.as_slice() {
                [iface, dest, _, _, _, _, _, mask, ..] => {
                    (*dest == "00000000" && *mask == "00000000", *iface)
                }
                _ => continue,
            }
        };
        if dest_zero && iface != "lo" && !out.iter().any(|i| i == iface) {
            out.push(iface.to_owned());
        }
    }
    out
}

/// The real host: the system resolver (`/etc/hosts`, DNS), a UDP bind to test that an
/// address is local, and the kernel's source address towards an off-link documentation
/// address (RFC 5737 / RFC 3849) when `/proc/net/route` (or `ipv6_route`) has a default
/// route for that family. No packet is sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemNetwork;

impl HostNetwork for SystemNetwork {
    fn lookup_ip(&self, host: &str) -> Vec<IpAddr> {
        let mut out: Vec<IpAddr> = Vec::new();
        for a in (host, 0).to_socket_addrs().into_iter().flatten() {
            if !out.contains(&a.ip()) {
                out.push(a.ip());
            }
        }
        out
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        UdpSocket::bind((ip, 0)).is_ok()
    }

    fn default_route_ip(&self, v6: bool) -> Option<IpAddr> {
        let table = if v6 {
            "/proc/net/ipv6_route"
        } else {
            "/proc/net/route"
        };
        // Without the route table, any route will do (upstream then scans the interfaces).
        if let Ok(text) = std::fs::read_to_string(Path::new(table))
            && default_route_interfaces(&text, v6).is_empty()
        {
            return None;
        }
        let (bind, target): (IpAddr, IpAddr) = if v6 {
            (
                Ipv6Addr::UNSPECIFIED.into(),
                Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into(),
            )
        } else {
            (
                Ipv4Addr::UNSPECIFIED.into(),
                Ipv4Addr::new(198, 51, 100, 1).into(),
            )
        };
        let socket = UdpSocket::bind((bind, 0)).ok()?;
        socket.connect((target, 9)).ok()?;
        let ip = socket.local_addr().ok()?.ip();
        is_global_unicast(ip).then_some(ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with these local addresses, resolver answers and default-route addresses.
    #[derive(Default)]
    struct FakeNet {
        local: Vec<IpAddr>,
        dns: Vec<(&'static str, Vec<IpAddr>)>,
        route_v4: Option<IpAddr>,
        route_v6: Option<IpAddr>,
    }

    impl HostNetwork for FakeNet {
        fn lookup_ip(&self, host: &str) -> Vec<IpAddr> {
            self.dns
                .iter()
                .find(|(h, _)| *h == host)
                .map(|(_, ips)| ips.clone())
                .unwrap_or_default()
        }
        fn is_local(&self, ip: IpAddr) -> bool {
            self.local.contains(&ip)
        }
        fn default_route_ip(&self, v6: bool) -> Option<IpAddr> {
            if v6 { self.route_v6 } else { self.route_v4 }
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| ip(s)).collect()
    }

    fn host() -> FakeNet {
        FakeNet {
            local: ips(&["10.0.0.5", "fd00::5", "192.168.7.7"]),
            dns: vec![
                // Debian's /etc/hosts: the host name on a loopback address.
                ("loopy", ips(&["127.0.1.1"])),
                ("both", ips(&["fd00::5", "127.0.1.1", "10.0.0.5"])),
                ("v6only", ips(&["fe80::1", "fd00::5"])),
                ("elsewhere", ips(&["203.0.113.9"])),
            ],
            route_v4: Some(ip("192.168.7.7")),
            route_v6: Some(ip("fd00::5")),
        }
    }

    fn choose(flag: &str, name: &str, net: &FakeNet) -> Result<Vec<IpAddr>, NodeIpError> {
        choose_node_ips(&parse_node_ip_argument(flag)?, name, name, false, net)
    }

    #[test]
    fn node_ip_argument_as_upstream() {
        assert_eq!(parse_node_ip_argument("").unwrap(), Vec::<IpAddr>::new());
        assert_eq!(
            parse_node_ip_argument(" 10.0.0.5 ").unwrap(),
            ips(&["10.0.0.5"])
        );
        assert_eq!(
            parse_node_ip_argument("10.0.0.5, fd00::5").unwrap(),
            ips(&["10.0.0.5", "fd00::5"])
        );
        assert_eq!(parse_node_ip_argument("::").unwrap(), ips(&["::"]));
        assert_eq!(
            parse_node_ip_argument("10.0.0.5,10.0.0.6").unwrap_err(),
            NodeIpError::NotSingleOrDualStack("10.0.0.5,10.0.0.6".into())
        );
        assert!(matches!(
            parse_node_ip_argument("10.0.0.5,fd00::1,10.0.0.6"),
            Err(NodeIpError::NotSingleOrDualStack(_))
        ));
        assert_eq!(
            parse_node_ip_argument("0.0.0.0,fd00::5")
                .unwrap_err()
                .to_string(),
            "--node-ip: \"0.0.0.0,fd00::5\": dual-stack node IP cannot include '0.0.0.0' or '::'"
        );
        assert_eq!(
            parse_node_ip_argument("10.0.0.x").unwrap_err().to_string(),
            "--node-ip: \"10.0.0.x\" is not an IP address"
        );
    }

    #[test]
    fn specified_ips_are_used_as_given() {
        let net = host();
        assert_eq!(
            choose("10.9.9.9", "loopy", &net).unwrap(),
            ips(&["10.9.9.9"])
        );
        assert_eq!(
            choose("fd00::9,10.9.9.9", "loopy", &net).unwrap(),
            ips(&["fd00::9", "10.9.9.9"])
        );
        // External cloud provider: a specified IP still counts, none means the CCM's.
        let given = parse_node_ip_argument("10.9.9.9").unwrap();
        assert_eq!(
            choose_node_ips(&given, "both", "both", true, &net).unwrap(),
            given
        );
        for flag in ["", "0.0.0.0", "::"] {
            let none = parse_node_ip_argument(flag).unwrap();
            assert_eq!(
                choose_node_ips(&none, "both", "both", true, &net).unwrap(),
                Vec::<IpAddr>::new(),
                "{flag:?}"
            );
        }
    }

    #[test]
    fn host_name_that_is_an_ip_comes_first() {
        assert_eq!(
            choose("", "192.0.2.44", &host()).unwrap(),
            ips(&["192.0.2.44"])
        );
        assert_eq!(
            choose("::", "192.0.2.44", &host()).unwrap(),
            ips(&["192.0.2.44"])
        );
    }

    #[test]
    fn node_name_resolves_to_a_valid_address_of_the_preferred_family() {
        let net = host();
        // No flag or 0.0.0.0: IPv4 first, loopback skipped.
        assert_eq!(choose("", "both", &net).unwrap(), ips(&["10.0.0.5"]));
        assert_eq!(choose("0.0.0.0", "both", &net).unwrap(), ips(&["10.0.0.5"]));
        // `::`: IPv6 first.
        assert_eq!(choose("::", "both", &net).unwrap(), ips(&["fd00::5"]));
        // Only the other family resolves: taken (link-local skipped).
        assert_eq!(choose("", "v6only", &net).unwrap(), ips(&["fd00::5"]));
    }

    #[test]
    fn otherwise_the_default_route_address_of_the_preferred_family() {
        let net = host();
        // Resolves to loopback only (Debian's 127.0.1.1), or to an address not on the host,
        // or not at all: the default route's address, never 127.0.0.1.
        for name in ["loopy", "elsewhere", "unknown"] {
            assert_eq!(
                choose("", name, &net).unwrap(),
                ips(&["192.168.7.7"]),
                "{name}"
            );
            assert_eq!(
                choose("0.0.0.0", name, &net).unwrap(),
                ips(&["192.168.7.7"])
            );
            assert_eq!(
                choose("::", name, &net).unwrap(),
                ips(&["fd00::5"]),
                "{name}"
            );
        }
        // The preferred family has no default route: the other one.
        let v4_only = FakeNet {
            route_v6: None,
            ..host()
        };
        assert_eq!(
            choose("::", "loopy", &v4_only).unwrap(),
            ips(&["192.168.7.7"])
        );
        let v6_only = FakeNet {
            route_v4: None,
            ..host()
        };
        assert_eq!(choose("", "loopy", &v6_only).unwrap(), ips(&["fd00::5"]));
        // Nothing at all: an error naming the node, no loopback fallback.
        let isolated = FakeNet {
            route_v4: None,
            route_v6: None,
            ..host()
        };
        assert_eq!(
            choose("", "loopy", &isolated).unwrap_err().to_string(),
            "can't get ip address of node loopy: unable to select an IP from default routes \
             (nodeIP can't be loopback address)"
        );
    }

    #[test]
    fn validation_as_upstream() {
        let net = host();
        for (addr, want) in [
            ("127.0.1.1", "nodeIP can't be loopback address"),
            ("::1", "nodeIP can't be loopback address"),
            ("224.0.0.1", "nodeIP can't be a multicast address"),
            (
                "169.254.1.1",
                "nodeIP can't be a link-local unicast address",
            ),
            ("fe80::1", "nodeIP can't be a link-local unicast address"),
            ("0.0.0.0", "nodeIP can't be an all zeros address"),
            (
                "203.0.113.9",
                "node IP: \"203.0.113.9\" not found in the host's network interfaces",
            ),
        ] {
            assert_eq!(
                validate_node_ip(ip(addr), &net).unwrap_err(),
                want,
                "{addr}"
            );
        }
        assert!(validate_node_ip(ip("10.0.0.5"), &net).is_ok());
        assert!(is_global_unicast(ip("10.0.0.5")) && is_global_unicast(ip("fd00::5")));
        assert!(!is_global_unicast(ip("255.255.255.255")) && !is_global_unicast(ip("fe80::1")));
    }

    #[test]
    fn default_routes_from_proc() {
        let v4 = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                  eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
                  cni0\t0000DE0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(default_route_interfaces(v4, false), ["eth0"]);
        assert!(default_route_interfaces("Iface\tDestination\n", false).is_empty());
        let v6 = "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth1\n\
                  00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n";
        assert_eq!(default_route_interfaces(v6, true), ["eth1"]);
    }

    #[test]
    fn the_real_host_never_answers_loopback() {
        let net = SystemNetwork;
        assert!(net.is_local(ip("127.0.0.1")));
        assert!(!net.is_local(ip("203.0.113.254")));
        for v6 in [false, true] {
            if let Some(ip) = net.default_route_ip(v6) {
                assert!(is_global_unicast(ip) && ip.is_ipv6() == v6, "{ip}");
            }
        }
        assert!(net.lookup_ip("localhost").iter().all(|ip| ip.is_loopback()));
    }
}
