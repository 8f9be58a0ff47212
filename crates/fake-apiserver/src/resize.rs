//! The `pods/resize` subresource (v1.33, `InPlacePodVerticalScaling`): owns the rules of a
//! resize write — only the containers' (and sidecars') `resources` and `resizePolicy` are taken
//! from the request, everything else is kept from the stored pod (upstream
//! `podResizeStrategy.PrepareForUpdate` / `dropNonResizeUpdates`), then upstream's
//! `ValidatePodResize` field errors (422 Invalid with field paths). Receives the stored pod and
//! the requested one (a PUT body or the stored pod with a patch applied); emits the pod to
//! store. The API server sets no resize conditions: that is the kubelet's job.

use serde_json::{Value, json};

use crate::error::ApiError;

/// Parses a Kubernetes quantity into nano-units (exact for the forms the API accepts).
fn nanos(v: &Value) -> Option<i128> {
    let s = v.as_str()?.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let neg = int.starts_with('-');
    let int = int.trim_start_matches(['+', '-']);
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut n: i128 = 0;
    for c in int.chars() {
        n = n
            .checked_mul(10)?
            .checked_add(i128::from(c.to_digit(10)?))?;
    }
    n = n.checked_mul(1_000_000_000)?;
    let mut scale = 100_000_000_i128;
    for c in frac.chars().take(9) {
        n = n.checked_add(i128::from(c.to_digit(10)?) * scale)?;
        scale /= 10;
    }
    let (mul, div): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1000),
        "k" => (1000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: u32 = e[1..].parse().ok()?;
            (10_i128.checked_pow(exp)?, 1)
        }
        _ => return None,
    };
    let v = n.checked_mul(mul)? / div;
    Some(if neg { -v } else { v })
}

