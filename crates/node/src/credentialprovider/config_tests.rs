use super::*;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn dockerconfigjson_with_auth_or_username_password() {
    let data = format!(
        r#"{{"auths": {{
            "reg-a.io": {{"auth": "{}"}},
            "reg-b.io": {{"username": "bob", "password": "pw:with:colons", "email": "b@x"}},
            "reg-c.io": {{"Username": "carol", "PASSWORD": "c"}},
            "reg-d.io": {{"username": "ignored", "auth": "{}", "unknown": 1}}
        }}, "HttpHeaders": {{"X": "y"}}}}"#,
        b64("alice:a:b"),
        b64("dave:d")
    );
    let cfg = parse_docker_config_json(data.as_bytes()).unwrap();
    let get = |k: &str| {
        let e = &cfg[k];
        (e.username.as_str(), e.password.as_str())
    };
    assert_eq!(get("reg-a.io"), ("alice", "a:b"));
    assert_eq!(get("reg-b.io"), ("bob", "pw:with:colons"));
    assert_eq!(cfg["reg-b.io"].email, "b@x");
    assert_eq!(get("reg-c.io"), ("carol", "c"));
    assert_eq!(get("reg-d.io"), ("dave", "d"));
}

#[test]
fn auth_padding_as_go() {
    // Unpadded data decodes without padding; padded with; CR/LF skipped.
    let unpadded = b64("u:p1").trim_end_matches('=').to_owned();
    assert!(!unpadded.ends_with('='));
    let cfg =
        parse_dockercfg(format!(r#"{{"r.io": {{"auth": "{unpadded}"}}}}"#).as_bytes()).unwrap();
    assert_eq!(cfg["r.io"].password, "p1");
    let padded = b64("u:p1");
    let wrapped = format!("{}\\n{}", &padded[..2], &padded[2..]);
    let cfg =
        parse_dockercfg(format!(r#"{{"r.io": {{"auth": "{wrapped}"}}}}"#).as_bytes()).unwrap();
    assert_eq!(cfg["r.io"].username, "u");
}

#[test]
fn legacy_dockercfg() {
    let data = format!(
        r#"{{"https://index.docker.io/v1/": {{"auth": "{}", "email": "e"}}}}"#,
        b64("hub:pw")
    );
    let cfg = parse_dockercfg(data.as_bytes()).unwrap();
    assert_eq!(cfg["https://index.docker.io/v1/"].username, "hub");
    // A missing or null `auths` is an empty config, not an error.
    assert!(parse_docker_config_json(b"{}").unwrap().is_empty());
    assert!(
        parse_docker_config_json(br#"{"auths": null}"#)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn bad_input_names_the_field_never_the_value() {
    let secret = "hunter2-SECRET";
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            format!(r#"{{"auths": {{"r.io": {{"auth": "{secret}!!"}}}}}}"#).into_bytes(),
            "auths[\"r.io\"].auth: illegal base64 data at input byte",
        ),
        (
            format!(r#"{{"auths": {{"r.io": {{"auth": "{}"}}}}}}"#, b64(secret)).into_bytes(),
            "auths[\"r.io\"].auth: unable to parse auth field, must be formatted as base64(username:password)",
        ),
        (
            br#"{"auths": {"r.io": {"password": 12}}}"#.to_vec(),
            "auths[\"r.io\"].password: expected a string",
        ),
        (
            format!(r#"{{"auths": ["{secret}"]}}"#).into_bytes(),
            "auths: expected an object",
        ),
        (
            format!(r#""{secret}""#).into_bytes(),
            "the top level: expected an object",
        ),
        (
            format!(r#"{{"auths": {{"r.io": {{"auth": "{secret}"#).into_bytes(),
            "invalid JSON: unexpected end of JSON input",
        ),
        (
            format!(r#"{{"auths": {{"r.io": "{secret}"}}}}"#).into_bytes(),
            "auths[\"r.io\"]: expected an object",
        ),
        (b"\xff\xfe".to_vec(), "invalid JSON: syntax error"),
    ];
    for (data, want) in cases {
        let err = parse_docker_config_json(&data).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        assert!(!err.contains("hunter2"), "credential in error: {err}");
    }
    let invalid_utf8 = base64::engine::general_purpose::STANDARD.encode(b"u:\xff\xfe");
    let err = parse_dockercfg(format!(r#"{{"r.io": {{"auth": "{invalid_utf8}"}}}}"#).as_bytes())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "[\"r.io\"].auth: decoded credentials are not valid UTF-8"
    );
}

#[test]
fn hostile_documents_fail_cleanly_or_parse_in_bounded_time() {
    // Deep nesting: serde_json's recursion limit, not a stack overflow.
    let deep = "[".repeat(100_000);
    assert!(
        parse_docker_config_json(deep.as_bytes())
            .unwrap_err()
            .to_string()
            .starts_with("invalid JSON")
    );
    // 50,000 entries (~3 MB, beyond the API server's 1 MiB Secret limit): parsed, no blow-up.
    let mut s = String::from(r#"{"auths": {"#);
    for i in 0..50_000 {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!(r#""r{i}.io": {{"auth": "{}"}}"#, b64("u:p")));
    }
    s.push_str("}}");
    let start = std::time::Instant::now();
    assert_eq!(
        parse_docker_config_json(s.as_bytes()).unwrap().len(),
        50_000
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    // A hostile key is shown escaped and bounded.
    let key = format!("{}\r\nX-Injected: 1", "k".repeat(1000));
    let doc = serde_json::json!({"auths": {key: {"auth": 5}}}).to_string();
    let err = parse_docker_config_json(doc.as_bytes())
        .unwrap_err()
        .to_string();
    assert!(
        err.len() < 300 && !err.contains('\n') && !err.contains('\r'),
        "{err}"
    );
}

#[test]
fn header_injection_characters_are_kept_verbatim() {
    // Credentials go to the runtime, which base64-encodes them into the Authorization
    // header: CR/LF cannot inject headers, and changing them would break real passwords.
    let data = serde_json::json!({"auths": {"r.io": {"username": "u\r\nX-Evil: 1", "password": "p\r\n\u{0}"}}});
    let cfg = parse_docker_config_json(data.to_string().as_bytes()).unwrap();
    assert_eq!(cfg["r.io"].username, "u\r\nX-Evil: 1");
    assert_eq!(cfg["r.io"].password, "p\r\n\u{0}");
    let shown = format!("{:?}", cfg["r.io"]);
    assert!(!shown.contains("Evil"), "{shown}");
}
