//! The `backend.*` settings: which backend runs admitted work, and for an upstream cluster its
//! hosts, credentials, TLS, timeouts and how the client's identity is forwarded.

use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, Uri};

use crate::auth::AuthMode;
use crate::config::{ConfigError, keys};

/// How long a connection attempt to an upstream host may take when `connect_timeout` is not
/// set: long enough for a TLS handshake across a data centre, short enough that a dead host is
/// answered with a 502 before a client's own timeout (typically 30 s) fires.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the upstream may take to start answering when `request_timeout` is not set:
/// OpenSearch's low-level REST client's default socket timeout (30 s) would cut long
/// aggregations and scroll pages that clients of an existing cluster already rely on, so the
/// default is the one of OpenSearch Dashboards' `opensearch.requestTimeout` (30 s) doubled.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest any `backend.upstream.*` timeout may be: OpenSearch's own bound on how long a
/// search context may be kept (`search.max_keep_alive`, 24 h). A longer one is a typo
/// (an outside trial's `request_timeout=99999999999d` was taken, and a host that never
/// answered then held start-up for good), and deadlines computed from it stay far from the
/// clock's end.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a cancelled or abandoned search keeps its slot while the upstream still lists it
/// when `cancel_wait_timeout` is not set (`super::cancelled`): cancellation is cooperative, and
/// OpenSearch ends a cancelled search within seconds (an aggregation notices it late), so a
/// task still listed after 30 s is taken as stuck, and its slot given back with a WARN. 30 s is
/// also the shared tier's `LEASE_TTL`, how long a lost release already keeps a slot.
const DEFAULT_CANCEL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The header names OpenSearch's security plugin reads in proxy authentication
/// (`proxy.http_authenticator.config.user_header` / `roles_header` in its examples).
const DEFAULT_PROXY_USER_HEADER: &str = "x-proxy-user";
const DEFAULT_PROXY_ROLES_HEADER: &str = "x-proxy-roles";

/// `backend.upstream.ca_file`: the file, and the CA certificates read from it.
///
/// Read while the settings are validated, so a file that holds no usable certificate stops
/// start as every other bad value does (exit code 2, "invalid value … for setting …"),
/// before the node logs anything, rather than when the gateway's client is built.
#[derive(Debug, Clone)]
pub struct CaFile {
    /// The file, as the setting names it.
    pub path: PathBuf,
    /// Its certificates, as the roots the upstream's certificates are verified against.
    pub roots: rustls::RootCertStore,
}

/// Reads the CA certificates of a PEM file; the error says what is wrong with the file.
fn read_ca_file(path: &std::path::Path) -> Result<rustls::RootCertStore, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!("cannot read it as PEM ({e}): expected a PEM file of CA certificates")
        })?;
    if certs.is_empty() {
        return Err(
            "it holds no PEM certificate (no -----BEGIN CERTIFICATE----- block; an empty file \
             or a private key is none): expected the PEM file of the CA certificates that \
             signed the upstream's certificates"
                .to_string(),
        );
    }
    let mut roots = rustls::RootCertStore::empty();
    for (n, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            format!(
                "certificate {} in it is not a usable CA certificate ({e}): expected PEM CA \
                 certificates",
                n + 1
            )
        })?;
    }
    Ok(roots)
}

/// Which backend runs admitted search-class work (`backend.type`).
#[derive(Debug, Clone, Default)]
pub enum BackendConfig {
    /// The embedded tantivy engine (the default).
    #[default]
    Embedded,
    /// An existing OpenSearch or Elasticsearch cluster in front of which sluice runs as a
    /// gateway.
    Upstream(Box<UpstreamConfig>),
}

