//! Targets `http-query` and `http-route`: the request-target parsing of the kubelet HTTP
//! server. `http-query`: the query string (`server::routes::parse_query`, percent-decoding
//! included) and the streaming option parsers fed from it (`server::streaming::parse_options/
//! parse_command/parse_ports`); property: decoding never grows a parameter. `http-route`: the
//! path (`server::path::parse` into a `Route`, plus its root and metrics label); property: a
//! routed path never carries a `.`/`..` segment or a decoded `/`, `\` or control byte in the
//! names it hands on (C0 and C1 controls, e.g. `%C2%9B`). Both share the seeds and generator (whole request targets).

use kubelet::server::path::{ContainerRef, Route, parse as parse_route};
use kubelet::server::routes::parse_query;
use kubelet::server::streaming::{parse_command, parse_options, parse_ports};

use super::Target;
use crate::mutate::mutate;
use crate::rng::Rng;

pub const TARGET: Target = Target {
    name: "http-query",
    about: "HTTP query string + streaming option parsing",
    generate,
    run,
    smoke_inputs: 300_000,
};

pub const ROUTE: Target = Target {
    name: "http-route",
    about: "HTTP request path -> Route",
    generate,
    run: run_route,
    smoke_inputs: 300_000,
};

const SEEDS: &[&str] = &[
    "/containerLogs/default/web/httpd?tailLines=10&timestamps=true&sinceSeconds=5&follow=1",
    "/containerLogs/ns/pod/c?previous=true&limitBytes=100&sinceTime=2024-01-02T03:04:05Z",
    "/exec/default/web/httpd?command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1",
    "/exec/ns/pod/uid-1/c?command=ls&error=1",
    "/attach/ns/pod/c?input=1&output=1&error=1",
    "/portForward/ns/pod?port=8080,9090&port=1",
    "/portForward/ns/pod/uid?port=65536",
    "/stats/summary?only_cpu_and_memory=true",
    "/logs/journal?boot=0&unit=kubelet&tail=5&pattern=a%2Bb&since=-1h",
    "/pods?a=%zz&b=%4&c=%%41&=x&&d&e==f+g",
    "/metrics/resource",
    "/healthz",
    "/configz",
    "/runningpods/",
];

const DICT: &[&str] = &[
    "?",
    "&",
    "=",
    "%",
    "%2F",
    "%00",
    "%ff",
    "%E2%82%AC",
    "%C3",
    "+",
    "/",
    "//",
    "/../",
    "/./",
    "#",
    ";",
    "exec",
    "attach",
    "portForward",
    "containerLogs",
    "command",
    "input",
    "output",
    "error",
    "tty",
    "port",
    "tailLines",
    "limitBytes",
    "sinceSeconds",
    "sinceTime",
    "follow",
    "previous",
    "timestamps",
    "1",
    "0",
    "true",
];

fn generate(rng: &mut Rng) -> Vec<u8> {
    let seeds: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    mutate(rng, &seeds, DICT, 8 << 10)
}

/// `(path, query)` of a request target.
fn split(data: &[u8]) -> (String, Option<String>) {
    let text = String::from_utf8_lossy(data);
    match text.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (text.into_owned(), None),
    }
}

fn run(data: &[u8]) {
    let (_, query) = split(data);
    let parsed = parse_query(query.as_deref());
    let limit = query.as_deref().map_or(0, str::len);
    for (k, v) in &parsed {
        assert!(
            k.len() + v.len() <= limit,
            "decoding grew a query parameter"
        );
    }
    let mut pairs: Vec<(String, String)> = parsed.into_iter().collect();
    pairs.sort();
    let _ = parse_options(&pairs);
    let _ = parse_command(&pairs);
    let _ = parse_ports(&pairs, true);
}

fn run_route(data: &[u8]) {
    let (path, _) = split(data);
    let route = parse_route(&path);
    let _ = (route.root().name(), route.metrics_label());
    let names = |c: &ContainerRef| {
        let mut v = vec![c.namespace.clone(), c.pod.clone(), c.container.clone()];
        v.extend(c.uid.clone());
        v
    };
    let handed_on = match &route {
        Route::ContainerLogs(c) | Route::Run(c) | Route::Checkpoint(c) | Route::Stream(_, c) => {
            names(c)
        }
        Route::Healthz { check: Some(c) } => vec![c.clone()],
        _ => Vec::new(),
    };
    for name in handed_on {
        assert!(
            name != "."
                && name != ".."
                && !name.contains(['/', '\\'])
                && !name.chars().any(char::is_control),
            "{path:?} routed with the name {name:?}"
        );
    }
}
