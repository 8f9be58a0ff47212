//! Tests for `core::env`: upstream's expansion table and environment generation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource, PodSpec,
    ResourceRequirements, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;

fn map_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Every case of upstream `expand_test.go` (`doExpansionTest`), run against both the single and
/// the dual mapping contexts upstream uses.
#[test]
fn expansion_table_matches_upstream() {
    let cases: &[(&str, &str, &str)] = &[
        ("whole string", "$(VAR_A)", "A"),
        ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
        ("beginning", "$(VAR_A)-1", "A-1"),
        ("middle", "___$(VAR_B)___", "___B___"),
        ("end", "___$(VAR_C)", "___C"),
        ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
        ("escape & expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        (
            "compound escape",
            "$$(VAR_A)_$$(VAR_B)",
            "$(VAR_A)_$(VAR_B)",
        ),
        ("mixed in escapes", "f000-$$VAR_A", "f000-$VAR_A"),
        ("backslash escape ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
        (
            "backslash escape ignored 2",
            "foo\\\\$(VAR_C)bar",
            "foo\\\\Cbar",
        ),
        (
            "lots of backslashes",
            "foo\\\\\\\\$(VAR_A)bar",
            "foo\\\\\\\\Abar",
        ),
        (
            "nested var references",
            "$(VAR_A$(VAR_B))",
            "$(VAR_A$(VAR_B))",
        ),
        (
            "nested var references second type",
            "$(VAR_A$(VAR_B)",
            "$(VAR_A$(VAR_B)",
        ),
        ("value is a reference", "$(VAR_REF)", "$(VAR_A)"),
        (
            "value is a reference x 2",
            "%%$(VAR_REF)--$(VAR_REF)%%",
            "%%$(VAR_A)--$(VAR_A)%%",
        ),
        ("empty var", "foo$(VAR_EMPTY)bar", "foobar"),
        (
            "unterminated expression",
            "foo$(VAR_Awhoops!",
            "foo$(VAR_Awhoops!",
        ),
        (
            "expression without operator",
            "f00__(VAR_A)__",
            "f00__(VAR_A)__",
        ),
        ("shell special vars pass through", "$?_boo_$!", "$?_boo_$!"),
        ("bare operators are ignored", "$VAR_A", "$VAR_A"),
        (
            "undefined vars are passed through",
            "$(VAR_DNE)",
            "$(VAR_DNE)",
        ),
        (
            "multiple (even) operators, var undefined",
            "$$$$$$(BIG_MONEY)",
            "$$$(BIG_MONEY)",
        ),
        (
            "multiple (even) operators, var defined",
            "$$$$$$(VAR_A)",
            "$$$(VAR_A)",
        ),
        (
            "multiple (odd) operators, var undefined",
            "$$$$$$$(GOOD_ODDS)",
            "$$$$(GOOD_ODDS)",
        ),
        (
            "multiple (odd) operators, var defined",
            "$$$$$$$(VAR_A)",
            "$$$A",
        ),
        ("missing open expression", "$VAR_A)", "$VAR_A)"),
        ("shell syntax ignored", "${VAR_A}", "${VAR_A}"),
        (
            "trailing incomplete expression not consumed",
            "$(VAR_B)_______$(A",
            "B_______$(A",
        ),
        (
            "trailing incomplete expression, no content",
            "$(VAR_C)_______$(",
            "C_______$(",
        ),
        (
            "operator at end of input string is preserved",
            "$(VAR_A)foobarzab$",
            "Afoobarzab$",
        ),
        (
            "shell escaped incomplete expr",
            "foo-\\$(VAR_A",
            "foo-\\$(VAR_A",
        ),
        ("lots of $( in middle", "--$($($($($--", "--$($($($($--"),
        (
            "lots of $( in beginning",
            "$($($($($--foo$(",
            "$($($($($--foo$(",
        ),
        ("lots of $( at end", "foo0--$($($($(", "foo0--$($($($("),
        (
            "escaped operators in variable names are not escaped",
            "$(foo$$var)",
            "$(foo$$var)",
        ),
        ("newline not expanded", "\n", "\n"),
        // Beyond upstream's table: non-ASCII text survives untouched.
        ("non-ascii after operator", "é$é$(VAR_A)ü", "é$éAü"),
    ];
    let single = map_of(&[
        ("VAR_A", "A"),
        ("VAR_B", "B"),
        ("VAR_C", "C"),
        ("VAR_REF", "$(VAR_A)"),
        ("VAR_EMPTY", ""),
    ]);
    let first = map_of(&[("VAR_A", "A"), ("VAR_EMPTY", "")]);
    let second = map_of(&[("VAR_B", "B"), ("VAR_C", "C"), ("VAR_REF", "$(VAR_A)")]);
    for (name, input, want) in cases {
        let got = expand(input, &|k| single.get(k).cloned());
        assert_eq!(&got, want, "single mapping: {name}");
        let got = expand(input, &|k| first.get(k).or_else(|| second.get(k)).cloned());
        assert_eq!(&got, want, "dual mapping: {name}");
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn env_from(name: &str, source: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(source),
        ..Default::default()
    }
}

fn field(path: &str) -> EnvVarSource {
    EnvVarSource {
        field_ref: Some(ObjectFieldSelector {
            field_path: path.into(),
            api_version: None,
        }),
        ..Default::default()
    }
}

fn resource(res: &str, divisor: Option<&str>) -> EnvVarSource {
    EnvVarSource {
        resource_field_ref: Some(ResourceFieldSelector {
            resource: res.into(),
            divisor: divisor.map(|d| Quantity(d.into())),
            container_name: None,
        }),
        ..Default::default()
    }
}

fn test_pod(container: Container) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            namespace: Some("prod".into()),
            uid: Some("uid-1".into()),
            labels: Some(BTreeMap::from([
                ("app".into(), "web".into()),
                ("tier".into(), "front\"end".into()),
            ])),
            annotations: Some(BTreeMap::from([("note".into(), "hi".into())])),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            node_name: Some("node-a".into()),
            service_account_name: Some("builder".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn with_env(env: Vec<EnvVar>) -> Container {
    Container {
        name: "app".into(),
        image: Some("busybox".into()),
        env: Some(env),
        ..Default::default()
    }
}

fn ips(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn values_expand_against_previous_vars_in_order() {
    let c = with_env(vec![
        env_var("FOO", "bar"),
        env_var("ZOO", "$(FOO)-1"),
        env_var("BLU", "$(ZOO)-2"),
        env_var("EARLY", "$(LATE)"),
        env_var("LATE", "x"),
        env_var("ESC", "$$(FOO)"),
        env_var("FOO", "again"),
        env_var("EMPTY", ""),
    ]);
    let pod = test_pod(c.clone());
    let pod_ips = ips(&["10.0.0.5"]);
    let host_ips = ips(&["192.168.1.2"]);
    let got =
        make_environment(&pod, &c, &EnvContext::new("node-a", &pod_ips, &host_ips)).expect("env");
    let want: Vec<(String, String)> = [
        ("FOO", "again"),
        ("ZOO", "bar-1"),
        ("BLU", "bar-1-2"),
        ("EARLY", "$(LATE)"),
        ("LATE", "x"),
        ("ESC", "$(FOO)"),
        ("EMPTY", ""),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn field_refs() {
    let cases: &[(&str, Result<&str, EnvError>)] = &[
        ("metadata.name", Ok("web")),
        ("metadata.namespace", Ok("prod")),
        ("metadata.uid", Ok("uid-1")),
        ("metadata.labels['app']", Ok("web")),
        ("metadata.labels['missing']", Ok("")),
        ("metadata.annotations['note']", Ok("hi")),
        ("metadata.labels", Ok("app=\"web\"\ntier=\"front\\\"end\"")),
        ("metadata.annotations", Ok("note=\"hi\"")),
        ("spec.nodeName", Ok("node-a")),
        ("spec.host", Ok("node-a")),
        ("spec.serviceAccountName", Ok("builder")),
        ("status.hostIP", Ok("192.168.1.2")),
        ("status.hostIPs", Ok("192.168.1.2,fd00::2")),
        ("status.podIP", Ok("10.0.0.5")),
        ("status.podIPs", Ok("10.0.0.5,fd00::5")),
        (
            "status.phase",
            Err(EnvError::UnsupportedFieldPath("status.phase".into())),
        ),
        (
            "spec.containers",
            Err(EnvError::FieldLabelNotSupported("spec.containers".into())),
        ),
        (
            "metadata.name['x']",
            Err(EnvError::FieldLabelNoSubscript("metadata.name['x']".into())),
        ),
    ];
    // Pod IPs come in runtime order (v6 first) and are sorted to the node's family (v4).
    let pod_ips = ips(&["fd00::5", "10.0.0.5", "10.0.0.6"]);
    let host_ips = ips(&["192.168.1.2", "fd00::2"]);
    for (path, want) in cases {
        let c = with_env(vec![env_from("V", field(path))]);
        let pod = test_pod(c.clone());
        let got = make_environment(&pod, &c, &EnvContext::new("node-a", &pod_ips, &host_ips));
        match want {
            Ok(v) => assert_eq!(got, Ok(vec![("V".to_owned(), (*v).to_owned())]), "{path}"),
            Err(e) => assert_eq!(got, Err(e.clone()), "{path}"),
        }
    }
    // Without host IPs the host fields fail like upstream's getHostIPsAnyWay.
    let c = with_env(vec![env_from("V", field("status.hostIP"))]);
    let got = make_environment(&test_pod(c.clone()), &c, &EnvContext::new("n", &[], &[]));
    assert_eq!(got, Err(EnvError::HostIpUnknown));
    // An invalid subscript key is rejected.
    let c = with_env(vec![env_from("V", field("metadata.labels['-bad']"))]);
    let got = make_environment(&test_pod(c.clone()), &c, &EnvContext::new("n", &[], &[]));
    assert!(
        matches!(got, Err(EnvError::InvalidSubscript { .. })),
        "{got:?}"
    );
}

#[test]
fn resource_field_refs() {
    let mut c = with_env(vec![]);
    c.resources = Some(ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".into(), Quantity("250m".into())),
            ("memory".into(), Quantity("64Mi".into())),
        ])),
        limits: Some(BTreeMap::from([("cpu".into(), Quantity("1500m".into()))])),
        ..Default::default()
    });
    let alloc = NodeAllocatable {
        cpu_millis: 4000,
        memory_bytes: 8 * 1024 * 1024 * 1024,
        ephemeral_storage_bytes: None,
    };
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("requests.cpu", None, "1"),
        ("requests.cpu", Some("1m"), "250"),
        ("limits.cpu", None, "2"),
        ("limits.cpu", Some("100m"), "15"),
        ("requests.memory", None, "67108864"),
        ("requests.memory", Some("1Mi"), "64"),
        ("requests.memory", Some("1M"), "68"),
        // No memory limit: node allocatable, as upstream's defaultPodLimitsForDownwardAPI.
        ("limits.memory", Some("1Gi"), "8"),
        ("requests.ephemeral-storage", None, "0"),
    ];
    for (res, div, want) in cases {
        let mut c = c.clone();
        c.env = Some(vec![env_from("R", resource(res, *div))]);
        let pod = test_pod(c.clone());
        let mut ctx = EnvContext::new("n", &[], &[]);
        ctx.node_allocatable = Some(alloc);
        let got = make_environment(&pod, &c, &ctx).expect(res);
        assert_eq!(
            got,
            vec![("R".to_owned(), (*want).to_owned())],
            "{res} / {div:?}"
        );
    }

    // Without allocatable, an unset limit is a clear error; a set one still works.
    let mut c2 = c.clone();
    c2.env = Some(vec![env_from("R", resource("limits.memory", None))]);
    let got = make_environment(&test_pod(c2.clone()), &c2, &EnvContext::new("n", &[], &[]));
    assert!(
        matches!(
            got,
            Err(EnvError::NodeAllocatableUnknown { what: "memory", .. })
        ),
        "{got:?}"
    );
    c2.env = Some(vec![env_from("R", resource("limits.cpu", None))]);
    let got = make_environment(&test_pod(c2.clone()), &c2, &EnvContext::new("n", &[], &[]));
    assert_eq!(got, Ok(vec![("R".into(), "2".into())]));

    c2.env = Some(vec![env_from("R", resource("limits.gpu", None))]);
    let got = make_environment(&test_pod(c2.clone()), &c2, &EnvContext::new("n", &[], &[]));
    assert_eq!(got, Err(EnvError::UnsupportedResource("limits.gpu".into())));
}

struct FakeObjects;

impl EnvObjects for FakeObjects {
    fn config_map(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        Ok((name == "cfg").then(|| {
            BTreeMap::from([
                ("b".to_owned(), "2".to_owned()),
                ("a".to_owned(), "1".to_owned()),
            ])
        }))
    }
    fn secret(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        if name == "broken" {
            return Err("secrets \"broken\" is forbidden".into());
        }
        Ok((name == "sec").then(|| BTreeMap::from([("pw".to_owned(), b"hunter2".to_vec())])))
    }
}

fn cm_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        config_map_key_ref: Some(ConfigMapKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

fn secret_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
    EnvVarSource {
        secret_key_ref: Some(SecretKeySelector {
            name: name.into(),
            key: key.into(),
            optional,
        }),
        ..Default::default()
    }
}

#[test]
fn config_maps_and_secrets_in_standalone_mode_fail_like_upstream() {
    for optional in [None, Some(true)] {
        let c = with_env(vec![env_from("X", cm_key("cfg", "a", optional))]);
        let got = make_environment(&test_pod(c.clone()), &c, &EnvContext::new("n", &[], &[]));
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("couldn't get configMap prod/cfg, no kubeClient defined".to_owned())
        );
    }
    let c = with_env(vec![env_from("X", secret_key("sec", "pw", None))]);
    let got = make_environment(&test_pod(c.clone()), &c, &EnvContext::new("n", &[], &[]));
    assert_eq!(
        got.map_err(|e| e.to_string()),
        Err("couldn't get secret prod/sec, no kubeClient defined".to_owned())
    );
}