fn same_quantity(a: &Value, b: &Value) -> bool {
    match (nanos(a), nanos(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// `resources` with cpu and memory dropped from requests and limits (what may not change).
fn without_cpu_memory(r: &Value) -> Value {
    let mut r = if r.is_object() { r.clone() } else { json!({}) };
    for section in ["requests", "limits"] {
        if let Some(m) = r.get_mut(section).and_then(Value::as_object_mut) {
            for k in RESIZABLE {
                m.remove(k);
            }
            if m.is_empty()
                && let Some(o) = r.as_object_mut()
            {
                o.remove(section);
            }
        }
        if r[section].is_null()
            && let Some(o) = r.as_object_mut()
        {
            o.remove(section);
        }
    }
    r
}

/// The QoS class as the API server derives it (requests default to limits).
fn qos_class(spec: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for c in spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
    {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in RESIZABLE {
            if !req[r].is_null() || !lim[r].is_null() {
                any = true;
            }
            let request = if req[r].is_null() { &lim[r] } else { &req[r] };
            if lim[r].is_null() || !same_quantity(request, &lim[r]) {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn memory_restart_policy(c: &Value) -> &str {
    c["resizePolicy"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["resourceName"] == "memory")
        .and_then(|p| p["restartPolicy"].as_str())
        .unwrap_or("NotRequired")
}

/// Field errors of one container's resize (upstream `validateContainerResize` plus the
/// request ≤ limit rule of `ValidateResourceRequirements`).
fn container_errors(path: &str, old: &Value, new: &Value, errs: &mut Vec<String>) {
    let (or, nr) = (&old["resources"], &new["resources"]);
    if without_cpu_memory(or) != without_cpu_memory(nr) {
        errs.push("spec: Forbidden: only cpu and memory resources are mutable".to_owned());
    }
    for (section, what) in [("requests", "requests"), ("limits", "limits")] {
        if RESIZABLE
            .iter()
            .any(|r| !or[section][r].is_null() && nr[section][r].is_null())
        {
            errs.push(format!(
                "{path}.resources.{section}: Forbidden: resource {what} cannot be removed"
            ));
        }
    }
    for r in RESIZABLE {
        let (req, lim) = (&nr["requests"][r], &nr["limits"][r]);
        if let (Some(q), Some(l)) = (nanos(req), nanos(lim))
            && q > l
        {
            errs.push(format!(
                "{path}.resources.requests: Invalid value: {req}: must be less than or equal to {r} limit of {}",
                lim.as_str().unwrap_or_default()
            ));
        }
        if nanos(req).is_none() && !req.is_null() || nanos(lim).is_none() && !lim.is_null() {
            errs.push(format!(
                "{path}.resources: Invalid value: {}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                if nanos(req).is_none() && !req.is_null() { req } else { lim }
            ));
        }
    }
    // v1.33: a memory limit may only shrink when the container restarts for it.
    if let (Some(o), Some(n)) = (
        nanos(&or["limits"]["memory"]),
        nanos(&nr["limits"]["memory"]),
    ) && n < o
        && memory_restart_policy(new) != "RestartContainer"
    {
        errs.push(format!(
            "{path}.resources.limits.memory: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"
        ));
    }
    let policy = &new["resizePolicy"];
    if !policy.is_null() && !policy.is_array() {
        errs.push(format!(
            "{path}.resizePolicy: Invalid value: must be a list"
        ));
    }
    for (i, p) in policy.as_array().into_iter().flatten().enumerate() {
        let name = p["resourceName"].as_str().unwrap_or_default();
        if !RESIZABLE.contains(&name) {
            errs.push(format!(
                "{path}.resizePolicy[{i}].resourceName: Unsupported value: \"{name}\": supported values: \"cpu\", \"memory\""
            ));
        }
        let policy = p["restartPolicy"].as_str().unwrap_or_default();
        if !matches!(policy, "NotRequired" | "RestartContainer") {
            errs.push(format!(
                "{path}.resizePolicy[{i}].restartPolicy: Unsupported value: \"{policy}\": supported values: \"NotRequired\", \"RestartContainer\""
            ));
        }
    }
}

fn invalid(name: &str, errs: Vec<String>) -> ApiError {
    let mut e = ApiError::invalid("Pod", name, &errs[0]);
    for why in &errs[1..] {
        let extra = ApiError::invalid("Pod", name, why);
        e.causes.extend(extra.causes);
    }
    if errs.len() > 1 {
        e.message = format!("Pod \"{name}\" is invalid: [{}]", errs.join(", "));
    }
    e
}

/// The pod to store for a resize request: `old` with the requested containers' `resources`
/// and `resizePolicy`, or the field errors upstream reports.
pub fn prepare_resize(old: &Value, requested: &Value) -> Result<Value, ApiError> {
    let name = old["metadata"]["name"].as_str().unwrap_or_default();
    let mut errs = Vec::new();
    let mut new = old.clone();
    for list in ["containers", "initContainers"] {
        let olds = old["spec"][list].as_array().cloned().unwrap_or_default();
        let news = requested["spec"][list]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if olds.len() != news.len() {
            errs.push(format!(
                "spec.{list}: Forbidden: {list} may not be added or removed on resize"
            ));
            continue;
        }
        for (i, (o, n)) in olds.iter().zip(&news).enumerate() {
            let path = format!("spec.{list}[{i}]");
            if o["name"] != n["name"] {
                errs.push(format!(
                    "{path}.name: Forbidden: {list} may not be renamed or reordered on resize"
                ));
                continue;
            }
            let sidecar = list == "containers" || o["restartPolicy"] == "Always";
            if !sidecar {
                if o["resources"] != n["resources"] || o["resizePolicy"] != n["resizePolicy"] {
                    errs.push(format!(
                        "{path}.resources: Forbidden: resources for non-sidecar init containers are immutable"
                    ));
                }
                continue;
            }
            container_errors(&path, o, n, &mut errs);
            let target = &mut new["spec"][list][i];
            for field in ["resources", "resizePolicy"] {
                match n.get(field).filter(|v| !v.is_null()) {
                    Some(v) => target[field] = v.clone(),
                    None => {
                        if let Some(m) = target.as_object_mut() {
                            m.remove(field);
                        }
                    }
                }
            }
        }
    }
    if errs.is_empty() {
        let (before, after) = (qos_class(&old["spec"]), qos_class(&new["spec"]));
        if before != after {
            errs.push(format!(
                "spec: Invalid value: \"{after}\": Pod QOS Class may not change as a result of resizing"
            ));
        }
    }
    if !errs.is_empty() {
        return Err(invalid(name, errs));
    }
    if new["spec"] != old["spec"] {
        let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
        new["metadata"]["generation"] = json!(g);
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "d", "generation": 1},
            "spec": {"containers": [
                {"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                               "limits": {"cpu": "300m", "memory": "128Mi"}}},
                {"name": "d", "image": "busybox"}
            ]},
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn quantities_parse_exactly() {
        assert_eq!(nanos(&json!("100m")), Some(100_000_000));
        assert_eq!(nanos(&json!("1.5")), Some(1_500_000_000));
        assert_eq!(nanos(&json!("64Mi")), Some((64_i128 << 20) * 1_000_000_000));
        assert_eq!(nanos(&json!("1e3")), Some(1000 * 1_000_000_000));
        assert_eq!(nanos(&json!("12x")), None);
        assert_eq!(nanos(&json!("")), None);
    }

    #[test]
    fn only_resources_and_resize_policy_are_taken() {
        let mut req = pod();
        req["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("500m");
        req["spec"]["containers"][0]["image"] = json!("other");
        req["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]);
        req["metadata"]["labels"] = json!({"x": "y"});
        req["status"]["phase"] = json!("Failed");
        let out = prepare_resize(&pod(), &req).unwrap();
        assert_eq!(
            out["spec"]["containers"][0]["resources"]["limits"]["cpu"],
            "500m"
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "busybox");
        assert_eq!(
            out["spec"]["containers"][0]["resizePolicy"][0]["restartPolicy"],
            "RestartContainer"
        );
        assert!(out["metadata"]["labels"].is_null());
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(out["metadata"]["generation"], 2);
        // No change: no new generation.
        assert_eq!(prepare_resize(&pod(), &pod()).unwrap(), pod());
    }

    fn err(req: &Value) -> ApiError {
        prepare_resize(&pod(), req).unwrap_err()
    }

    #[test]
    fn upstream_field_errors() {
        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["limits"]["ephemeral-storage"] = json!("1Gi");
        let e = err(&r);
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec: Forbidden: only cpu and memory resources are mutable"
        );
        assert_eq!(e.causes[0].2, "spec");

        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["requests"] = json!({"cpu": "100m"});
        assert!(err(&r).message.contains(
            "spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"
        ));

        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("500m");
        assert!(
            err(&r)
                .message
                .contains("must be less than or equal to cpu limit of 300m")
        );

        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("100Mi");
        assert!(err(&r).message.contains(
            "spec.containers[0].resources.limits.memory: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"
        ));
        r["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        assert!(prepare_resize(&pod(), &r).is_ok());

        let mut r = pod();
        let cs = r["spec"]["containers"].as_array_mut().unwrap();
        cs.swap(0, 1);
        let e = err(&r);
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: [spec.containers[0].name: Forbidden: containers may not be renamed or reordered on resize, spec.containers[1].name: Forbidden: containers may not be renamed or reordered on resize]"
        );
        assert_eq!(e.causes.len(), 2);
        assert_eq!(e.causes[1].2, "spec.containers[1].name");

        let mut r = pod();
        r["spec"]["containers"].as_array_mut().unwrap().pop();
        assert!(err(&r).message.contains(
            "spec.containers: Forbidden: containers may not be added or removed on resize"
        ));

        // BestEffort container gains requests: the pod stays Burstable, fine; a lone
        // Guaranteed-looking change of QoS is refused.
        let mut r = pod();
        r["spec"]["containers"].as_array_mut().unwrap().pop();
        let mut base = pod();
        base["spec"]["containers"].as_array_mut().unwrap().pop();
        r["spec"]["containers"][0]["resources"]["requests"] =
            json!({"cpu": "300m", "memory": "128Mi"});
        let e = prepare_resize(&base, &r).unwrap_err();
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: spec: Invalid value: \"Guaranteed\": Pod QOS Class may not change as a result of resizing"
        );

        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("lots");
        assert!(err(&r).message.contains("quantities must match"));
        let mut r = pod();
        r["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "gpu", "restartPolicy": "Sometimes"}]);
        let e = err(&r);
        assert!(
            e.message
                .contains("resizePolicy[0].resourceName: Unsupported value")
        );
        assert!(
            e.message
                .contains("resizePolicy[0].restartPolicy: Unsupported value")
        );
    }

    #[test]
    fn hostile_requests_are_refused_not_crashed() {
        // An overflowing quantity, a non-list container field, a non-object resources value.
        let mut r = pod();
        r["spec"]["containers"][0]["resources"]["limits"]["cpu"] =
            json!("99999999999999999999999999999999999999Ei");
        assert!(err(&r).message.contains("quantities must match"));
        let mut r = pod();
        r["spec"]["containers"] = json!("nope");
        assert!(err(&r).message.contains("may not be added or removed"));
        let mut r = pod();
        r["spec"]["containers"][0]["resources"] = json!(42);
        assert_eq!(err(&r).code, 422);
        let mut r = pod();
        r["spec"]["containers"][0]["resizePolicy"] = json!("x");
        assert!(
            err(&r)
                .message
                .contains("spec.containers[0].resizePolicy: Invalid value: must be a list")
        );
        assert_eq!(err(&json!(null)).code, 422);
    }

    #[test]
    fn init_containers_only_sidecars_resize() {
        let mut old = pod();
        old["spec"]["initContainers"] = json!([
            {"name": "i", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}},
            {"name": "s", "image": "busybox", "restartPolicy": "Always",
             "resources": {"requests": {"cpu": "10m"}}}
        ]);
        let mut r = old.clone();
        r["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = json!("20m");
        let out = prepare_resize(&old, &r).unwrap();
        assert_eq!(
            out["spec"]["initContainers"][1]["resources"]["requests"]["cpu"],
            "20m"
        );
        r["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("20m");
        assert!(prepare_resize(&old, &r).unwrap_err().message.contains(
            "spec.initContainers[0].resources: Forbidden: resources for non-sidecar init containers are immutable"
        ));
    }
}
