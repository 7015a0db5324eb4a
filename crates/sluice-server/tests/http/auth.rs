//! Authentication over HTTP: `auth.type: basic` against a users file, trusted-proxy headers
//! honoured only from trusted peers, admin roles for `PUT /_cluster/settings`, and the
//! `sluice users add` command end to end.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::{TestNode, assert_error};
use serde_json::{Value, json};
use sluice_server::auth::add_user;

/// Writes a users file with alice (analyst, admin) and bob (analyst) into `dir`.
fn users_file(dir: &Path) -> PathBuf {
    let path = dir.join("config/users.yml");
    add_user(
        &path,
        "alice",
        "alice-pw",
        &["analyst".into(), "admin".into()],
        false,
    )
    .expect("add alice");
    add_user(&path, "bob", "bob-pw", &["analyst".into()], false).expect("add bob");
    path
}

async fn send(
    node: &TestNode,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    basic: Option<(&str, &str)>,
    body: Option<Value>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut rb = node.client.request(m, node.url(path));
    for (k, v) in headers {
        rb = rb.header(*k, *v);
    }
    if let Some((u, p)) = basic {
        rb = rb.basic_auth(u, Some(p));
    }
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = rb.send().await.expect("request sent");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    )
}

fn settings_update() -> Value {
    json!({"persistent": {"search.max_buckets": 1234}})
}

async fn basic_node(tmp: &tempfile::TempDir) -> TestNode {
    let users = users_file(tmp.path());
    let data = tmp.path().join("data");
    let users_setting = format!("auth.users_file={}", users.display());
    TestNode::start_on(&data, &["auth.type=basic", &users_setting]).await
}

#[tokio::test]
async fn test_basic_auth_accepts_valid_credentials_only() {
    let tmp = tempfile::tempdir().unwrap();
    let node = basic_node(&tmp).await;

    let (status, body, headers) = send(&node, "GET", "/_search", &[], None, None).await;
    assert_error(&(status, body.clone()), 401, "security_exception");
    assert_eq!(
        headers.get("www-authenticate").map(|v| v.to_str().unwrap()),
        Some("Basic realm=\"sluice\"")
    );
    assert_eq!(
        body["error"]["reason"],
        "missing authentication credentials for REST request [/_search]"
    );
    assert_eq!(
        body["error"]["root_cause"][0]["type"], "security_exception",
        "{body}"
    );

    let (status, body, _) = send(&node, "GET", "/", &[], Some(("alice", "alice-pw")), None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["cluster_name"].is_string(), "{body}");
    // Again, now from the verification cache.
    let (status, _, _) = send(&node, "GET", "/", &[], Some(("alice", "alice-pw")), None).await;
    assert_eq!(status, 200);

    let (status, body, headers) =
        send(&node, "GET", "/", &[], Some(("alice", "wrong")), None).await;
    assert_error(&(status, body.clone()), 401, "security_exception");
    assert!(headers.contains_key("www-authenticate"));
    assert_eq!(
        body["error"]["reason"],
        "unable to authenticate user [alice] for REST request [/]"
    );
    assert!(!body.to_string().contains("wrong"), "{body}");

    let (status, body, _) = send(&node, "GET", "/", &[], Some(("mallory", "alice-pw")), None).await;
    assert_error(&(status, body), 401, "security_exception");

    // Unknown routes are behind authentication too: no route enumeration without credentials.
    let (status, body, _) = send(&node, "GET", "/_no_such_api", &[], None, None).await;
    assert_error(&(status, body), 401, "security_exception");

    // Another user's password does not work.
    let (status, _, _) = send(&node, "GET", "/", &[], Some(("bob", "alice-pw")), None).await;
    assert_eq!(status, 401);

    // Credentials in another scheme (an Elasticsearch client's API key, a token), or a Basic
    // value that does not decode, are said to be so, not called missing.
    for (value, says) in [
        (
            "ApiKey VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw==",
            "[ApiKey] scheme is not supported",
        ),
        ("Bearer abc.def", "[Bearer] scheme is not supported"),
        ("Basic !!!", "Basic value is not base64 of user:password"),
    ] {
        let (status, body, _) =
            send(&node, "GET", "/", &[("authorization", value)], None, None).await;
        assert_error(&(status, body.clone()), 401, "security_exception");
        let reason = body["error"]["reason"].as_str().unwrap();
        assert!(
            reason.starts_with(
                "unable to authenticate with provided credentials for REST request [/]"
            ) && reason.contains(says),
            "{value}: {body}"
        );
        assert!(
            !reason.contains("abc.def") && !reason.contains("VnVh"),
            "{body}"
        );
    }

    // Proxy headers mean nothing in basic mode.
    let (status, _, _) = send(
        &node,
        "GET",
        "/",
        &[("x-proxy-user", "alice"), ("x-proxy-roles", "admin")],
        None,
        None,
    )
    .await;
    assert_eq!(status, 401);
    node.stop().await;
}

