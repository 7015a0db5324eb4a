//! Which headers cross the gateway: hop-by-hop headers never do (RFC 9110 §7.6.1), headers
//! through which an upstream trusts a proxy are only ever the gateway's own, and the client's
//! identity is forwarded as `backend.upstream.identity` says — in `proxy` mode with the
//! client's address chain, a trusted proxy's believed ([`super::forwarded`]).

use std::net::IpAddr;
use std::sync::LazyLock;

use base64::Engine as _;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::config::{IdentityMode, UpstreamConfig};
use super::forwarded;
use crate::auth::{AuthMode, IpCidr, Principal};
use crate::http::header_lines::HeaderLines;

/// Hop-by-hop headers: meaningful for one connection only, never forwarded (RFC 9110 §7.6.1,
/// plus `keep-alive`, `proxy-connection` and `upgrade` that proxies conventionally drop).
/// Names, not strings: a `&str` is parsed and hashed on every lookup. A `static`, not a
/// `const`: a `const` array is built and dropped again at each use, once per header looked at.
pub(super) static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// sluice's `workloadGroupId` header as a header name (names are lowercase on the wire
/// model; `test_group_header_name_is_sluice_wire_s` checks it is the same header).
const GROUP_HEADER_LOWERCASE: &str = "workloadgroupid";

/// Elasticsearch's run-as header: the request runs as this user when the authenticated user
/// may run as others.
pub const RUN_AS_HEADER: HeaderName = HeaderName::from_static("es-security-runas-user");

/// The header the client's address is forwarded in, which OpenSearch security's proxy
/// authentication reads (`remoteIpHeader`) to check its trusted proxies.
pub const FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// A set of header names (lowercase, by length) and name prefixes. A name is compared only
/// with the names of its length, as text: no `HeaderName` parsed or hashed for a name as a
/// client sent it, and a lookup of a `HeaderName` costs its text's (a table lookup for a
/// standard one).
pub(super) struct Names {
    by_len: Vec<Vec<Box<str>>>,
    prefixes: &'static [&'static str],
}

impl Names {
    fn of(names: impl IntoIterator<Item = HeaderName>, prefixes: &'static [&'static str]) -> Names {
        let mut by_len: Vec<Vec<Box<str>>> = Vec::new();
        for name in names {
            let text = name.as_str();
            if by_len.len() <= text.len() {
                by_len.resize(text.len() + 1, Vec::new());
            }
            if !by_len[text.len()].iter().any(|n| &**n == text) {
                by_len[text.len()].push(text.into());
            }
        }
        Names { by_len, prefixes }
    }

    fn contains(&self, name: &HeaderName) -> bool {
        self.contains_raw(name.as_str().as_bytes())
    }

    /// [`Names::contains`] for a name as a client sent it (any case, and `_` for `-`: see
    /// [`same_name`]).
    fn contains_raw(&self, name: &[u8]) -> bool {
        self.by_len
            .get(name.len())
            .is_some_and(|names| names.iter().any(|n| same_name(n.as_bytes(), name)))
            || self
                .prefixes
                .iter()
                .any(|p| name.len() >= p.len() && same_name(p.as_bytes(), &name[..p.len()]))
    }
}

/// Whether `ours` (lowercase) and a name as a client sent it are one header to some stack: in
/// any case, and with `_` for `-`, which a stack that maps header names to variables (CGI's
/// `HTTP_X_PROXY_USER`, some proxies and frameworks) does not tell apart. A client's
/// `x_proxy_user` must not reach an upstream behind such a stack as the user.
fn same_name(ours: &[u8], theirs: &[u8]) -> bool {
    ours.len() == theirs.len()
        && ours
            .iter()
            .zip(theirs)
            .all(|(&o, &t)| FOLD[usize::from(o)] == FOLD[usize::from(t)])
}

/// Each byte as [`same_name`] compares it: ASCII letters in lowercase, `_` as `-`. One table
/// load a byte: every forwarded header line is compared with the dropped names of its length,
/// and the per-byte case and `_` tests made those comparisons cost a tagged proxied search
/// about 820 instructions, the table about 640 (`scripts/gateway_instructions.sh`).
static FOLD: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        #[allow(clippy::cast_possible_truncation)] // i < 256
        let b = i as u8;
        table[i] = if b == b'_' {
            b'-'
        } else {
            b.to_ascii_lowercase()
        };
        i += 1;
    }
    table
};