/// The `backend.upstream.*` settings.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// `backend.upstream.hosts`: each host's scheme and authority (`https://es1:9200`).
    pub hosts: Vec<Uri>,
    /// `backend.upstream.username` and `backend.upstream.password`: the gateway's own
    /// credentials on the upstream.
    pub credentials: Option<(String, String)>,
    /// `backend.upstream.ca_file`: PEM certificates of a private CA, trusted instead of the
    /// system's roots; read at start, with the other settings.
    pub ca_file: Option<CaFile>,
    /// `backend.upstream.connect_timeout`.
    pub connect_timeout: Duration,
    /// `backend.upstream.request_timeout`: until the upstream's response headers arrive, and
    /// then each wait for its body's next bytes (`streamed.rs` E2).
    pub request_timeout: Duration,
    /// `backend.upstream.identity`.
    pub identity: IdentityMode,
    /// `backend.upstream.search_threads`: the upstream's search threads in all; `None` to read
    /// them from the upstream's `_nodes/thread_pool` at start.
    pub search_threads: Option<u32>,
    /// `backend.upstream.proxy.user_header`: where `identity: proxy` names the user.
    pub proxy_user_header: HeaderName,
    /// `backend.upstream.proxy.roles_header`: where `identity: proxy` lists the user's roles.
    pub proxy_roles_header: HeaderName,
    /// `backend.upstream.fast_lane` (default `true`): searches and counts to plain-`http://`
    /// hosts take the gateway's fast lane (ARCHITECTURE.md "The fast lane"); `false` sends
    /// every request through the general path.
    pub fast_lane: bool,
    /// `backend.upstream.cancel_wait_timeout`: the longest a forwarded request that ended
    /// without its answer (cancelled, timed out, its client gone) keeps its slot and its task
    /// while the upstream still lists its tasks (`super::cancelled`).
    pub cancel_wait_timeout: Duration,
}

/// How the upstream learns who the user is (`backend.upstream.identity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityMode {
    /// Every request runs under the gateway's own credentials (or none): the upstream sees one
    /// identity. Allowed with a start-up warning when it stands for several users.
    Service,
    /// The client's own `Authorization` header is forwarded (only with `auth.type: none`:
    /// sluice then never reads the client's password).
    Passthrough,
    /// OpenSearch security's proxy authentication: the user and roles sluice authenticated go
    /// in the proxy headers, the gateway being the upstream's trusted proxy.
    Proxy,
    /// Elasticsearch's run-as: the gateway's credentials plus `es-security-runas-user`.
    RunAs,
}

impl IdentityMode {
    const ACCEPTED: &str = "expected service, passthrough, proxy or run_as";

    fn parse(v: &str) -> Option<IdentityMode> {
        match v.trim() {
            "service" => Some(IdentityMode::Service),
            "passthrough" => Some(IdentityMode::Passthrough),
            "proxy" => Some(IdentityMode::Proxy),
            "run_as" => Some(IdentityMode::RunAs),
            _ => None,
        }
    }

    /// The name `backend.upstream.identity` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityMode::Service => "service",
            IdentityMode::Passthrough => "passthrough",
            IdentityMode::Proxy => "proxy",
            IdentityMode::RunAs => "run_as",
        }
    }
}

/// Every `backend.upstream.*` key, refused when `backend.type` is `embedded` (a setting that
/// would change nothing).
const UPSTREAM_KEYS: &[&str] = &[
    keys::BACKEND_UPSTREAM_HOSTS,
    keys::BACKEND_UPSTREAM_USERNAME,
    keys::BACKEND_UPSTREAM_PASSWORD,
    keys::BACKEND_UPSTREAM_CA_FILE,
    keys::BACKEND_UPSTREAM_CONNECT_TIMEOUT,
    keys::BACKEND_UPSTREAM_REQUEST_TIMEOUT,
    keys::BACKEND_UPSTREAM_IDENTITY,
    keys::BACKEND_UPSTREAM_SEARCH_THREADS,
    keys::BACKEND_UPSTREAM_PROXY_USER_HEADER,
    keys::BACKEND_UPSTREAM_PROXY_ROLES_HEADER,
    keys::BACKEND_UPSTREAM_FAST_LANE,
    keys::BACKEND_UPSTREAM_CANCEL_WAIT_TIMEOUT,
];