#[tokio::test]
async fn test_admin_role_required_for_cluster_settings_update() {
    let tmp = tempfile::tempdir().unwrap();
    let node = basic_node(&tmp).await;

    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        Some(("bob", "bob-pw")),
        Some(settings_update()),
    )
    .await;
    assert_error(&(status, body.clone()), 403, "security_exception");
    assert_eq!(
        body["error"]["reason"],
        "no permissions for [cluster:admin/settings/update] and User [name=bob, backend_roles=[analyst], requestedTenant=null]"
    );
    // Nothing changed.
    let (status, body, _) = send(
        &node,
        "GET",
        "/_cluster/settings?flat_settings=true",
        &[],
        Some(("bob", "bob-pw")),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["persistent"], json!({}), "{body}");

    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        Some(("alice", "alice-pw")),
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["acknowledged"], true);
    node.stop().await;
}

#[tokio::test]
async fn test_admin_roles_setting_names_the_admin_roles() {
    let tmp = tempfile::tempdir().unwrap();
    let users = users_file(tmp.path());
    let users_setting = format!("auth.users_file={}", users.display());
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &[
            "auth.type=basic",
            &users_setting,
            "auth.admin_roles=analyst",
        ],
    )
    .await;
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        Some(("bob", "bob-pw")),
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    node.stop().await;
}

#[tokio::test]
async fn test_proxy_headers_from_trusted_peer_authenticate() {
    let tmp = tempfile::tempdir().unwrap();
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.0/8",
        ],
    )
    .await;
    let (status, body, headers) = send(&node, "GET", "/", &[], None, None).await;
    assert_error(&(status, body), 401, "security_exception");
    assert!(!headers.contains_key("www-authenticate"));

    let (status, body, _) = send(&node, "GET", "/", &[("x-proxy-user", "carol")], None, None).await;
    assert_eq!(status, 200, "{body}");

    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[
            ("x-proxy-user", "carol"),
            ("x-proxy-roles", "analyst, viewer"),
        ],
        None,
        Some(settings_update()),
    )
    .await;
    assert_error(&(status, body.clone()), 403, "security_exception");
    assert!(
        body["error"]["reason"]
            .as_str()
            .unwrap()
            .contains("name=carol, backend_roles=[analyst, viewer]"),
        "{body}"
    );
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[
            ("x-proxy-user", "carol"),
            ("x-proxy-roles", "analyst,admin"),
        ],
        None,
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    node.stop().await;
}

/// A trusted proxy that adds its identity headers to the client's instead of replacing them
/// would let the client choose the user or add roles: a request naming the user or the roles
/// header twice is a 401, whatever the lines say, and nothing it asked for is done.
#[tokio::test]
async fn test_identity_headers_sent_twice_are_not_believed() {
    let tmp = tempfile::tempdir().unwrap();
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.0/8",
        ],
    )
    .await;
    let twice: [&[(&str, &str)]; 4] = [
        &[
            ("x-proxy-user", "carol"),
            ("x-proxy-roles", "analyst"),
            ("x-proxy-roles", "admin"),
        ],
        &[
            ("x-proxy-user", "carol"),
            ("x-proxy-roles", "admin"),
            ("x-proxy-roles", "analyst"),
        ],
        &[
            ("x-proxy-user", "root"),
            ("x-proxy-user", "carol"),
            ("x-proxy-roles", "admin"),
        ],
        &[
            ("x-proxy-user", "carol"),
            ("X-Proxy-User", "carol"),
            ("x-proxy-roles", "admin"),
        ],
    ];
    for headers in twice {
        let (status, body, _) = send(
            &node,
            "PUT",
            "/_cluster/settings",
            headers,
            None,
            Some(settings_update()),
        )
        .await;
        assert_error(&(status, body.clone()), 401, "security_exception");
        assert!(
            body["error"]["reason"]
                .as_str()
                .unwrap()
                .contains("was sent more than once"),
            "{headers:?}: {body}"
        );
    }
    let (status, body, _) = send(
        &node,
        "GET",
        "/_cluster/settings?flat_settings=true",
        &[("x-proxy-user", "root"), ("x-proxy-roles", "admin")],
        None,
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["persistent"], json!({}), "nothing was changed: {body}");
    node.stop().await;
}

