//! The deployment files (deploy/docker-compose.yml, deploy/k8s/readerd.yaml) name flags,
//! variables, ports and health checks; these must exist in the real binaries, or the files
//! silently rot (no Docker engine or cluster runs here to try them).

use std::process::Command;

use readerd_tests::binary;
use yaml_rust2::{Yaml, YamlLoader};

fn help(name: &str) -> String {
    let output = Command::new(binary(name)).arg("--help").output().unwrap();
    String::from_utf8(output.stdout).unwrap()
}

fn load(path: &str) -> Vec<Yaml> {
    let text = std::fs::read_to_string(format!("{}/../deploy/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    YamlLoader::load_from_str(&text).unwrap()
}

fn strings(yaml: &Yaml) -> Vec<String> {
    yaml.as_vec().map(|v| v.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Every `--flag` among `args` is one readerd offers.
fn check_flags(args: &[String], readerd: &str) {
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(readerd.contains(flag.as_str()), "readerd has no {flag}");
    }
}

#[test]
fn compose_file_uses_real_flags_variables_port_and_health_check() {
    let readerd = help("readerd");
    let compose = &load("docker-compose.yml")[0];
    // Three replicas of one cluster: one state URL, their own ids and host ports.
    let mut ids = Vec::new();
    for (i, name) in ["readerd-1", "readerd-2", "readerd-3"].into_iter().enumerate() {
        let service = &compose["services"][name];
        check_flags(&strings(&service["command"]), &readerd);
        let env = service["environment"].as_hash().unwrap();
        for (name, value) in env {
            let name = name.as_str().unwrap();
            if name.starts_with("READERD_") {
                assert!(readerd.contains(name), "readerd does not read {name}");
            }
            if name == "READERD_LISTEN" {
                assert!(value.as_str().unwrap().ends_with(":50051"));
            }
        }
        let variable = |name: &str| service["environment"][name].as_str().unwrap().to_owned();
        assert!(variable("READERD_STATE_URL").starts_with("postgres://"));
        ids.push(variable("READERD_REPLICA_ID"));
        assert!(strings(&service["ports"]).contains(&format!("{}:50051", 50051 + i)));
        assert!(strings(&service["ports"]).contains(&format!("{}:9090", 9090 + i)));
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "every replica has its own id");
    let service = &compose["services"]["readerd-1"];
    // The demo trainer runs the example with the flags it has, on a spec that exists.
    let trainer = &compose["services"]["trainer"];
    let script = strings(&trainer["command"]).join(" ");
    let example = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/train_loop.py")).unwrap();
    for flag in script.split_whitespace().filter(|w| w.starts_with("--") && *w != "--quiet") {
        assert!(example.contains(&format!("\"{flag}\"")), "train_loop.py has no {flag}");
    }
    assert!(script.contains("/data/specs/train.json"));
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/data/specs/train.json")).unwrap();
    serde_json::from_str::<readerd_client::v1::DatasetSpec>(&spec).unwrap();
    let health = strings(&service["healthcheck"]["test"]);
    assert_eq!(health[1..], ["readerctl", "--addr", "http://127.0.0.1:50051", "health"]);
    assert!(help("readerctl").contains("health"));
    // The named datasets file it mounts is valid JSON of specs.
    let datasets = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/datasets.json")).unwrap();
    let datasets: std::collections::BTreeMap<String, readerd_client::v1::DatasetSpec> =
        serde_json::from_str(&datasets).unwrap();
    assert!(!datasets.is_empty());
}

#[test]
fn kubernetes_manifests_use_real_flags_variables_port_and_probes() {
    let readerd = help("readerd");
    let docs = load("k8s/readerd.yaml");
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    for kind in ["ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget"] {
        assert!(kinds.contains(&kind), "no {kind}");
    }
    let deployment = docs.iter().find(|d| d["kind"].as_str() == Some("StatefulSet")).unwrap();
    assert_eq!(deployment["spec"]["replicas"].as_i64(), Some(3));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    check_flags(&strings(&container["args"]), &readerd);
    let mut names = Vec::new();
    for variable in container["env"].as_vec().unwrap() {
        let name = variable["name"].as_str().unwrap();
        names.push(name);
        // The others are the manifest's own, spelled into readerd's.
        if name.starts_with("READERD_") {
            assert!(readerd.contains(name), "readerd does not read {name}");
        }
    }
    for name in ["READERD_REPLICA_ID", "READERD_ADVERTISE_ADDR", "READERD_STATE_URL"] {
        assert!(names.contains(&name), "the replicas need {name}");
    }
    // Clients find every replica through a headless Service.
    let headless =
        docs.iter().find(|d| d["kind"].as_str() == Some("Service") && d["spec"]["clusterIP"].as_str() == Some("None"));
    assert_eq!(deployment["spec"]["serviceName"].as_str(), headless.unwrap()["metadata"]["name"].as_str());
    // The Secrets it names are in the example (PostgreSQL's password, the tokens).
    let secrets = load("k8s/examples/secrets.yaml");
    for volume in deployment["spec"]["template"]["spec"]["volumes"].as_vec().unwrap() {
        if let Some(secret) = volume["secret"]["secretName"].as_str() {
            assert!(secrets.iter().any(|s| s["metadata"]["name"].as_str() == Some(secret)), "no Secret {secret}");
        }
    }
    let postgres = load("k8s/postgres.yaml");
    assert!(postgres.iter().any(|d| d["kind"].as_str() == Some("StatefulSet")));
    let port = container["ports"][0]["containerPort"].as_i64().unwrap();
    assert_eq!(port, 50051);
    assert_eq!(container["ports"][1]["containerPort"].as_i64(), Some(9090));

    // The server's settings in the ConfigMap load, and say what the manifest relies on.
    let config_map = docs.iter().find(|d| d["kind"].as_str() == Some("ConfigMap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let toml_path = dir.path().join("readerd.toml");
    std::fs::write(&toml_path, config_map["data"]["readerd.toml"].as_str().unwrap()).unwrap();
    assert_eq!(strings(&container["args"]), ["--config", "/config/readerd.toml"]);
    let printed =
        Command::new(binary("readerd")).arg("--config").arg(&toml_path).arg("--print-config").output().unwrap();
    assert!(printed.status.success(), "{}", String::from_utf8_lossy(&printed.stderr));
    let effective = String::from_utf8(printed.stdout).unwrap();
    for line in [
        "listen = \"0.0.0.0:50051\"",
        "metrics-listen = \"0.0.0.0:9090\"",
        "data-root = [\"/data\"]",
        // Production: every request needs a bearer token.
        "allow-unauthenticated = false",
        "auth-tokens = \"/secrets/tokens.json\"",
    ] {
        assert!(effective.contains(line), "{line} not in\n{effective}");
    }
    let datasets_json = config_map["data"]["datasets.json"].as_str().unwrap();
    let datasets: std::collections::BTreeMap<String, readerd_client::v1::DatasetSpec> =
        serde_json::from_str(datasets_json).unwrap();
    assert!(!datasets.is_empty());
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["grpc"]["port"].as_i64(), Some(port));
        assert_eq!(container[probe]["grpc"]["service"].as_str(), Some("readerd.v1.DataService"));
    }
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(grace > 30, "the pod waits longer than readerd's --shutdown-grace");
    assert!(container["resources"]["requests"]["memory"].as_str().is_some());
    let service = docs.iter().find(|d| d["kind"].as_str() == Some("Service")).unwrap();
    assert_eq!(service["spec"]["ports"][0]["port"].as_i64(), Some(port));
}

/// Every manifest under deploy/k8s is valid against Kubernetes' own schemas (strict: no
/// unknown fields), offline, with the `kubernetes-validate` package (tests/requirements.txt).
#[test]
fn kubernetes_manifests_are_valid_against_the_kubernetes_schemas() {
    let dir = format!("{}/../deploy/k8s", env!("CARGO_MANIFEST_DIR"));
    let mut manifests: Vec<String> = Vec::new();
    for folder in [dir.clone(), format!("{dir}/examples")] {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                manifests.push(path.display().to_string());
            }
        }
    }
    assert!(manifests.len() >= 4, "{manifests:?}");
    let validated = Command::new("kubernetes-validate").args(["--strict", "--quiet"]).args(&manifests).output();
    let output = validated.expect("kubernetes-validate is needed: pip install -r tests/requirements.txt");
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{said}");
}

/// The example autoscaler scales the StatefulSet of readerd.yaml on a series readerd
/// exports, through the Prometheus adapter's rule for it.
#[test]
fn the_autoscaler_scales_the_statefulset_on_the_replicas_readerd_recommends() {
    let docs = load("k8s/examples/autoscaling.yaml");
    let hpa = docs.iter().find(|d| d["kind"].as_str() == Some("HorizontalPodAutoscaler")).unwrap();
    let statefulset = load("k8s/readerd.yaml").into_iter().find(|d| d["kind"].as_str() == Some("StatefulSet")).unwrap();
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"].as_str(), Some("StatefulSet"));
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], statefulset["metadata"]["name"]);
    let external = &hpa["spec"]["metrics"][0]["external"];
    let metric = external["metric"]["name"].as_str().unwrap();
    assert_eq!(external["target"]["averageValue"].as_str(), Some("1"), "desired = the recommended count");
    let adapter = docs.iter().find(|d| d["kind"].as_str() == Some("ConfigMap")).unwrap();
    let rules = YamlLoader::load_from_str(adapter["data"]["config.yaml"].as_str().unwrap()).unwrap();
    let rule = &rules[0]["externalRules"][0];
    assert_eq!(rule["name"]["as"].as_str(), Some(metric));
    let series = rule["seriesQuery"].as_str().unwrap().split('{').next().unwrap().to_owned();
    // The series is one a running readerd exports.
    let metrics_addr = readerd_tests::free_address();
    let data = tempfile::tempdir().unwrap();
    let _server = readerd_tests::ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    let exported = readerd_tests::scrape_metrics(&metrics_addr);
    assert!(exported.contains(&format!("# TYPE {series} gauge")), "{series} not in\n{exported}");
}