/// Validates the `backend.*` settings; `auth` is the validated `auth.*` (identity modes depend
/// on whether sluice authenticates clients itself).
pub fn backend_config<'a>(
    get: &dyn Fn(&str) -> Option<(&'a str, &'a str)>,
    auth: &crate::auth::AuthConfig,
) -> Result<BackendConfig, ConfigError> {
    let invalid = |key: &str, value: &str, src: &str, expected: &str| ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        source_name: src.to_string(),
        expected: expected.to_string(),
    };
    let upstream = match get(keys::BACKEND_TYPE) {
        None => false,
        Some((v, s)) => match v.trim() {
            "embedded" => false,
            "upstream" => true,
            _ => {
                return Err(invalid(
                    keys::BACKEND_TYPE,
                    v,
                    s,
                    "expected embedded or upstream",
                ));
            }
        },
    };
    if !upstream {
        if let Some(key) = UPSTREAM_KEYS.iter().find(|k| get(k).is_some()) {
            let (v, s) = get(key).unwrap_or_default();
            return Err(invalid(
                key,
                v,
                s,
                "backend.upstream.* settings need backend.type: upstream",
            ));
        }
        return Ok(BackendConfig::Embedded);
    }
    let hosts = match get(keys::BACKEND_UPSTREAM_HOSTS) {
        None => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_HOSTS,
                "",
                "default",
                "backend.type upstream needs backend.upstream.hosts: comma-separated http:// or https:// URLs of the cluster's nodes, e.g. http://127.0.0.1:9200",
            ));
        }
        Some((v, s)) if let Some(why) = empty_host_entry(v) => {
            return Err(invalid(keys::BACKEND_UPSTREAM_HOSTS, v, s, &why));
        }
        Some((v, s)) => parse_hosts(v).ok_or_else(|| {
            invalid(
                keys::BACKEND_UPSTREAM_HOSTS,
                v,
                s,
                "expected comma-separated http:// or https:// URLs with a host, a port from 1 to 65535 if any, and no path, e.g. https://es1:9200,https://es2:9200",
            )
        })?,
    };
    // A host listed twice would have twice the others' share of the requests.
    if let Some(twice) = hosts
        .iter()
        .enumerate()
        .find_map(|(k, h)| hosts[..k].iter().find(|first| *first == h))
        && let Some((v, s)) = get(keys::BACKEND_UPSTREAM_HOSTS)
    {
        return Err(invalid(
            keys::BACKEND_UPSTREAM_HOSTS,
            v,
            s,
            &format!(
                "{} is listed twice: list each host once",
                twice.to_string().trim_end_matches('/')
            ),
        ));
    }
    let text = |key: &str| -> Result<Option<String>, ConfigError> {
        match get(key) {
            None => Ok(None),
            Some((v, s)) if v.is_empty() => Err(invalid(key, v, s, "expected a non-empty value")),
            Some((v, _)) => Ok(Some(v.to_string())),
        }
    };
    let credentials = match (
        text(keys::BACKEND_UPSTREAM_USERNAME)?,
        text(keys::BACKEND_UPSTREAM_PASSWORD)?,
    ) {
        (Some(u), Some(p)) => Some((u, p)),
        (None, None) => None,
        (Some(u), None) => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_PASSWORD,
                "",
                "default",
                &format!("backend.upstream.username [{u}] needs backend.upstream.password"),
            ));
        }
        (None, Some(_)) => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_USERNAME,
                "",
                "default",
                "backend.upstream.password needs backend.upstream.username",
            ));
        }
    };
    let ca_file = match get(keys::BACKEND_UPSTREAM_CA_FILE) {
        None => None,
        Some((v, s)) => {
            let path = PathBuf::from(v.trim());
            if v.trim().is_empty() || !path.is_file() {
                return Err(invalid(
                    keys::BACKEND_UPSTREAM_CA_FILE,
                    v,
                    s,
                    "expected the path of a readable PEM file of CA certificates",
                ));
            }
            let roots = read_ca_file(&path)
                .map_err(|why| invalid(keys::BACKEND_UPSTREAM_CA_FILE, v, s, &why))?;
            Some(CaFile { path, roots })
        }
    };
    let timeout = |key: &str, default: Duration| -> Result<Duration, ConfigError> {
        match get(key) {
            None => Ok(default),
            Some((v, s)) => sluice_wire::parse_time_value(v, key)
                .ok()
                .and_then(|t| t.duration_opt())
                .filter(|d| !d.is_zero() && *d <= MAX_TIMEOUT)
                .ok_or_else(|| {
                    invalid(
                        key,
                        v,
                        s,
                        "expected a positive time value of at most 24h such as 5s or 500ms",
                    )
                }),
        }
    };
    let connect_timeout = timeout(
        keys::BACKEND_UPSTREAM_CONNECT_TIMEOUT,
        DEFAULT_CONNECT_TIMEOUT,
    )?;
    let request_timeout = timeout(
        keys::BACKEND_UPSTREAM_REQUEST_TIMEOUT,
        DEFAULT_REQUEST_TIMEOUT,
    )?;
    let cancel_wait_timeout = timeout(
        keys::BACKEND_UPSTREAM_CANCEL_WAIT_TIMEOUT,
        DEFAULT_CANCEL_WAIT_TIMEOUT,
    )?;
    let (identity, identity_src) = match get(keys::BACKEND_UPSTREAM_IDENTITY) {
        None => (IdentityMode::Service, None),
        Some((v, s)) => (
            IdentityMode::parse(v).ok_or_else(|| {
                invalid(
                    keys::BACKEND_UPSTREAM_IDENTITY,
                    v,
                    s,
                    IdentityMode::ACCEPTED,
                )
            })?,
            Some((v, s)),
        ),
    };
    let (iv, is) = identity_src.unwrap_or((identity.as_str(), "default"));
    match identity {
        IdentityMode::Passthrough if auth.mode != AuthMode::None => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_IDENTITY,
                iv,
                is,
                "passthrough forwards the client's Authorization header and needs auth.type: none; with sluice's own authentication use proxy, run_as or service",
            ));
        }
        IdentityMode::Proxy | IdentityMode::RunAs if auth.mode == AuthMode::None => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_IDENTITY,
                iv,
                is,
                "proxy and run_as forward the user sluice authenticated and need auth.type basic or proxy",
            ));
        }
        IdentityMode::RunAs if credentials.is_none() => {
            return Err(invalid(
                keys::BACKEND_UPSTREAM_IDENTITY,
                iv,
                is,
                "run_as needs backend.upstream.username and backend.upstream.password: the user allowed to run as others",
            ));
        }
        _ => {}
    }
    let search_threads = match get(keys::BACKEND_UPSTREAM_SEARCH_THREADS) {
        None => None,
        Some((v, s)) => Some(
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| {
                    invalid(
                        keys::BACKEND_UPSTREAM_SEARCH_THREADS,
                        v,
                        s,
                        "expected a positive integer: the sum of thread_pool.search.size over the upstream's data nodes",
                    )
                })?,
        ),
    };
    let header = |key: &str, default: &'static str| -> Result<HeaderName, ConfigError> {
        match get(key) {
            None => Ok(HeaderName::from_static(default)),
            Some((v, s)) => {
                let name = HeaderName::from_bytes(v.trim().as_bytes()).map_err(|_| {
                    invalid(
                        key,
                        v,
                        s,
                        "expected an HTTP header name such as x-proxy-user",
                    )
                })?;
                match super::headers::reserved_for_identity(&name) {
                    Some(why) => Err(invalid(
                        key,
                        v,
                        s,
                        &format!(
                            "{name} cannot carry the user or its roles: {why}; use a header of its own such as x-proxy-user"
                        ),
                    )),
                    None => Ok(name),
                }
            }
        }
    };
    let proxy_user_header = header(
        keys::BACKEND_UPSTREAM_PROXY_USER_HEADER,
        DEFAULT_PROXY_USER_HEADER,
    )?;
    let proxy_roles_header = header(
        keys::BACKEND_UPSTREAM_PROXY_ROLES_HEADER,
        DEFAULT_PROXY_ROLES_HEADER,
    )?;
    // One header for both would name the user by its roles (an outside trial's alice arrived
    // as `x-proxy-user: tenant_a,readers`).
    if super::headers::same_header(&proxy_user_header, &proxy_roles_header) {
        let (key, (v, s)) = match get(keys::BACKEND_UPSTREAM_PROXY_ROLES_HEADER) {
            Some(set) => (keys::BACKEND_UPSTREAM_PROXY_ROLES_HEADER, set),
            None => (
                keys::BACKEND_UPSTREAM_PROXY_USER_HEADER,
                get(keys::BACKEND_UPSTREAM_PROXY_USER_HEADER).unwrap_or_default(),
            ),
        };
        return Err(invalid(
            key,
            v,
            s,
            "backend.upstream.proxy.user_header and backend.upstream.proxy.roles_header must be different headers",
        ));
    }
    let fast_lane = match get(keys::BACKEND_UPSTREAM_FAST_LANE) {
        None => true,
        Some((v, s)) => match v.trim() {
            "true" => true,
            "false" => false,
            _ => {
                return Err(invalid(
                    keys::BACKEND_UPSTREAM_FAST_LANE,
                    v,
                    s,
                    "expected true or false",
                ));
            }
        },
    };
    Ok(BackendConfig::Upstream(Box::new(UpstreamConfig {
        fast_lane,
        hosts,
        credentials,
        ca_file,
        connect_timeout,
        request_timeout,
        cancel_wait_timeout,
        identity,
        search_threads,
        proxy_user_header,
        proxy_roles_header,
    })))
}