#[tokio::test]
async fn test_proxy_headers_from_untrusted_peer_are_ignored() {
    let tmp = tempfile::tempdir().unwrap();
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=10.0.0.0/8, 192.168.1.1",
        ],
    )
    .await;
    let spoofed = [("x-proxy-user", "alice"), ("x-proxy-roles", "admin")];
    let (status, body, _) = send(&node, "GET", "/", &spoofed, None, None).await;
    assert_error(&(status, body.clone()), 401, "security_exception");
    assert_eq!(
        body["error"]["reason"],
        "missing authentication credentials for REST request [/]"
    );
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &spoofed,
        None,
        Some(settings_update()),
    )
    .await;
    assert_error(&(status, body), 401, "security_exception");
    node.stop().await;
}

#[tokio::test]
async fn test_custom_proxy_header_names() {
    let tmp = tempfile::tempdir().unwrap();
    let node = TestNode::start_on(
        tmp.path(),
        &[
            "auth.type=proxy",
            "auth.proxy.trusted_addresses=127.0.0.1",
            "auth.proxy.user_header=x-forwarded-user",
            "auth.proxy.roles_header=x-forwarded-groups",
        ],
    )
    .await;
    let (status, _, _) = send(&node, "GET", "/", &[("x-proxy-user", "carol")], None, None).await;
    assert_eq!(status, 401, "default header names no longer count");
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[
            ("x-forwarded-user", "carol"),
            ("x-forwarded-groups", "admin"),
        ],
        None,
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    node.stop().await;
}

#[tokio::test]
async fn test_node_refuses_users_file_with_plaintext_password() {
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.yml");
    std::fs::write(
        &users,
        "users:\n  - username: alice\n    password: hunter2\n    roles: [admin]\n",
    )
    .unwrap();
    let users_setting = format!("auth.users_file={}", users.display());
    let config = common::config(
        &tmp.path().join("data"),
        &["auth.type=basic", &users_setting],
    );
    let Err(e) = sluice_server::server::Node::start(config).await else {
        panic!("a node started with a plaintext password in its users file");
    };
    let msg = format!("{e:#}");
    assert!(msg.contains("plaintext"), "{msg}");
    assert!(!msg.contains("hunter2"), "{msg}");

    let missing = format!("auth.users_file={}", tmp.path().join("nope.yml").display());
    let config = common::config(&tmp.path().join("data2"), &["auth.type=basic", &missing]);
    let Err(e) = sluice_server::server::Node::start(config).await else {
        panic!("a node started in basic mode without a users file");
    };
    assert!(format!("{e:#}").contains("sluice users add"), "{e:#}");
}

fn users_add(
    file: &Path,
    username: &str,
    roles: &str,
    password: &str,
    extra: &[&str],
) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["users", "add", "--file"])
        .arg(file)
        .args(["--username", username, "--roles", roles, "--password-stdin"])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sluice users add");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    child.wait_with_output().expect("sluice users add finishes")
}

#[tokio::test]
async fn test_users_add_command_creates_a_working_login() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config/users.yml");
    let out = users_add(&file, "dora", "analyst,admin", "s3cret pass", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("$argon2id$") && !text.contains("s3cret"),
        "{text}"
    );

    let out = users_add(&file, "dora", "analyst", "other", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already exists") && err.contains("--update"),
        "{err}"
    );

    let out = users_add(&file, "eve", "analyst", "eve-pw", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let users_setting = format!("auth.users_file={}", file.display());
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &["auth.type=basic", &users_setting],
    )
    .await;
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        Some(("dora", "s3cret pass")),
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = send(&node, "GET", "/", &[], Some(("eve", "eve-pw")), None).await;
    assert_eq!(status, 200);
    let (status, _, _) = send(&node, "GET", "/", &[], Some(("dora", "other")), None).await;
    assert_eq!(status, 401);
    node.stop().await;

    // --update replaces the password and roles.
    let out = users_add(&file, "dora", "analyst", "new-pw", &["--update"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let node = TestNode::start_on(
        &tmp.path().join("data"),
        &["auth.type=basic", &users_setting],
    )
    .await;
    let (status, _, _) = send(&node, "GET", "/", &[], Some(("dora", "s3cret pass")), None).await;
    assert_eq!(status, 401);
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        Some(("dora", "new-pw")),
        Some(settings_update()),
    )
    .await;
    assert_error(&(status, body), 403, "security_exception");
    node.stop().await;
}