/// The prefix of OpenSearch security's extended proxy attributes (`x-proxy-ext-<attribute>`,
/// its `attr_header_prefix` default), which its proxy authentication believes from a trusted
/// proxy: never a client's to send.
const PROXY_EXT_PREFIX: &str = "x-proxy-ext-";

/// Where a request's path through proxies is told, which an upstream that trusts the gateway
/// as a proxy believes: never a client's to send (in `proxy` mode the gateway writes
/// `X-Forwarded-For` itself, with the chain of a proxy sluice trusts; `Forwarded` and
/// `X-Real-IP` are not converted: OpenSearch security reads one header, `remoteIpHeader`).
const FORWARDING: [HeaderName; 3] = [
    FORWARDED_FOR,
    HeaderName::from_static("forwarded"),
    HeaderName::from_static("x-real-ip"),
];

/// Credentials a client may send besides `Authorization`: OpenSearch security's session
/// cookie, Elasticsearch's secondary authorization, API keys. Forwarded in `passthrough`
/// only, like `Authorization`.
const CREDENTIALS: [HeaderName; 3] = [
    header::COOKIE,
    HeaderName::from_static("es-secondary-authorization"),
    HeaderName::from_static("x-api-key"),
];

/// Requests OpenSearch security honours from an authenticated user beyond who it is:
/// impersonation of another user (`opendistro_security_impersonate_as`, when the user may
/// impersonate: `rest_impersonation_user`) and the Dashboards tenant its saved objects are read
/// in (`securitytenant`, and `security_tenant` as some clients spell it). Under the gateway's
/// credentials they would be asked in the gateway's name: forwarded in `passthrough` only,
/// where the upstream judges them as the client's.
const SECURITY_REQUESTS: [HeaderName; 3] = [
    HeaderName::from_static("opendistro_security_impersonate_as"),
    HeaderName::from_static("securitytenant"),
    HeaderName::from_static("security_tenant"),
];

/// Why a header name cannot carry the user or its roles in `identity: proxy`
/// (`backend.upstream.proxy.user_header` / `roles_header`), if it cannot: the gateway frames
/// the request with it, writes it itself, strips it from clients for another meaning, or the
/// upstream reads it as something else. An outside trial's `user_header=transfer-encoding`
/// sent `Transfer-Encoding: alice` beside a `Content-Length` (a smuggling-shaped request),
/// `authorization` replaced the gateway's credentials, and `content-length`, `host` or
/// `x-forwarded-for` dropped the user without a word, so the request reached the upstream as
/// the gateway's own identity. Compared as [`same_name`] does (any case, `_` for `-`).
pub(super) fn reserved_for_identity(name: &HeaderName) -> Option<&'static str> {
    static GROUPS: LazyLock<Vec<(Names, &'static str)>> = LazyLock::new(|| {
        vec![
            (
                Names::of(
                    HOP_BY_HOP.iter().cloned().chain([
                        header::CONTENT_LENGTH,
                        header::HOST,
                        header::EXPECT,
                        header::CONTENT_TYPE,
                        header::CONTENT_ENCODING,
                        header::ACCEPT_ENCODING,
                    ]),
                    &[],
                ),
                "it frames the request or the connection",
            ),
            (
                Names::of(
                    [
                        header::AUTHORIZATION,
                        RUN_AS_HEADER,
                        crate::http::meta::OPAQUE_ID_NAME.clone(),
                        HeaderName::from_static(GROUP_HEADER_LOWERCASE),
                    ]
                    .into_iter()
                    .chain(FORWARDING),
                    &[PROXY_EXT_PREFIX],
                ),
                "the gateway writes it itself, or reads it as something else",
            ),
            (
                Names::of(CREDENTIALS.into_iter().chain(SECURITY_REQUESTS), &[]),
                "the upstream reads it as the client's credentials or security requests",
            ),
        ]
    });
    GROUPS
        .iter()
        .find(|(names, _)| names.contains(name))
        .map(|(_, why)| *why)
}

/// Whether two header names are one header to some stack ([`same_name`]).
pub(super) fn same_header(a: &HeaderName, b: &HeaderName) -> bool {
    same_name(a.as_str().as_bytes(), b.as_str().as_bytes())
}

/// [`HOP_BY_HOP`] as a [`Names`].
static HOP_BY_HOP_NAMES: LazyLock<Names> = LazyLock::new(|| Names::of(HOP_BY_HOP.clone(), &[]));