/// Parses comma-separated `http(s)://host[:port][/]` URLs into scheme + authority; `None` when
/// one is not such a URL or the list is empty.
/// Why a hosts list with an empty entry (`http://a:9200,`, `a,,b`) is refused, naming the
/// entry's position; `None` when no entry is empty, or when the whole value is (which
/// [`parse_hosts`] refuses as naming no host). An empty entry is most often a host left out
/// by an edit or a template, so it is not skipped silently; spaces around entries are fine.
fn empty_host_entry(v: &str) -> Option<String> {
    if v.trim().is_empty() {
        return None;
    }
    let entries: Vec<&str> = v.split(',').collect();
    let empty = entries.iter().position(|e| e.trim().is_empty())?;
    Some(format!(
        "entry {} of {} is empty: list each host once, separated by single commas, with no comma before the first or after the last, e.g. https://es1:9200,https://es2:9200",
        empty + 1,
        entries.len()
    ))
}

fn parse_hosts(v: &str) -> Option<Vec<Uri>> {
    let mut hosts = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let uri: Uri = part.parse().ok()?;
        let scheme = uri.scheme_str()?;
        if !matches!(scheme, "http" | "https")
            || uri.query().is_some()
            || !matches!(uri.path(), "" | "/")
        {
            return None;
        }
        let authority = uri.authority()?.clone();
        if authority.host().is_empty() || authority.as_str().contains('@') {
            return None;
        }
        // A port written must be one (`http::Uri` takes any digits, and `:99999` reached
        // the connector as something else).
        let after_host = &authority.as_str()[authority.as_str().rfind(']').unwrap_or(0)..];
        if let Some((_, port)) = after_host.rsplit_once(':')
            && port.parse::<u16>().ok().filter(|p| *p > 0).is_none()
        {
            return None;
        }
        hosts.push(
            Uri::builder()
                .scheme(scheme)
                .authority(authority)
                .path_and_query("/")
                .build()
                .ok()?,
        );
    }
    (!hosts.is_empty()).then_some(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, gather};

    fn load(flags: &[&str]) -> Result<Config, ConfigError> {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        Config::from_raw(&gather(None, std::iter::empty(), &flags)?)
    }

    fn upstream(flags: &[&str]) -> UpstreamConfig {
        match load(flags).unwrap().backend {
            BackendConfig::Upstream(u) => *u,
            BackendConfig::Embedded => panic!("embedded"),
        }
    }

    fn err(flags: &[&str]) -> String {
        load(flags).unwrap_err().to_string()
    }

    #[test]
    fn test_backend_defaults_to_embedded_and_upstream_has_defaults() {
        assert!(matches!(
            load(&[]).unwrap().backend,
            BackendConfig::Embedded
        ));
        let u = upstream(&[
            "backend.type=upstream",
            "backend.upstream.hosts=http://a:9200,https://b",
        ]);
        assert_eq!(u.hosts.len(), 2);
        assert_eq!(u.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert_eq!(u.request_timeout, DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(u.cancel_wait_timeout, DEFAULT_CANCEL_WAIT_TIMEOUT);
        assert!(u.fast_lane);
        assert_eq!(u.identity, IdentityMode::Service);
        assert!(u.credentials.is_none());
        let u = upstream(&[
            "backend.type=upstream",
            "backend.upstream.hosts=http://a:9200",
            "backend.upstream.connect_timeout=250ms",
            "backend.upstream.request_timeout=2m",
            "backend.upstream.cancel_wait_timeout=5s",
            "backend.upstream.username=gw",
            "backend.upstream.password=pw",
            "backend.upstream.identity=passthrough",
        ]);
        assert_eq!(u.connect_timeout, Duration::from_millis(250));
        assert_eq!(u.request_timeout, Duration::from_secs(120));
        assert_eq!(u.cancel_wait_timeout, Duration::from_secs(5));
        assert_eq!(u.credentials, Some(("gw".into(), "pw".into())));
        assert_eq!(u.identity, IdentityMode::Passthrough);
    }

    #[test]
    fn test_a_ca_file_without_a_usable_certificate_stops_start_naming_why() {
        let dir = tempfile::tempdir().unwrap();
        let key_only =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let bad_der = "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n";
        let bad_base64 = "-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n";
        for (name, text, why) in [
            (
                "garbage.pem",
                "this is not PEM at all\n",
                "holds no PEM certificate",
            ),
            ("empty.pem", "", "holds no PEM certificate"),
            ("key.pem", key_only, "holds no PEM certificate"),
            (
                "der.pem",
                bad_der,
                "certificate 1 in it is not a usable CA certificate",
            ),
            ("b64.pem", bad_base64, "cannot read it as PEM"),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let e = err(&[
                "backend.type=upstream",
                "backend.upstream.hosts=https://a",
                &format!("backend.upstream.ca_file={}", path.display()),
            ]);
            let shape = format!(
                "invalid value [{}] for setting [backend.upstream.ca_file]",
                path.display()
            );
            assert!(e.starts_with(&shape) && e.contains(why), "{name}: {e}");
        }
    }

    #[test]
    fn test_an_empty_host_entry_stops_start_naming_its_position() {
        let hosts = |v: &str| {
            [
                "backend.type=upstream".to_string(),
                format!("backend.upstream.hosts={v}"),
            ]
        };
        for (v, entry) in [
            ("http://a:9200,", "entry 2 of 2 is empty"),
            ("http://a,,http://b", "entry 2 of 3 is empty"),
            (",http://a", "entry 1 of 2 is empty"),
            ("http://a, ,http://b", "entry 2 of 3 is empty"),
        ] {
            let [t, h] = hosts(v);
            let e = err(&[&t, &h]);
            assert!(
                e.starts_with(&format!(
                    "invalid value [{v}] for setting [backend.upstream.hosts]"
                )) && e.contains(entry)
                    && e.contains("separated by single commas"),
                "{v}: {e}"
            );
        }
        // Spaces around entries are no empty entry.
        let [t, h] = hosts("http://a:9200 , http://b:9200");
        assert_eq!(upstream(&[&t, &h]).hosts.len(), 2);
    }

    #[test]
    fn test_bad_backend_values_stop_start_naming_the_key() {
        let e = err(&["backend.type=remote"]);
        assert!(
            e.contains("[backend.type]") && e.contains("embedded or upstream"),
            "{e}"
        );
        let e = err(&["backend.type=upstream"]);
        assert!(e.contains("[backend.upstream.hosts]"), "{e}");
        let e = err(&["backend.type=upstream", "backend.upstream.hosts=es1:9200"]);
        assert!(
            e.contains("[backend.upstream.hosts]") && e.contains("http://"),
            "{e}"
        );
        let e = err(&["backend.upstream.hosts=http://a"]);
        assert!(
            e.contains("[backend.upstream.hosts]") && e.contains("backend.type: upstream"),
            "{e}"
        );
        let base = ["backend.type=upstream", "backend.upstream.hosts=http://a"];
        let with = |extra: &str| err(&[base[0], base[1], extra]);
        let e = with("backend.upstream.connect_timeout=0s");
        assert!(e.contains("[backend.upstream.connect_timeout]"), "{e}");
        let e = with("backend.upstream.request_timeout=soon");
        assert!(e.contains("[backend.upstream.request_timeout]"), "{e}");
        let e = with("backend.upstream.cancel_wait_timeout=-1");
        assert!(e.contains("[backend.upstream.cancel_wait_timeout]"), "{e}");
        let e = with("backend.upstream.request_timeout=99999999999d");
        assert!(
            e.contains("[backend.upstream.request_timeout]") && e.contains("24h"),
            "{e}"
        );
        let e = with("backend.upstream.connect_timeout=25h");
        assert!(e.contains("[backend.upstream.connect_timeout]"), "{e}");
        upstream(&[base[0], base[1], "backend.upstream.request_timeout=24h"]);
        let e = err(&[
            base[0],
            "backend.upstream.hosts=http://a:1,http://b,HTTP://A:1/",
        ]);
        assert!(
            e.contains("[backend.upstream.hosts]") && e.contains("http://a:1 is listed twice"),
            "{e}"
        );
        let e = with("backend.upstream.fast_lane=maybe");
        assert!(
            e.contains("[backend.upstream.fast_lane]") && e.contains("true or false"),
            "{e}"
        );
        let e = with("backend.upstream.ca_file=/nonexistent/ca.pem");
        assert!(e.contains("[backend.upstream.ca_file]"), "{e}");
        let e = with("backend.upstream.username=gw");
        assert!(e.contains("[backend.upstream.password]"), "{e}");
        let e = with("backend.upstream.search_threads=0");
        assert!(e.contains("[backend.upstream.search_threads]"), "{e}");
        let e = with("backend.upstream.identity=kerberos");
        assert!(
            e.contains("[backend.upstream.identity]") && e.contains("run_as"),
            "{e}"
        );
        // proxy and run_as need sluice's own authentication; passthrough needs none.
        let e = with("backend.upstream.identity=proxy");
        assert!(
            e.contains("[backend.upstream.identity]") && e.contains("auth.type"),
            "{e}"
        );
        let e = err(&[
            base[0],
            base[1],
            "backend.upstream.identity=passthrough",
            "auth.type=basic",
        ]);
        assert!(
            e.contains("[backend.upstream.identity]") && e.contains("auth.type: none"),
            "{e}"
        );
        let e = err(&[
            base[0],
            base[1],
            "backend.upstream.identity=run_as",
            "auth.type=basic",
        ]);
        assert!(e.contains("backend.upstream.username"), "{e}");
    }

    #[test]
    fn test_proxy_header_names_the_gateway_frames_writes_or_strips_are_refused() {
        let base = [
            "backend.type=upstream",
            "backend.upstream.hosts=http://a",
            "auth.type=basic",
            "backend.upstream.identity=proxy",
        ];
        let with = |extra: &[&str]| {
            let mut flags = base.to_vec();
            flags.extend_from_slice(extra);
            load(&flags).map(|_| ()).map_err(|e| e.to_string())
        };
        for key in ["user_header", "roles_header"] {
            for name in [
                "transfer-encoding",
                "Content-Length",
                "connection",
                "host",
                "te",
                "upgrade",
                "keep-alive",
                "trailer",
                "expect",
                "authorization",
                "x-opaque-id",
                "x-forwarded-for",
                "X_Forwarded_For",
                "forwarded",
                "x-real-ip",
                "es-security-runas-user",
                "workloadGroupId",
                "x-proxy-ext-tenant",
                "cookie",
                "proxy-authorization",
                "securitytenant",
            ] {
                let setting = format!("backend.upstream.proxy.{key}={name}");
                let e = with(&[&setting]).unwrap_err();
                assert!(
                    e.contains(&format!("[backend.upstream.proxy.{key}]"))
                        && e.contains("cannot carry the user"),
                    "{setting}: {e}"
                );
            }
        }
        // One header for both: refused, naming the key set.
        let e = with(&["backend.upstream.proxy.roles_header=x-proxy-user"]).unwrap_err();
        assert!(e.contains("[backend.upstream.proxy.roles_header]"), "{e}");
        let e = with(&["backend.upstream.proxy.user_header=X_PROXY_ROLES"]).unwrap_err();
        assert!(e.contains("[backend.upstream.proxy.user_header]"), "{e}");
        // Headers of their own are fine.
        with(&[
            "backend.upstream.proxy.user_header=x-remote-user",
            "backend.upstream.proxy.roles_header=x-remote-roles",
        ])
        .unwrap();
    }

    #[test]
    fn test_hosts_accept_http_and_https_urls_only() {
        let h = parse_hosts("http://a:9200, https://b:9243/").unwrap();
        assert_eq!(h[0].to_string(), "http://a:9200/");
        assert_eq!(h[1].to_string(), "https://b:9243/");
        assert!(parse_hosts("").is_none());
        assert!(parse_hosts("a:9200").is_none());
        assert!(parse_hosts("ftp://a").is_none());
        assert!(parse_hosts("http://a/x").is_none());
        assert!(parse_hosts("http://u:p@a").is_none());
        // Ports that are none.
        for bad in [
            "http://a:99999",
            "http://a:0",
            "http://a:",
            "http://[::1]:70000",
        ] {
            assert!(parse_hosts(bad).is_none(), "{bad}");
        }
        assert!(parse_hosts("http://[::1]:9200").is_some());
        assert!(parse_hosts("http://[::1]").is_some());
        assert!(parse_hosts("http://a:65535").is_some());
    }
}