#[test]
fn config_maps_and_secrets_with_api_objects() {
    let objects = FakeObjects;
    let mut ctx = EnvContext::new("n", &[], &[]);
    ctx.objects = Some(&objects);

    let mut c = with_env(vec![
        env_var("a", "override"),
        env_from("PW", secret_key("sec", "pw", None)),
        env_from("OPT", cm_key("missing", "k", Some(true))),
        env_from("OPTKEY", cm_key("cfg", "nokey", Some(true))),
        env_var("REF", "$(CFG_b)"),
    ]);
    c.env_from = Some(vec![EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: "cfg".into(),
            optional: None,
        }),
        prefix: Some("CFG_".into()),
        secret_ref: None,
    }]);
    let got = make_environment(&test_pod(c.clone()), &c, &ctx).expect("env");
    let want: Vec<(String, String)> = [
        ("CFG_a", "1"),
        ("CFG_b", "2"),
        ("a", "override"),
        ("PW", "hunter2"),
        ("REF", "2"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(got, want);

    let cases: &[(EnvVarSource, &str)] = &[
        (
            cm_key("missing", "k", None),
            "configmaps \"missing\" not found",
        ),
        (
            cm_key("cfg", "zz", None),
            "couldn't find key zz in ConfigMap prod/cfg",
        ),
        (
            secret_key("sec", "zz", None),
            "couldn't find key zz in Secret prod/sec",
        ),
        (
            secret_key("broken", "k", Some(true)),
            "secrets \"broken\" is forbidden",
        ),
    ];
    for (src, want) in cases {
        let c = with_env(vec![env_from("X", src.clone())]);
        let got = make_environment(&test_pod(c.clone()), &c, &ctx);
        assert_eq!(got.map_err(|e| e.to_string()), Err((*want).to_owned()));
    }
}

#[test]
fn service_env_is_appended_unless_defined() {
    let service_env = BTreeMap::from([
        ("KUBERNETES_SERVICE_HOST".to_owned(), "10.96.0.1".to_owned()),
        ("A_SERVICE_PORT".to_owned(), "80".to_owned()),
    ]);
    let mut ctx = EnvContext::new("n", &[], &[]);
    ctx.service_env = &service_env;
    let c = with_env(vec![
        env_var("A_SERVICE_PORT", "8080"),
        env_var("URL", "http://$(KUBERNETES_SERVICE_HOST)"),
    ]);
    let got = make_environment(&test_pod(c.clone()), &c, &ctx).expect("env");
    let want: Vec<(String, String)> = [
        ("A_SERVICE_PORT", "8080"),
        ("URL", "http://10.96.0.1"),
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn command_and_args_expansion() {
    let c = Container {
        name: "c".into(),
        command: Some(vec!["/bin/$(SHELL)".into(), "-c".into()]),
        args: Some(vec!["echo $(MSG) $$(MSG) $(NOPE)".into()]),
        ..Default::default()
    };
    let env = vec![
        ("SHELL".to_owned(), "zsh".to_owned()),
        ("MSG".to_owned(), "first".to_owned()),
        ("MSG".to_owned(), "hi".to_owned()),
    ];
    let (cmd, args) = expand_command_and_args(&c, &env);
    assert_eq!(cmd, vec!["/bin/zsh", "-c"]);
    assert_eq!(args, vec!["echo hi $(MSG) $(NOPE)"]);

    let bare = Container::default();
    assert_eq!(expand_command_and_args(&bare, &env), (vec![], vec![]));
}

#[test]
fn sub_path_expr() {
    let env = vec![
        ("POD".to_owned(), "web-0".to_owned()),
        ("EMPTY".to_owned(), String::new()),
    ];
    assert_eq!(
        expand_sub_path_expr("logs/$(POD)", &env),
        Ok("logs/web-0".into())
    );
    assert_eq!(
        expand_sub_path_expr("$(NOPE)/$(EMPTY)/$(POD)", &env),
        Err(EnvError::MissingSubPathValue("EMPTY, NOPE".into()))
    );
}

#[test]
fn pod_ip_sorting() {
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        (&["10.0.0.1"], &[], &["10.0.0.1"]),
        (
            &["fd00::1", "10.0.0.1"],
            &["192.168.0.1"],
            &["10.0.0.1", "fd00::1"],
        ),
        (
            &["10.0.0.1", "fd00::1"],
            &["fd00::9"],
            &["fd00::1", "10.0.0.1"],
        ),
        (&["10.0.0.1", "10.0.0.2", "bogus"], &[], &["10.0.0.1"]),
        (&["fd00:0:0::1"], &[], &["fd00::1"]),
        (&[], &["10.0.0.9"], &[]),
    ];
    for (pod, node, want) in cases {
        let got = sort_pod_ips(&ips(pod), &ips(node));
        assert_eq!(got, ips(want), "{pod:?} on {node:?}");
    }
}

#[test]
fn env_var_names_follow_the_relaxed_rule() {
    for ok in ["A", "a.b-c", "1X", "with space", "~!@#"] {
        assert!(is_env_var_name(ok), "{ok:?}");
    }
    for bad in ["", "A=B", "tab\there", "é"] {
        assert!(!is_env_var_name(bad), "{bad:?}");
    }
}

#[test]
fn invalid_env_from_keys_are_skipped_and_reported() {
    struct Odd;
    impl EnvObjects for Odd {
        fn config_map(
            &self,
            _namespace: &str,
            _name: &str,
        ) -> Result<Option<BTreeMap<String, String>>, String> {
            Ok(Some(BTreeMap::from([
                ("good".to_owned(), "1".to_owned()),
                ("b=ad".to_owned(), "2".to_owned()),
                ("a=lso".to_owned(), "3".to_owned()),
            ])))
        }
        fn secret(
            &self,
            _namespace: &str,
            _name: &str,
        ) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
            Ok(None)
        }
    }
    let objects = Odd;
    let mut ctx = EnvContext::new("n", &[], &[]);
    ctx.objects = Some(&objects);
    let mut c = with_env(vec![]);
    c.env_from = Some(vec![EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: "odd".into(),
            optional: None,
        }),
        prefix: Some("P_".into()),
        secret_ref: None,
    }]);
    let pod = test_pod(c.clone());
    assert_eq!(
        make_environment(&pod, &c, &ctx),
        Ok(vec![("P_good".into(), "1".into())])
    );
    assert_eq!(
        invalid_env_from_keys(&pod, &c, &ctx),
        [
            "Keys [P_a=lso, P_b=ad] from the EnvFrom configMap prod/odd were skipped since they are considered invalid environment variable names."
        ]
    );
}