/// The tokens of a `Connection` header's value: split at commas, ASCII whitespace trimmed,
/// empty ones skipped. Read as bytes, not as text, so a value with a byte that is not visible
/// ASCII still names its other tokens (RFC 9110 §7.6.1), and the lane's parse, its exchange and
/// the general path's [`strip`] all read one value alike (an outside trial found
/// `Connection: keep-alive, x-foo, café` let `X-Foo` through on the general path).
pub fn connection_tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|&b| b == b',')
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
}

/// Removes from an upstream answer's headers the hop-by-hop ones, those the `Connection`
/// header names, and a `Content-Length` beside a `Transfer-Encoding`: hyper's client framed
/// the body by the encoding (RFC 9112 §6.3), and an intermediary must not pass the length on
/// (§6.1); hyper's server would frame the client's answer by it, cutting the body short (an
/// outside trial found a `content-length: 3` beside chunks answered as 3 bytes).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    strip(headers, &HOP_BY_HOP_NAMES);
}

/// Removes the headers `dropped` names and those the `Connection` header names.
///
/// One pass over the headers present (a request has a handful), each looked up in `dropped`,
/// then a removal for each match (usually `Host` alone). Not a hashed lookup in the request
/// per name that might be there, nor a comparison of each header with every name dropped (17
/// on a gateway): on a proxied search either was most of the gateway's header work, the
/// comparisons about 1,100 instructions.
fn strip(headers: &mut HeaderMap, dropped: &Names) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| connection_tokens(v.as_bytes()))
        .filter_map(|n| HeaderName::from_bytes(n).ok())
        .collect();
    let doomed: Vec<HeaderName> = headers
        .keys()
        .filter(|k| dropped.contains(k) || named.contains(k))
        .cloned()
        .collect();
    for name in &doomed {
        headers.remove(name);
    }
}

/// What the gateway tells the upstream about who the user is.
pub struct Identity {
    mode: IdentityMode,
    /// `Basic …` of the gateway's own credentials.
    service_authorization: Option<HeaderValue>,
    proxy_user_header: HeaderName,
    proxy_roles_header: HeaderName,
    /// The peers whose `X-Forwarded-For` chain is believed in `proxy` mode: sluice's own
    /// trusted proxies (`auth.proxy.trusted_addresses`), with `auth.type: proxy` only — the
    /// peers whose word on the user sluice takes, and no others.
    trusted_proxies: Vec<IpCidr>,
    /// Headers of the client's never forwarded: the hop-by-hop ones, `Host`, `Expect`, sluice's
    /// `workloadGroupId`, the headers through which some upstream trusts a proxy (the
    /// upstream's proxy headers and extended attributes, sluice's own `auth.proxy.*` headers,
    /// run-as, the forwarding chain), and unless in `passthrough`, `Authorization`, the other
    /// credentials and the security requests ([`SECURITY_REQUESTS`]). Matched in any case and
    /// with `_` for `-` ([`same_name`]).
    dropped: Names,
}

