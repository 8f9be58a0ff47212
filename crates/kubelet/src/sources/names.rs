//! Name and value formats from upstream `k8s.io/apimachinery/pkg/util/validation`: DNS-1123
//! labels/subdomains, qualified names, label values, env var names, port numbers/names. Each
//! returns upstream's messages (empty when valid). Pure.

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn regex_error(msg: &str, format: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{format}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn matches_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

fn matches_subdomain_chars(s: &str) -> bool {
    s.split('.').all(matches_label_chars)
}

/// Upstream `IsDNS1123Label`: the messages, empty when valid.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_label_chars(s) {
        if matches_subdomain_chars(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Upstream `IsDNS1123Subdomain`: the messages, empty when valid.
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_subdomain_chars(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn matches_qualified_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Upstream `IsQualifiedName` (label and annotation keys).
pub fn is_qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_qualified_chars(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

pub fn is_valid_label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !v.is_empty() && !matches_qualified_chars(v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Upstream `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on by default).
pub fn is_env_var_name(name: &str) -> Vec<String> {
    if name.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        return vec![
            "a valid environment variable name must consist only of printable ASCII characters other than '='".into(),
        ];
    }
    Vec::new()
}

pub fn is_valid_port_num(p: i64) -> Vec<String> {
    if (1..=65535).contains(&p) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".into()]
    }
}

/// Upstream `IsValidPortName` (IANA_SVC_NAME).
pub fn is_valid_port_name(p: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if p.len() > 15 {
        errs.push(max_len_error(15));
    }
    if p.is_empty()
        || !p
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !p.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if p.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if p.starts_with('-') || p.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert!(is_dns1123_label("my-name").is_empty());
        assert!(is_dns1123_label("123-abc").is_empty());
        assert_eq!(is_dns1123_label("a.b"), ["must not contain dots"]);
        assert_eq!(
            is_dns1123_label(&"a".repeat(64))[0],
            "must be no more than 63 characters"
        );
        assert!(is_dns1123_label("-a")[0].starts_with("a lowercase RFC 1123 label"));
        assert!(is_dns1123_subdomain("kube-apiserver-node1.example").is_empty());
        assert!(!is_dns1123_subdomain("a..b").is_empty());
        assert!(!is_dns1123_subdomain("").is_empty());
        assert!(is_qualified_name("example.com/MyName").is_empty());
        assert_eq!(is_qualified_name("/x"), ["prefix part must be non-empty"]);
        assert!(is_qualified_name("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(is_valid_label_value("").is_empty());
        assert!(is_env_var_name("1_LEADING_DIGIT is fine").is_empty());
        assert!(!is_env_var_name("tab\there").is_empty());
        assert!(is_valid_port_name("http").is_empty());
        assert_eq!(
            is_valid_port_name("80"),
            ["must contain at least one letter (a-z)"]
        );
        assert!(
            is_valid_port_name("a--b")
                .contains(&"must not contain consecutive hyphens".to_string())
        );
        assert!(is_valid_port_num(65535).is_empty());
        assert!(!is_valid_port_num(0).is_empty());
    }
}