#[tokio::test]
async fn test_no_auth_needs_no_credentials() {
    let node = TestNode::start().await;
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_cluster/settings",
        &[],
        None,
        Some(settings_update()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    node.stop().await;
}

#[tokio::test]
async fn test_username_throttle_without_authentication_after_restart_is_shown_not_silent() {
    // A per-username throttle is valid only with authentication; a node restarted with
    // `auth.type: none` keeps the group, but its throttle cannot apply: `_wlm/stats` says so
    // on the group (and the node logs a WARN at start and at every view install).
    let tmp = tempfile::tempdir().unwrap();
    let proxy = [
        "auth.type=proxy",
        "auth.proxy.trusted_addresses=127.0.0.0/8",
    ];
    let node = TestNode::start_on(tmp.path(), &proxy).await;
    let admin = [("x-proxy-user", "root"), ("x-proxy-roles", "admin")];
    let group = json!({"name": "per_user", "resiliency_mode": "enforced",
        "resource_limits": {"memory": 0.1},
        "throttling": {"attribute": "username", "node_limit": 1}});
    let (status, body, _) = send(
        &node,
        "PUT",
        "/_wlm/workload_group",
        &admin,
        None,
        Some(group),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let id = body["_id"].as_str().unwrap().to_string();
    let (_, stats, _) = send(&node, "GET", "/_wlm/stats", &admin, None, None).await;
    let node_id = stats
        .as_object()
        .unwrap()
        .keys()
        .find(|k| !k.starts_with('_') && *k != "cluster_name")
        .unwrap()
        .clone();
    assert!(
        stats[&node_id]["workload_groups"][&id]
            .get("warnings")
            .is_none(),
        "{stats}"
    );
    node.stop().await;

    let node = TestNode::start_on(tmp.path(), &[]).await;
    let (status, stats, _) = send(&node, "GET", "/_wlm/stats", &[], None, None).await;
    assert_eq!(status, 200, "{stats}");
    let warnings = &stats[&node_id]["workload_groups"][&id]["warnings"];
    let text = warnings[0].as_str().unwrap_or_default();
    assert!(
        text.contains("per_user")
            && text.contains("auth.type is none")
            && text.contains("username"),
        "{stats}"
    );
    node.stop().await;
}

/// A refused request's answer reaches its client even when the client sends its whole large
/// body before it reads (as Python's `http.client` does): the node reads the rest and closes
/// only after the client has had the answer (`http/leaving.rs`, G4), as OpenSearch has the
/// whole request before it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_a_large_body_refused_before_it_was_read_gets_its_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tmp = tempfile::tempdir().unwrap();
    let node = basic_node(&tmp).await;
    // 8 MB of bulk lines: far more than the socket buffers hold, so most of it is still on its
    // way when the 401 is answered.
    let line =
        "{\"index\":{\"_index\":\"big\"}}\n{\"f\":\"0123456789012345678901234567890123456789\"}\n";
    let body = line.repeat(8 * 1024 * 1024 / line.len());
    for credentials in ["authorization: Basic YWxpY2U6d3Jvbmc=\r\n", ""] {
        for round in 0..3 {
            let request = format!(
                "POST /_bulk HTTP/1.1\r\nhost: sluice\r\n{credentials}\
                 content-type: application/x-ndjson\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let mut stream = tokio::net::TcpStream::connect(node.addr).await.unwrap();
            stream
                .write_all(request.as_bytes())
                .await
                .unwrap_or_else(|e| panic!("round {round}: the body could not be sent: {e}"));
            let mut answer = Vec::new();
            let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
                let mut chunk = [0u8; 4096];
                loop {
                    match stream.read(&mut chunk).await {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            answer.extend_from_slice(&chunk[..n]);
                            if String::from_utf8_lossy(&answer).contains("\"status\":401}") {
                                return Ok(());
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
            })
            .await
            .expect("an answer within 30 s");
            let answer = String::from_utf8_lossy(&answer);
            assert!(read.is_ok(), "round {round}: {read:?} after {answer:?}");
            assert!(
                answer.starts_with("HTTP/1.1 401"),
                "round {round}: {answer}"
            );
        }
    }
    node.stop().await;
}