impl Identity {
    /// The identity forwarding of `config`; `auth` names sluice's own proxy headers.
    pub fn new(config: &UpstreamConfig, auth: &crate::auth::AuthConfig) -> Identity {
        let passthrough = config.identity == IdentityMode::Passthrough;
        let service_authorization = config.credentials.as_ref().and_then(|(u, p)| {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            let mut v = HeaderValue::from_str(&format!("Basic {token}")).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        Identity {
            mode: config.identity,
            service_authorization,
            proxy_user_header: config.proxy_user_header.clone(),
            proxy_roles_header: config.proxy_roles_header.clone(),
            trusted_proxies: if auth.mode == AuthMode::Proxy {
                auth.trusted_addresses.clone()
            } else {
                Vec::new()
            },
            dropped: Names::of(
                HOP_BY_HOP
                    .iter()
                    .cloned()
                    .chain(FORWARDING)
                    .chain(
                        [
                            Some(header::HOST),
                            // hyper answers a client's `100-continue` itself, and the gateway's
                            // client sends the body without waiting: an upstream's `100
                            // Continue` would be for nobody.
                            Some(header::EXPECT),
                            Some(HeaderName::from_static(GROUP_HEADER_LOWERCASE)),
                            Some(config.proxy_user_header.clone()),
                            Some(config.proxy_roles_header.clone()),
                            Some(auth.proxy_user_header.clone()),
                            Some(auth.proxy_roles_header.clone()),
                            Some(RUN_AS_HEADER),
                            (!passthrough).then_some(header::AUTHORIZATION),
                        ]
                        .into_iter()
                        .flatten(),
                    )
                    .chain(CREDENTIALS.into_iter().filter(|_| !passthrough))
                    .chain(SECURITY_REQUESTS.into_iter().filter(|_| !passthrough)),
                &[PROXY_EXT_PREFIX],
            ),
        }
    }

    /// Whether every user's requests reach the upstream under one identity (the gateway's
    /// credentials, or none), which start-up warns about.
    pub fn is_single_identity(&self) -> bool {
        self.mode == IdentityMode::Service
    }

    /// Why an upstream of `distribution` (`opensearch`, `elasticsearch`, as its `GET /` says)
    /// cannot honour this identity mode, so that every user's requests would run under the
    /// gateway's one identity, as `service` does, without its warning: `run_as` sends
    /// Elasticsearch's header, which OpenSearch ignores; `proxy` sends OpenSearch security's
    /// proxy headers, for which Elasticsearch has no authenticator. `None` when the mode works
    /// with it (or says nothing of who the user is: `service`, `passthrough`).
    pub fn unhonoured_by(&self, distribution: &str) -> Option<&'static str> {
        match (self.mode, distribution) {
            (IdentityMode::RunAs, "opensearch") => Some(
                "backend.upstream.identity is run_as, but the upstream is OpenSearch, which ignores es-security-runas-user: every user's requests run as the gateway's own user, and the upstream's security cannot tell users apart; use identity proxy (OpenSearch security's proxy authentication)",
            ),
            (IdentityMode::Proxy, "elasticsearch") => Some(
                "backend.upstream.identity is proxy, but the upstream is Elasticsearch, which has no proxy-header authentication: every user's requests run as the gateway's own user, and the upstream's security cannot tell users apart; use identity run_as (Elasticsearch's run-as)",
            ),
            _ => None,
        }
    }

    /// The headers of a call of the gateway's own (its probe of `GET /`, the listing and
    /// cancelling of upstream tasks, the polling of their usage): the gateway's credentials
    /// whatever the identity mode — in `passthrough` too, where a client's call carries the
    /// client's: without them a secured upstream refuses the gateway's cancellations.
    pub fn own_call(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(auth) = &self.service_authorization {
            headers.insert(header::AUTHORIZATION, auth.clone());
        }
        headers
    }

    /// Whether the gateway's own calls carry no credentials ([`Identity::own_call`]).
    pub fn own_calls_anonymous(&self) -> bool {
        self.service_authorization.is_none()
    }

    /// Rewrites the request headers of a client at `client` (the connection's peer) for the
    /// upstream: hop-by-hop and `Host` removed, the `workloadGroupId` header (sluice's, not
    /// the upstream's) removed, proxy-trust headers removed, then the identity set: the
    /// client's `Authorization` is kept only in `passthrough`; otherwise the gateway's
    /// credentials, plus the user, roles and address chain in `proxy`
    /// ([`Identity::forwarded_for`]) or the user in `run_as`.
    pub fn outbound(
        &self,
        headers: &mut HeaderMap,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) {
        let forwarded_for = self.forwarded_for(&*headers, principal, client);
        strip(headers, &self.dropped);
        self.add(headers, principal, forwarded_for);
    }

    /// [`Identity::outbound`] for a request of the fast lane, whose header lines are forwarded
    /// as the client sent them (`raw`): the lines the identity drops are removed, and what it
    /// adds goes into `headers`, written after them. The same headers reach the upstream as
    /// through [`Identity::outbound`] (`test_raw_lines_are_rewritten_as_a_header_map_is`).
    pub fn outbound_raw(
        &self,
        raw: &mut super::h1::RawHeaders,
        headers: &mut HeaderMap,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) {
        let forwarded_for = self.forwarded_for(&*raw, principal, client);
        raw.retain(|name| !self.dropped.contains_raw(name));
        self.add(headers, principal, forwarded_for);
    }

    /// The `X-Forwarded-For` value of `principal`'s request from `client` with header lines
    /// `lines`, in `proxy` mode (none in the others, or without a principal or a client).
    ///
    /// From one of sluice's trusted proxies ([`Identity::trusted_proxies`]) its chain is
    /// believed, as far as it is well formed and no longer than the bound
    /// ([`forwarded::believed_chain`]), and the proxy comes after it; from any other peer the
    /// chain it sent is its own claim, and the peer is the only entry. Read before the
    /// client's forwarding headers are stripped, from the lines either path keeps (a header
    /// map, or the lane's raw lines: they answer alike, `header_lines` H1), so both forward
    /// the same value.
    fn forwarded_for(
        &self,
        lines: &impl HeaderLines,
        principal: Option<&Principal>,
        client: Option<IpAddr>,
    ) -> Option<HeaderValue> {
        if self.mode != IdentityMode::Proxy || principal.is_none() {
            return None;
        }
        let client = client?;
        let chain = if self.trusted_proxies.iter().any(|n| n.contains(client)) {
            forwarded::believed_chain(lines.values(&FORWARDED_FOR))
        } else {
            Vec::new()
        };
        forwarded::header_value(&chain, client)
    }

    /// The identity's own headers, set in `headers`: the gateway's credentials, and the user
    /// in `proxy` and `run_as` modes, with `forwarded_for` ([`Identity::forwarded_for`]) in
    /// `proxy`.
    fn add(
        &self,
        headers: &mut HeaderMap,
        principal: Option<&Principal>,
        forwarded_for: Option<HeaderValue>,
    ) {
        if self.mode != IdentityMode::Passthrough
            && let Some(auth) = &self.service_authorization
        {
            headers.insert(header::AUTHORIZATION, auth.clone());
        }
        match (self.mode, principal) {
            (IdentityMode::Proxy, Some(p)) => {
                if let Ok(v) = HeaderValue::from_str(&p.username) {
                    headers.insert(self.proxy_user_header.clone(), v);
                }
                let roles: Vec<&str> = p.roles.iter().map(|r| &**r).collect();
                if let Ok(v) = HeaderValue::from_str(&roles.join(",")) {
                    headers.insert(self.proxy_roles_header.clone(), v);
                }
                // The security plugin checks the proxy against the forwarded chain, the
                // gateway being the last proxy: it takes its proxy headers only once it read
                // a client's address there.
                if let Some(v) = forwarded_for {
                    headers.insert(FORWARDED_FOR, v);
                }
            }
            (IdentityMode::RunAs, Some(p)) => {
                if let Ok(v) = HeaderValue::from_str(&p.username) {
                    headers.insert(RUN_AS_HEADER, v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn config(mode: IdentityMode, creds: bool) -> UpstreamConfig {
        UpstreamConfig {
            hosts: vec!["http://u:9200/".parse().unwrap()],
            credentials: creds.then(|| ("gw".to_string(), "secret".to_string())),
            ca_file: None,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
            cancel_wait_timeout: Duration::from_secs(1),
            identity: mode,
            search_threads: None,
            proxy_user_header: HeaderName::from_static("x-proxy-user"),
            proxy_roles_header: HeaderName::from_static("x-proxy-roles"),
            fast_lane: true,
        }
    }

    fn client_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            HeaderValue::from_static("Basic YWxpY2U6cHc="),
        );
        h.insert("x-proxy-user", HeaderValue::from_static("root"));
        h.insert("x-proxy-roles", HeaderValue::from_static("all_access"));
        h.insert("es-security-runas-user", HeaderValue::from_static("root"));
        h.insert("connection", HeaderValue::from_static("keep-alive, x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        h.insert("te", HeaderValue::from_static("trailers"));
        h.insert("workloadGroupId", HeaderValue::from_static("g"));
        h.insert("x-opaque-id", HeaderValue::from_static("mine"));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h.insert("X-Forwarded-For", HeaderValue::from_static("10.9.9.9"));
        h.append("x-forwarded-for", HeaderValue::from_static("1.1.1.1"));
        h.insert("forwarded", HeaderValue::from_static("for=10.9.9.9"));
        h.insert("x-real-ip", HeaderValue::from_static("10.9.9.9"));
        h.insert(
            "x-proxy-ext-department",
            HeaderValue::from_static("tenant-b"),
        );
        // The same headers as a stack that reads `_` for `-` sees them.
        for (name, value) in [
            ("x_proxy_user", "root"),
            ("x_proxy_roles", "all_access"),
            ("es_security_runas_user", "root"),
            ("x_forwarded_for", "10.9.9.9"),
            ("x_proxy_ext_team", "b"),
            ("x_custom", "kept"),
            ("opendistro_security_impersonate_as", "root"),
            ("opendistro-security-impersonate-as", "root"),
            ("securitytenant", "tenant-b"),
            ("security_tenant", "tenant-b"),
        ] {
            h.insert(name, HeaderValue::from_static(value));
        }
        h.insert(
            "cookie",
            HeaderValue::from_static("security_authentication=x"),
        );
        h.insert(
            "es-secondary-authorization",
            HeaderValue::from_static("Basic YWxpY2U6cHc="),
        );
        h.insert("x-api-key", HeaderValue::from_static("k"));
        h.insert("expect", HeaderValue::from_static("100-continue"));
        h
    }

    fn alice() -> Principal {
        Principal {
            username: Arc::from("alice"),
            roles: vec![Arc::from("analyst"), Arc::from("ops")],
        }
    }

    #[test]
    fn test_group_header_name_is_sluice_wire_s() {
        assert_eq!(
            HeaderName::from_bytes(sluice_wire::WORKLOAD_GROUP_ID_HEADER.as_bytes()).unwrap(),
            HeaderName::from_static(GROUP_HEADER_LOWERCASE)
        );
    }

    /// A byte of a name of ours (lowercase: a `HeaderName`'s text or a prefix constant) and a
    /// byte a client sent are the same exactly when the byte of theirs in lowercase is ours,
    /// or one is `_` and the other `-`: every pair of bytes.
    #[test]
    fn test_names_are_the_same_in_any_case_and_with_underscore_for_dash() {
        for o in (0..=u8::MAX).filter(|b| !b.is_ascii_uppercase()) {
            for t in 0..=u8::MAX {
                let rule = o == t.to_ascii_lowercase()
                    || (o == b'-' && t == b'_')
                    || (o == b'_' && t == b'-');
                assert_eq!(same_name(&[o], &[t]), rule, "{o} {t}");
            }
        }
        assert!(same_name(b"x-proxy-user", b"X_Proxy-USER"));
        assert!(!same_name(b"x-proxy-user", b"x-proxy-use"));
    }

    #[test]
    fn test_client_proxy_trust_and_hop_headers_never_reach_the_upstream() {
        for mode in [
            IdentityMode::Service,
            IdentityMode::Passthrough,
            IdentityMode::RunAs,
        ] {
            let id = Identity::new(&config(mode, true), &crate::auth::AuthConfig::default());
            let mut h = client_headers();
            id.outbound(&mut h, None, None);
            for gone in [
                "expect",
                "x-proxy-user",
                "x-proxy-roles",
                "connection",
                "x-hop",
                "te",
                "workloadgroupid",
                "x-forwarded-for",
                "forwarded",
                "x-real-ip",
                "x-proxy-ext-department",
                "x_proxy_user",
                "X_Proxy_Roles",
                "es_security_runas_user",
                "x_forwarded_for",
                "x_proxy_ext_team",
            ] {
                assert!(h.get(gone).is_none(), "{mode:?} kept {gone}");
            }
            // What the user asks of OpenSearch security goes with its `Authorization`.
            for request in [
                "opendistro_security_impersonate_as",
                "opendistro-security-impersonate-as",
                "securitytenant",
                "security_tenant",
            ] {
                assert_eq!(
                    h.get(request).is_some(),
                    mode == IdentityMode::Passthrough,
                    "{mode:?}: {request}"
                );
            }
            assert_eq!(h["x_custom"], "kept", "{mode:?}");
            // The client's other credentials go with its `Authorization`: only in passthrough.
            for credential in ["cookie", "es-secondary-authorization", "x-api-key"] {
                assert_eq!(
                    h.get(credential).is_some(),
                    mode == IdentityMode::Passthrough,
                    "{mode:?}: {credential}"
                );
            }
            assert!(h.get("es-security-runas-user").is_none(), "{mode:?}");
            assert_eq!(h["x-opaque-id"], "mine");
            assert_eq!(h["content-type"], "application/json");
        }
    }

    #[test]
    fn test_a_mode_the_upstream_cannot_honour_is_named() {
        let auth = crate::auth::AuthConfig::default();
        let of = |mode| Identity::new(&config(mode, true), &auth);
        let run_as = of(IdentityMode::RunAs).unhonoured_by("opensearch").unwrap();
        assert!(
            run_as.contains("ignores es-security-runas-user"),
            "{run_as}"
        );
        let proxy = of(IdentityMode::Proxy)
            .unhonoured_by("elasticsearch")
            .unwrap();
        assert!(proxy.contains("no proxy-header authentication"), "{proxy}");
        for (mode, distribution) in [
            (IdentityMode::RunAs, "elasticsearch"),
            (IdentityMode::Proxy, "opensearch"),
            (IdentityMode::Service, "opensearch"),
            (IdentityMode::Passthrough, "elasticsearch"),
        ] {
            assert_eq!(of(mode).unhonoured_by(distribution), None, "{mode:?}");
        }
    }

    #[test]
    fn test_connection_names_are_read_as_bytes() {
        let id = Identity::new(
            &config(IdentityMode::Service, false),
            &crate::auth::AuthConfig::default(),
        );
        for value in [
            &b"keep-alive, x-foo, caf\xc3\xa9"[..],
            b"x-foo, caf\xe9",
            b"\tx-foo\t",
        ] {
            let mut h = HeaderMap::new();
            h.insert("connection", HeaderValue::from_bytes(value).unwrap());
            h.insert("x-foo", HeaderValue::from_static("1"));
            h.insert("x-bar", HeaderValue::from_static("2"));
            id.outbound(&mut h, None, None);
            assert!(h.get("x-foo").is_none(), "{value:?}");
            assert_eq!(h["x-bar"], "2");
        }
    }

    #[test]
    fn test_client_password_reaches_the_upstream_only_in_passthrough() {
        let auth = crate::auth::AuthConfig::default();
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::Passthrough, false), &auth)
            .outbound(&mut h, None, None);
        assert_eq!(h["authorization"], "Basic YWxpY2U6cHc=");
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::Service, false), &auth).outbound(&mut h, None, None);
        assert!(h.get("authorization").is_none());
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::Service, true), &auth).outbound(&mut h, None, None);
        // gw:secret
        assert_eq!(h["authorization"], "Basic Z3c6c2VjcmV0");
    }

    #[test]
    fn test_proxy_and_run_as_name_the_authenticated_user() {
        let auth = crate::auth::AuthConfig::default();
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::Proxy, false), &auth).outbound(
            &mut h,
            Some(&alice()),
            Some("10.1.2.3".parse().unwrap()),
        );
        assert_eq!(h["x-proxy-user"], "alice");
        assert_eq!(h["x-proxy-roles"], "analyst,ops");
        // The client's address alone, not the chain it sent.
        assert_eq!(
            h.get_all("x-forwarded-for").iter().collect::<Vec<_>>(),
            ["10.1.2.3"]
        );
        assert!(h.get("x-proxy-ext-department").is_none());
        assert!(h.get("authorization").is_none());
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::RunAs, true), &auth).outbound(
            &mut h,
            Some(&alice()),
            None,
        );
        assert_eq!(h["es-security-runas-user"], "alice");
        assert_eq!(h["authorization"], "Basic Z3c6c2VjcmV0");
        assert!(h.get("x-proxy-user").is_none());
    }

    /// `auth.type: proxy` trusting `10.0.0.0/8`, or `basic` with the same (unused) list.
    fn trusting_ten(mode: AuthMode) -> crate::auth::AuthConfig {
        crate::auth::AuthConfig {
            mode,
            trusted_addresses: vec![IpCidr::parse("10.0.0.0/8").unwrap()],
            ..crate::auth::AuthConfig::default()
        }
    }

    #[test]
    fn test_forwarded_chain_is_believed_from_sluices_trusted_proxies_only() {
        let forwarded = |auth: &crate::auth::AuthConfig, user: bool, client: &str| {
            let mut h = client_headers();
            Identity::new(&config(IdentityMode::Proxy, false), auth).outbound(
                &mut h,
                user.then(alice).as_ref(),
                Some(client.parse().unwrap()),
            );
            let values: Vec<&str> = h
                .get_all("x-forwarded-for")
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            values.join(" | ")
        };
        let proxy = trusting_ten(AuthMode::Proxy);
        // From a trusted proxy: its two lines as one chain, then the proxy.
        assert_eq!(
            forwarded(&proxy, true, "10.1.2.3"),
            "10.9.9.9, 1.1.1.1, 10.1.2.3"
        );
        // From another peer, or where sluice trusts no proxy (the list is unused in `basic`):
        // the peer alone.
        assert_eq!(forwarded(&proxy, true, "192.0.2.5"), "192.0.2.5");
        assert_eq!(
            forwarded(&trusting_ten(AuthMode::Basic), true, "10.1.2.3"),
            "10.1.2.3"
        );
        // Nothing for a request without a user, as before.
        assert_eq!(forwarded(&proxy, false, "10.1.2.3"), "");
        // The other identity modes forward no chain at all.
        let mut h = client_headers();
        Identity::new(&config(IdentityMode::RunAs, true), &proxy).outbound(
            &mut h,
            Some(&alice()),
            Some("10.1.2.3".parse().unwrap()),
        );
        assert!(h.get("x-forwarded-for").is_none());
    }

    #[test]
    fn own_calls_carry_the_gateways_credentials_in_every_mode() {
        let auth = crate::auth::AuthConfig::default();
        for mode in [IdentityMode::Service, IdentityMode::Passthrough] {
            let with = Identity::new(&config(mode, true), &auth);
            assert_eq!(with.own_call()[header::AUTHORIZATION], "Basic Z3c6c2VjcmV0");
            assert!(!with.own_calls_anonymous());
            let without = Identity::new(&config(mode, false), &auth);
            assert!(without.own_call().get(header::AUTHORIZATION).is_none());
            assert!(without.own_calls_anonymous());
        }
    }

    /// A forwarded request's bytes with its header lines in a canonical order: by name, the
    /// lines of one name in the order they came (a header map groups a name's values; the
    /// raw lines keep the client's order).
    fn canonical(request: &[u8]) -> (String, Vec<String>, String) {
        let text = String::from_utf8(request.to_vec()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let mut lines = head.split("\r\n");
        let first = lines.next().unwrap().to_string();
        let mut lines: Vec<String> = lines.map(str::to_string).collect();
        lines.sort_by_key(|l| l.split(':').next().unwrap_or("").to_string());
        (first, lines, body.to_string())
    }

    proptest::proptest! {
        /// The fast lane forwards a request's header lines from its bytes
        /// ([`Identity::outbound_raw`]); the general path from its header map
        /// ([`Identity::outbound`]). Over generated requests of the lane's kind (a
        /// `Connection` header naming `keep-alive` only), every identity mode, with and without
        /// credentials, a user and a client sluice trusts as its proxy: the same headers reach
        /// the upstream.
        #[test]
        fn test_raw_lines_are_rewritten_as_a_header_map_is(
            lines in proptest::collection::vec((
                proptest::sample::select(vec![
                    "host", "content-type", "content-length", "accept", "x-custom",
                    "authorization", "proxy-authorization", "x-proxy-user", "x-proxy-roles",
                    "es-security-runas-user", "connection", "keep-alive", "te", "trailer",
                    "workloadgroupid", "x-opaque-id", "x-forwarded-for", "forwarded",
                    "x-real-ip", "x-proxy-ext-dept", "x-proxy-ext", "x-proxy-exp", "cookie",
                    "es-secondary-authorization", "x-api-key", "accept-encoding", "expect",
                ]),
                proptest::sample::select(vec![
                    "a", "Basic YWxpY2U6cHc=", "1, 2", "x;y=z", "203.0.113.7",
                    "198.51.100.2, [2001:db8::1]:443", "unknown, 192.0.2.1", "",
                ]),
                proptest::bool::ANY,
            ), 0..12),
            mode in proptest::sample::select(vec![
                IdentityMode::Service, IdentityMode::Passthrough, IdentityMode::Proxy,
                IdentityMode::RunAs,
            ]),
            creds in proptest::bool::ANY,
            user in proptest::bool::ANY,
            trusted in proptest::bool::ANY,
        ) {
            let auth = trusting_ten(if trusted { AuthMode::Proxy } else { AuthMode::None });
            let id = Identity::new(&config(mode, creds), &auth);
            let mut request = b"POST /i/_search HTTP/1.1\r\n".to_vec();
            let mut ranges = Vec::new();
            let mut map = HeaderMap::new();
            for (name, value, upper) in &lines {
                let name = if *upper { name.to_ascii_uppercase() } else { name.to_string() };
                let value = if name.eq_ignore_ascii_case("connection") { "keep-alive" } else { value };
                let start = request.len();
                request.extend_from_slice(name.as_bytes());
                let name_at = start..request.len();
                request.extend_from_slice(b": ");
                let value_start = request.len();
                request.extend_from_slice(value.as_bytes());
                ranges.push((name_at, value_start..request.len()));
                request.extend_from_slice(b"\r\n");
                map.append(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                );
            }
            let principal = user.then(alice);
            let client = Some("10.1.2.3".parse().unwrap());
            let host = HeaderValue::from_static("up:9200");
            let opaque = HeaderValue::from_static("mine;sluice:n:1");
            let mut general = map;
            id.outbound(&mut general, principal.as_ref(), client);
            general.insert("x-opaque-id", opaque.clone());
            let general = super::super::h1::write_request(
                &http::Method::POST, "/i/_search", Some(&host), None, &general, b"{}",
            ).unwrap();
            let mut raw = super::super::h1::RawHeaders::new(bytes::Bytes::from(request), ranges);
            let mut added = HeaderMap::new();
            id.outbound_raw(&mut raw, &mut added, principal.as_ref(), client);
            added.insert("x-opaque-id", opaque);
            let lane = super::super::h1::write_request(
                &http::Method::POST, "/i/_search", Some(&host), Some(&raw), &added, b"{}",
            ).unwrap();
            proptest::prop_assert_eq!(canonical(&lane), canonical(&general));
        }
    }
}
